package main

import (
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock/internal/redistest"
)

// runQuorumElection runs the election workload on three masters the
// command starts, with args, writing the history to a file, and
// requires a clean run. It returns the report, the attempts and the
// observers' records.
func runQuorumElection(t *testing.T, args ...string) (report, []attempt, []watch) {
	t.Helper()
	history := filepath.Join(t.TempDir(), "history.jsonl")
	code, out, errs := runCmd(t, slices.Concat(electionLoad, []string{"-masters", "3", "-history", history}, args)...)
	require.Equal(t, exitOK, code, "stderr: %s\nstdout: %s", errs, out)
	r := decodeReport(t, out)
	assert.Zero(t, r.ViolationSums.Counted, "%v", r.ViolationSums)
	require.NotNil(t, r.Quorum)
	assert.Len(t, r.Quorum.Masters, 3)
	assert.Positive(t, r.Quorum.Bakery.Pairs, "candidates ahead of later Campaigns")
	assert.Zero(t, r.Quorum.Bakery.Passed)
	assert.Contains(t, r.Redis, "quorum of 3 masters")
	as, ws := readElectionHistory(t, history)
	return r, as, ws
}

// Elections on a quorum: the candidates' line is checked as the quorum
// lock's (bakery order), and the observers' views as what a majority of
// the masters can show.
func TestElectionRunOnAQuorumFindsNoViolation(t *testing.T) {
	redistest.Slow(t)
	r, as, ws := runQuorumElection(t, "-duration", "2s")
	checkElectionReport(t, r, 4)
	assert.Nil(t, r.Faults)
	for _, w := range ws {
		assert.True(t, w.Settled, "%s", w.Observer)
	}
	quorumElectionCheckerCatchesTampering(t, as, ws)
}

// quorumElectionCheckerCatchesTampering shows that the quorum's rules
// of the observers' check can fail on a real history: it passes as
// recorded, and a view of a proclaimed value under another term, and a
// view of a leadership's first value after one of a value it proclaimed
// once an earlier proclaim had returned, are caught.
func quorumElectionCheckerCatchesTampering(t *testing.T, as []attempt, ws []watch) {
	t.Helper()
	judge := func(f func(ws []watch)) map[violationKind]int {
		c := slices.Clone(ws)
		for i := range c {
			c[i].Views = slices.Clone(c[i].Views)
		}
		f(c)
		ec := &electionCheck{Bound: time.Second, Lease: 5 * time.Second, Quorum: true}
		return kinds(ec.check(as, c))
	}
	require.Empty(t, judge(func([]watch) {}))

	// A leadership with two proclaims that returned, the second seen by
	// an observer: the view of it, and where it is. Preferred: a view
	// whose observer saw the first proclaim's value before it, so that
	// its read certainly began after the Campaign returned (the watcher
	// reads one after another, and the first Proclaim was sent after
	// that), where a term below the committed one is not provisional.
	second := map[string]*attempt{}
	for i := range as {
		if a := &as[i]; len(a.Proclaims) >= 2 && a.Proclaims[0].Err == "" && a.Proclaims[1].Err == "" {
			second[a.Proclaims[1].Value] = a
		}
	}
	wi, vi, after := -1, -1, false
	var lead *attempt
	for i, w := range ws {
		for j, v := range w.Views {
			a := second[v.Value]
			if a == nil || v.Term != a.Token || after {
				continue
			}
			wi, vi, lead = i, j, a
			after = slices.ContainsFunc(w.Views[:j], func(e view) bool { return e.Value == a.Proclaims[0].Value && e.Term == a.Token })
		}
	}
	require.GreaterOrEqual(t, wi, 0, "no view of a second proclaim in the history")

	// Its value under a term above the leadership's: no reading shows a
	// term above the committed one.
	assert.Contains(t, judge(func(ws []watch) { ws[wi].Views[vi].Term++ }), viewFalse)
	// Under a term below it: where the read began after the Campaign
	// returned, a view of no leadership, or, when the observer had seen
	// the leadership's term before it, a term that went back. (A read
	// that may have begun before is provisional: the hand-made histories
	// of electcheck_test.go try both.)
	if after {
		lowered := judge(func(ws []watch) { ws[wi].Views[vi].Term-- })
		_, wrong := lowered[viewFalse]
		_, back := lowered[viewBack]
		assert.True(t, wrong || back, "a view under a lowered term: %v", lowered)
	} else {
		t.Log("no observer saw a first and a second proclaim of one leadership: the lowered term is not tried")
	}
	// The leadership's first value read after it.
	assert.Contains(t, judge(func(ws []watch) {
		v := ws[wi].Views[vi]
		v.Value, v.At = lead.Value, v.At.Add(time.Microsecond)
		ws[wi].Views = slices.Insert(ws[wi].Views, vi+1, v)
	}), viewBack)
}
