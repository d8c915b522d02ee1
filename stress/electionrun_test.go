package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock/internal/redistest"
)

// electionLoad is a short, contended election workload: candidates that
// give up, and leaders that proclaim, with two observers of each
// election.
var electionLoad = []string{
	"-kind", "election", "-locks", "2", "-clients", "3", "-goroutines", "3",
	"-hold", "0-1ms", "-giveup", "0.3", "-patience", "1ms-30ms", "-proclaim", "0.5",
	"-observers", "2", "-seed", "7", "-json",
}

// readElectionHistory reads a history file of the election kind: the
// attempts, then the observers' records.
func readElectionHistory(t *testing.T, path string) ([]attempt, []watch) {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var as []attempt
	var ws []watch
	for l := range bytes.Lines(b) {
		var probe struct {
			Observer string `json:"observer"`
		}
		require.NoError(t, json.Unmarshal(l, &probe))
		if probe.Observer != "" {
			var w watch
			require.NoError(t, json.Unmarshal(l, &w))
			ws = append(ws, w)
			continue
		}
		var a attempt
		require.NoError(t, json.Unmarshal(l, &a))
		as = append(as, a)
	}
	return as, ws
}

// checkElectionReport checks what the report of a clean election run
// must show.
func checkElectionReport(t *testing.T, r report, observers int) {
	t.Helper()
	assert.Zero(t, r.ViolationSums.Counted, "%v", r.ViolationSums)
	assert.Equal(t, runElection, r.Kind)
	assert.Zero(t, r.Outcomes[outPending])
	assert.Zero(t, r.Outcomes[outTryFailed], "an Election has no TryLock")
	assert.Positive(t, r.Outcomes[outGaveUp], "the workload should make candidates give up")
	e := r.Election
	require.NotNil(t, e)
	assert.Equal(t, r.Outcomes[outGranted], e.Leaderships)
	assert.Positive(t, e.Resigned)
	assert.Positive(t, e.ByCampaign)
	assert.Greater(t, e.Proclaims, e.ByCampaign)
	assert.Equal(t, observers, e.Observers)
	assert.Greater(t, e.Views, observers)
	assert.Greater(t, e.Changes, e.Leaderships)
	assert.Positive(t, e.Lag.N)
	assert.LessOrEqual(t, e.Lag.P50, e.Lag.P99)
	assert.LessOrEqual(t, e.Lag.Max, e.Bound)
	assert.Positive(t, r.Handover.N, "Resign hands over by push")
}

func TestElectionRunOnEmbeddedRedisFindsNoViolation(t *testing.T) {
	history := filepath.Join(t.TempDir(), "history.jsonl")
	code, out, errs := runCmd(t, append(electionLoad, "-duration", "2s", "-history", history)...)
	require.Equal(t, exitOK, code, "stderr: %s\nstdout: %s", errs, out)
	r := decodeReport(t, out)
	checkElectionReport(t, r, 4)
	assert.Contains(t, r.Workload, "elections on 2 names, 2 observers each, 3 clients × 3 goroutines of candidates in this process")

	var text bytes.Buffer
	require.NoError(t, r.write(&text, false))
	assert.Contains(t, text.String(), "\nelection:    ")
	assert.Contains(t, text.String(), "\nlag:         p50 ")
	assert.Contains(t, text.String(), "(Resign called to the next candidate's election)")

	as, ws := readElectionHistory(t, history)
	require.Len(t, ws, 4)
	for _, w := range ws {
		assert.True(t, w.Settled, "%s", w.Observer)
		assert.Equal(t, int64(0), w.Views[len(w.Views)-1].Term, "%s ends without a leader", w.Observer)
	}
	electionCheckerCatchesTampering(t, as, ws)
}

// electionCheckerCatchesTampering shows that the observers' check can
// fail on a real history: it passes as recorded, and each kind of
// tampering is caught.
func electionCheckerCatchesTampering(t *testing.T, as []attempt, ws []watch) {
	t.Helper()
	judge := func(f func(ws []watch)) map[violationKind]int {
		c := slices.Clone(ws)
		for i := range c {
			c[i].Views = slices.Clone(c[i].Views)
		}
		f(c)
		ec := &electionCheck{Bound: time.Second, Lease: 5 * time.Second}
		return kinds(ec.check(as, c))
	}
	require.Empty(t, judge(func([]watch) {}))

	// The first observer's views with a leader, as it received them.
	w := &ws[0]
	var led []int
	for i, v := range w.Views {
		if v.Term > 0 {
			led = append(led, i)
		}
	}
	require.Greater(t, len(led), 4, "too few views to tamper with")

	// A view received 2s late: the observer lagged the changes it showed.
	assert.Contains(t, judge(func(ws []watch) {
		v := &ws[0].Views
		i := led[len(led)/2]
		late := (*v)[i]
		late.At = late.At.Add(2 * time.Second)
		*v = append(slices.Delete(*v, i, len(*v)), late)
		ws[0].End = late.At.Add(time.Millisecond)
		*v = append(*v, view{At: ws[0].End})
	}), viewLag)
	// Two views of different terms swapped: terms went back.
	assert.Contains(t, judge(func(ws []watch) {
		v := ws[0].Views
		for j := 1; j < len(led); j++ {
			if x, y := &v[led[j-1]], &v[led[j]]; x.Term != y.Term {
				x.Term, x.Value, x.Client, y.Term, y.Value, y.Client = y.Term, y.Value, y.Client, x.Term, x.Value, x.Client
				return
			}
		}
	}), viewBack)
	// A value nobody had.
	assert.Contains(t, judge(func(ws []watch) { ws[0].Views[led[0]].Value = "nobody" }), viewFalse)
	// A last view with a leader.
	assert.Contains(t, judge(func(ws []watch) {
		ws[0].Views = append(ws[0].Views, view{Term: w.Views[led[len(led)-1]].Term, Value: w.Views[led[len(led)-1]].Value,
			Client: w.Views[led[len(led)-1]].Client, At: ws[0].End})
	}), viewFinal)
}

// A real server, with its pauses, and the candidates and observers in
// two worker processes: the observers of both wait for the word that
// every candidate of the run has ended.
func TestElectionRunWithPausesInWorkerProcesses(t *testing.T) {
	redistest.Slow(t)
	load := slices.Concat(electionLoad, []string{"-lease", "1s", "-waiter-ttl", "1s", "-grace", "5s"})
	r := runChaosWith(t, load, chaosPause, "-procs", "2", "-duration", "3s", "-every", "700ms", "-down", "300ms")
	checkElectionReport(t, r, 4)
	assert.Contains(t, r.Workload, "in 2 processes")
	for _, es := range r.ViolationSums.Examples {
		for _, e := range es {
			if strings.HasPrefix(e, string(viewLag)) {
				assert.Contains(t, e, "[excused: fault ")
			}
		}
	}
}
