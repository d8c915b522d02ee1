package main

import (
	"context"
	"os/exec"
	"testing"
)

// startServer starts a redis-server of the test's own, skipping the test
// when there is none on PATH.
func startServer(t *testing.T) *server {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("redis-server is not on PATH")
	}
	srv, err := openServer(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.close)
	return srv
}

// TestCommandStatsCountTheCommandsScriptsRun checks what commandCalls
// relies on: Redis counts a script's commands beside the EVAL that ran
// them, and the benchmark's own INFO and CONFIG are left out.
func TestCommandStatsCountTheCommandsScriptsRun(t *testing.T) {
	srv := startServer(t)
	ctx := context.Background()
	if err := srv.resetStats(ctx); err != nil {
		t.Fatal(err)
	}
	before, err := srv.stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	err = srv.admin.Eval(ctx, "redis.call('INCR', KEYS[1]); return redis.call('INCR', KEYS[1])", []string{"test:stats"}).Err()
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.admin.Get(ctx, "test:stats").Err(); err != nil {
		t.Fatal(err)
	}
	after, err := srv.stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := after.commands - before.commands; got != 4 {
		t.Errorf("%d commands, want 4: EVAL, the two INCR it ran, GET", got)
	}
}
