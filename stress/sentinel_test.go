package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock/internal/redistest"
)

func TestRunAgainstSentinelsFindsNoViolation(t *testing.T) {
	redistest.Slow(t)
	set := startSentinelSet(t)
	via := strings.Join(set.sentinels, ",")
	tests := []struct {
		name    string
		args    []string
		workers int
	}{
		{"in this process", nil, 9},
		{"in worker processes", []string{"-procs", "2", "-clients", "2"}, 6},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errs := runCmd(t, slices.Concat(smallLoad, []string{"-sentinel", via, "-master", set.name}, tt.args)...)
			require.Equal(t, exitOK, code, "stderr: %s\nstdout: %s", errs, out)
			r := decodeReport(t, out)
			assert.Zero(t, r.ViolationSums.Total, "%v", r.ViolationSums)
			assert.Equal(t, "sentinel master "+set.name+" via "+via, r.Redis)
			assert.Positive(t, r.Outcomes[outGranted])
			assert.Equal(t, tt.workers, r.Fairness.Workers)
			require.NotNil(t, r.Commands, r.CommandsNA)
			assert.True(t, r.Commands.Detailed)
			assert.False(t, r.Commands.LowerBound, "%q", r.Commands.Unread)
			assertSane(t, r.Commands)
		})
	}
}

func TestCommandFigureSurvivesAFailover(t *testing.T) {
	redistest.Slow(t)
	set := startSentinelSet(t)
	done := make(chan cmdResult, 1)
	go func() { // the test waits for done below
		done <- runCmdResult(t, "-sentinel", strings.Join(set.sentinels, ","), "-master", set.name,
			"-duration", "8s", "-locks", "2", "-clients", "2", "-goroutines", "2", "-json")
	}()
	waitFor(t, "the run to get going", func(ctx context.Context) error { return processedAtLeast(ctx, set.primary.Addr, 1000) })
	set.primary.Stop()
	waitFor(t, "the sentinels to promote the replica", func(ctx context.Context) error {
		return infoIs(ctx, set.replica.Addr, "role", "master")
	})
	res := <-done
	waitRedialsEnd(t)
	r := decodeReport(t, res.out)
	t.Logf("exit status %d, %d violations; stderr: %s", res.code, r.ViolationSums.Total, res.errs)

	require.NotNil(t, r.Commands, r.CommandsNA)
	assert.True(t, r.Commands.LowerBound)
	unread := strings.Join(r.Commands.Unread, "; ")
	assert.Contains(t, unread, set.primary.Addr+" (stopped answering)")
	assert.Contains(t, unread, set.replica.Addr+" (became the primary)")
	assertSane(t, r.Commands)
}

// assertSane checks that a commands-per-grant figure is one a run of the
// stress workload can have: a few script calls and the commands they run
// per grant.
func assertSane(t *testing.T, c *commandSums) {
	t.Helper()
	assert.Positive(t, c.Total)
	assert.Greater(t, c.PerGrant, 5.0)
	assert.Less(t, c.PerGrant, 500.0)
}

// cmdResult is what the command returned.
type cmdResult struct {
	code      int
	out, errs string
}

func runCmdResult(t *testing.T, args ...string) cmdResult {
	code, out, errs := runCmd(t, args...)
	return cmdResult{code, out, errs}
}

// processedAtLeast checks that the server at addr has processed at least
// n commands.
func processedAtLeast(ctx context.Context, addr string, n int64) error {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	info, err := c.Info(ctx, "stats").Result()
	if err != nil {
		return err
	}
	r := parseInfo(addr, time.Now(), info)
	if r.Total < n {
		return fmt.Errorf("%s has processed %d commands, not yet %d", addr, r.Total, n)
	}
	return nil
}
