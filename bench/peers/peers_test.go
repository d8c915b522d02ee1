package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// runReport runs the command with args (and -json) on a redis-server of
// its own, skipping the test when there is none on PATH, and returns the
// options, the JSON report and what it printed.
func runReport(t *testing.T, args ...string) (options, report, string) {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("redis-server is not on PATH")
	}
	path := filepath.Join(t.TempDir(), "report.json")
	o, err := parseFlags(append(args, "-json", path))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out, log bytes.Buffer
	if err := run(ctx, o, &out, &log); err != nil {
		t.Fatalf("run: %v\n%s", err, log.String())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var r report
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	return o, r, out.String()
}

// TestEveryLibraryGrantsAndExcludesInEveryWorkload runs every workload
// briefly with every library on a redis-server of its own and checks that
// each library was granted the lock, never let two holders in at once, and
// that the tables and the JSON report hold every row.
func TestEveryLibraryGrantsAndExcludesInEveryWorkload(t *testing.T) {
	// The 10,000 waiters of the waiters workload take a while to queue
	// on a loaded 2-core machine under -race: a window of 200ms once saw
	// no grant of fairlock's (one CI run of eight); a second leaves room.
	o, r, out := runReport(t, "-duration", "200ms", "-waiters-duration", "1s", "-warmup", "30ms",
		"-scale-waiters", "100", "-scale-holds", "100", "-scale-window", "200ms", "-scale-names", "200")
	want := 0
	for _, w := range workloads {
		for _, lib := range libraries(o.lib) {
			if lib.runsIn(w) {
				want++
			}
		}
	}
	if got := len(r.Results); got != want {
		t.Fatalf("%d results, want %d", got, want)
	}
	if !strings.Contains(out, atomicLabel) {
		t.Errorf("no row named %q", atomicLabel)
	}
	for _, res := range r.Results {
		if res.Grants == 0 {
			t.Errorf("%s, %s: no grant (first error: %s)", res.Workload, res.Library, res.FirstError)
		}
		if res.Violations != 0 {
			t.Errorf("%s, %s: %d grants found another holder inside", res.Workload, res.Library, res.Violations)
		}
		if res.RoundTripsPerGrant < 1 {
			t.Errorf("%s, %s: %.2f round trips per grant, want at least 1", res.Workload, res.Library, res.RoundTripsPerGrant)
		}
		// A Lock and an Unlock each run at least one command.
		if res.CommandsPerGrant < 2 {
			t.Errorf("%s, %s: %.2f commands per grant, want at least 2", res.Workload, res.Library, res.CommandsPerGrant)
		}
		// Several names at once, and a semaphore's permits: fairlock's
		// MultiLock and Semaphore wait and never try again; the peers'
		// loops and the atomic try-all try at least once.
		w := workloadOf(t, res.Workload)
		switch {
		case w.countsAttempts():
			if res.AttemptsPerGrant < 1 || (res.Library == "fairlock" && res.AttemptsPerGrant != 1) {
				t.Errorf("%s, %s: %.2f attempts per grant", res.Workload, res.Library, res.AttemptsPerGrant)
			}
		default:
			if res.AttemptsPerGrant != 0 {
				t.Errorf("%s, %s: attempts per grant %.2f, counted only for several locks and semaphores",
					res.Workload, res.Library, res.AttemptsPerGrant)
			}
		}
		// On several masters, every hold of a fencing lock reads a token
		// that rose since the last; the others' holds read none.
		switch {
		case res.Workload != redlockKey || !res.Fenced:
			if res.Tokens != 0 || res.TokensNotRising != 0 {
				t.Errorf("%s, %s: %d tokens read, %d not rising", res.Workload, res.Library, res.Tokens, res.TokensNotRising)
			}
		case res.Tokens < res.Grants || res.TokensNotRising != 0:
			t.Errorf("%s, %s: %d tokens read in %d grants, %d not rising", res.Workload, res.Library, res.Tokens, res.Grants, res.TokensNotRising)
		}
		// A semaphore's grants take 1 or 2 permits each.
		if w.permits > 0 {
			if perGrant := res.PermitsPerSec / res.GrantsPerSec; perGrant < 1 || perGrant > 2 || res.HeaviestShare > 1 {
				t.Errorf("%s, %s: %.2f permits per grant, %.3f of the grants of weight 2", res.Workload, res.Library, perGrant, res.HeaviestShare)
			}
		} else if res.PermitsPerSec != 0 || res.HeaviestShare != 0 {
			t.Errorf("%s, %s: permits counted outside a semaphore", res.Workload, res.Library)
		}
	}
	if !strings.Contains(out, "attempts/grant") || r.MultiWait == "" {
		t.Errorf("the %s workload's table or its header line is missing", multiKey)
	}
	if !strings.Contains(out, "permits/s") || r.SemaphoreWait == "" {
		t.Errorf("the %s workload's table or its header line is missing", semaphoreKey)
	}
	for _, w := range workloads {
		if !strings.Contains(out, "## "+w.title) {
			t.Errorf("no table for %s", w.key)
		}
	}
	if !strings.Contains(out, "## Summary") {
		t.Errorf("no summary table")
	}
	if f := r.Floor; f == nil {
		t.Errorf("no cross-process floor, which runs by default")
	} else {
		if f.HandOvers == 0 {
			t.Errorf("the floor counted no hand-over")
		}
		if f.FairlockRatio <= 0 || !strings.Contains(out, "the cross-process floor (") {
			t.Errorf("fairlock's hold0 not compared to the floor: ratio %v", f.FairlockRatio)
		}
	}
	if r.Masters == "" || !strings.Contains(out, "| tokens |") {
		t.Errorf("the %s workload's masters or its tokens column are missing", redlockKey)
	}
	if r.Scale == nil {
		t.Errorf("no scale part, which runs by default")
	}
}

// workloadOf returns the workload of key.
func workloadOf(t *testing.T, key string) workload {
	t.Helper()
	for _, w := range workloads {
		if w.key == key {
			return w
		}
	}
	t.Fatalf("no workload %q", key)
	return workload{}
}
