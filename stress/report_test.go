package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestReportSummarisesAHistory(t *testing.T) {
	h := cleanHistory()
	h[1].Push, h[4].Push = 0.25, 0.75 // two pushes whose latency the Observer knew
	vs := check(h, 0, oneTicket)
	r := buildReport(config{}, "test", h, vs, 2e9, cmdTally{Detailed: true, Total: 50, Calls: map[string]int64{"evalsha": 20, "get": 30}, Span: 2e9}, nil)
	assert.Equal(t, len(h), r.Attempts)
	assert.Equal(t, 5, r.Outcomes[outGranted])
	assert.Equal(t, 1, r.Outcomes[outGaveUp])
	assert.Equal(t, 1, r.Outcomes[outTryFailed])
	assert.InDelta(t, 2.5, r.GrantsPerSec, 1e-9)
	assert.InDelta(t, 10.0, r.Commands.PerGrant, 1e-9)
	assert.InDelta(t, 4.0, r.Commands.Top["evalsha"], 1e-9)
	// w2 was queued when w1 started to unlock at 5ms and granted at 7ms;
	// w5 queued when w2 unlocked at 9ms, granted at 10ms.
	assert.Equal(t, 2, r.Handover.N)
	assert.InDelta(t, 1.0, r.Handover.P50, 1e-9)
	assert.InDelta(t, 2.0, r.Handover.Max, 1e-9)
	assert.Equal(t, 2, r.Push.N)
	assert.InDelta(t, 0.75, r.Push.Max, 1e-9)
	// Grants per worker: w1 2 (one on each lock), w2 1, w5 1, w6 1, w3 0, w4 0.
	assert.Equal(t, 6, r.Fairness.Workers)
	assert.InDelta(t, 25.0/(6*7), r.Fairness.Jain, 1e-9)
	var text bytes.Buffer
	require.NoError(t, r.write(&text, false))
	assert.Contains(t, text.String(), "violations:  none")
	assert.Contains(t, text.String(), "10.0 commands per grant")
	assert.Contains(t, text.String(), "push:        p50 ")
}

func TestReportShowsViolationsAndSnapshots(t *testing.T) {
	h := []attempt{hold("w1", 0, 1, 5, 1), queued("w2", 2, 2, 4, 6, 2)}
	vs := check(h, 0, oneTicket)
	require.NotEmpty(t, vs)
	snaps := map[string]string{"a": "lock \"a\" at ... (server clock)\n  free\n"}
	r := buildReport(config{}, "test", h, vs, time.Second, cmdTally{Err: errors.New("refused")}, snaps)
	assert.Equal(t, 1, r.ViolationSums.ByKind[overlapped])

	var text bytes.Buffer
	require.NoError(t, r.write(&text, false))
	assert.Contains(t, text.String(), "violations:  1\n  overlap: 1\n    - overlap on a: w2 was granted")
	assert.Contains(t, text.String(), "after the run, lock \"a\"")
	assert.Contains(t, text.String(), "commands per grant n/a (INFO not readable: refused)")

	var js bytes.Buffer
	require.NoError(t, r.write(&js, true))
	var back report
	require.NoError(t, json.Unmarshal(js.Bytes(), &back))
	assert.Equal(t, r.ViolationSums, back.ViolationSums)
	assert.Equal(t, snaps, back.Snapshots)
}

// The workload line counts the Clients that run: with worker processes,
// every process gets one at least.
func TestWorkloadLineCountsTheClientsThatRun(t *testing.T) {
	c := config{Kind: runMutex, Locks: 3, Clients: 4, Goroutines: 4, Duration: time.Minute}
	assert.Contains(t, workload(c), "4 clients × 4 goroutines in this process")
	c.Procs = 8
	assert.Contains(t, workload(c), "8 clients × 4 goroutines in 8 processes")
	c.Clients = 32
	assert.Contains(t, workload(c), "32 clients × 4 goroutines in 8 processes")
}
