package main

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// flt is a fault of kind on target "s", injected at ms, its process
// exited at exited and its server back, and ready for another fault, at
// back (0: not reached).
func flt(kind string, injected, exited, back float64) fault {
	f := fault{N: 1, Kind: kind, Target: "s", Injected: at(injected)}
	if exited > 0 {
		f.Exited = at(exited)
	}
	if back > 0 {
		f.Back, f.Ready = at(back), at(back)
	}
	return f
}

// settled returns f with the set ready for another fault at ready.
func settled(f fault, ready float64) fault {
	f.Ready = at(ready)
	return f
}

// A kill stretch is from the SIGKILL to the exit; a failover's, to the
// old primary a replica in sync (ready); a pause's, to the SIGCONT.
var (
	restartEmpty = flt(chaosRestartEmpty, 10, 10.2, 13)
	restartAOF   = flt(chaosRestartAOF, 10, 10.2, 10.5)
	killPrimary  = flt(chaosKillPrimary, 10, 10.2, 14)
	failover     = flt(chaosFailover, 10, 0, 14)
	// killTwice is a kill-primary whose set was settled only at 20: a
	// replica promoted at 14 was itself replaced.
	killTwice = settled(flt(chaosKillPrimary, 10, 10.2, 14), 20)
	paused    = flt(chaosPause, 10, 0, 12)
)

// judged returns the violations check finds in h, once the faults have
// excused what they explain.
func judged(h []attempt, faults ...fault) []violation {
	vs := check(h, 0, oneTicket)
	excuse(vs, faults, t0)
	return vs
}

// A lost lease is excused when the hold was live while the fault could
// take it away or hold its renewals up, and only then.
func TestExcuseOfALostLease(t *testing.T) {
	lost := func(start, granted, unlock float64) attempt {
		a := hold("w1", start, granted, unlock, 1)
		a.LeaseLost = true
		if unlock == 0 {
			a.UnlockStart, a.UnlockEnd = time.Time{}, time.Time{}
		}
		return a
	}
	for _, tc := range []struct {
		name    string
		f       fault
		a       attempt
		excused bool
	}{
		{"restart-empty: held across the kill", restartEmpty, lost(8, 9, 12), true},
		{"restart-empty: never unlocked", restartEmpty, lost(8, 9, 0), true},
		{"restart-empty: began before the exit, granted after", restartEmpty, lost(10.1, 11, 12), true},
		{"restart-empty: unlocking as the kill came", restartEmpty, lost(8, 9, 9.8), true},
		{"restart-empty: unlocked before the kill", restartEmpty, lost(8, 9, 9.4), false},
		{"restart-empty: began after the exit", restartEmpty, lost(10.3, 11, 12), false},
		{"kill-primary: held across the kill", killPrimary, lost(8, 9, 12), true},
		{"kill-primary: granted before the takeover", killPrimary, lost(11, 13, 13.1), true},
		{"kill-primary: began after the set was settled", killPrimary, lost(14.5, 15, 16), false},
		{"kill-primary: began after the takeover, before the set was settled", killTwice, lost(14.5, 15, 16), true},
		{"kill-primary: began after a second takeover settled the set", killTwice, lost(20.5, 21, 22), false},
		{"failover: granted while it went on", failover, lost(12, 13, 20), true},
		{"failover: began after it was done", failover, lost(14.5, 15, 16), false},
		{"pause: began while stopped", paused, lost(11, 12.5, 13), true},
		{"pause: unlocked before the stop", paused, lost(8, 9, 9.4), false},
		{"restart-aof: held across the kill", restartAOF, lost(8, 9, 12), true},
		{"restart-aof: unlocked before the kill", restartAOF, lost(8, 9, 9.4), false},
		{"restart-aof: began after it was back", restartAOF, lost(10.6, 11, 12), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vs := judged([]attempt{tc.a}, tc.f)
			require.Equal(t, map[violationKind]int{leaseLost: 1}, kinds(vs))
			if tc.excused {
				assert.Equal(t, "fault 1 ("+tc.f.Kind+" of s at +0.01s) came while the hold was live", vs[0].Excused)
				assert.Zero(t, counted(vs))
			} else {
				assert.Empty(t, vs[0].Excused)
				assert.Equal(t, 1, counted(vs))
			}
		})
	}
}

// passedHistory is one lock's history in which w3 passed w2 (fifo), or,
// with try, a TryLock passed w2 (barging): h holds from 1 to 5, w2 joins
// at 2, w3 (or the TryLock) is granted at 6 and w2 at 9.
func passedHistory(try bool) []attempt {
	g := queued("w3", 3, 3, 6, 7, 2)
	if try {
		g.Kind, g.Joins, g.Start = kindTry, nil, at(5.8)
	}
	return []attempt{hold("h", 0, 1, 5, 1), queued("w2", 2, 2, 9, 10, 3), g}
}

// A grant that passed a waiter is excused when a fault that may undo
// acknowledged writes came between the waiter's join and that grant:
// the join, or the polls that kept its place, may have been undone.
func TestExcuseOfAPassedWaiter(t *testing.T) {
	for _, tc := range []struct {
		name    string
		f       fault
		excused bool
	}{
		{"failover between the join and the grant", flt(chaosFailover, 4, 0, 5.5), true},
		{"failover done before the join", flt(chaosFailover, 0.5, 0, 1.5), false},
		{"failover after the grant", flt(chaosFailover, 7, 0, 8), false},
		{"failover never done, from before the grant", flt(chaosFailover, 5, 0, 0), true},
		{"restart-empty between them", flt(chaosRestartEmpty, 4, 4.1, 5), true},
		{"kill-primary between them", flt(chaosKillPrimary, 4, 4.1, 5), true},
		{"kill-primary settled before the join", flt(chaosKillPrimary, 0.5, 0.6, 1.5), false},
		{"kill-primary taken over before the join, settled after it", settled(flt(chaosKillPrimary, 0.5, 0.6, 1.5), 7), true},
		{"pause between them: nothing undone", flt(chaosPause, 4, 0, 5.5), false},
		{"restart-aof between them: nothing undone", flt(chaosRestartAOF, 4, 4.1, 4.5), false},
	} {
		for _, try := range []bool{false, true} {
			kind := outOfOrder
			if try {
				kind = barged
			}
			t.Run(tc.name+" ("+string(kind)+")", func(t *testing.T) {
				vs := judged(passedHistory(try), tc.f)
				require.Equal(t, map[violationKind]int{kind: 1}, kinds(vs), "%v", vs)
				assert.Equal(t, tc.excused, vs[0].Excused != "", "%v", vs[0])
				if tc.excused {
					assert.Contains(t, vs[0].Excused, "may have undone the waiter's place in line")
				}
			})
		}
	}
}

// An overlap, a token that goes back, a waiter left behind and an error
// are never excused, whatever fault came with them.
func TestExcuseNeverCoversOverlapsTokensOrWaitersLeftBehind(t *testing.T) {
	behind := attempt{Worker: "w4", Lock: "a", Kind: kindLock, Outcome: outPending, Start: at(9)}
	failed := hold("w5", 12, 13, 14, 9)
	failed.Err = "unlock: connection refused"
	h := []attempt{
		hold("w1", 0, 1, 5, 2),
		hold("w2", 0, 4, 6, 3), // granted while w1 held
		hold("w3", 0, 7, 8, 1), // token back from 3
		behind,
		failed,
	}
	for _, f := range []fault{restartEmpty, killPrimary, failover, paused, restartAOF, flt(chaosFailover, 0, 0, 20)} {
		vs := judged(h, f)
		assert.Equal(t, map[violationKind]int{overlapped: 1, tokenOrder: 1, leftBehind: 1, errored: 1}, kinds(vs), f.Kind)
		assert.Equal(t, len(vs), counted(vs), "%s excused %v", f.Kind, vs)
	}
}

// A fault on a Cluster's master excuses only verdicts on the locks it
// served; a MultiLock's verdict when any of its names was.
func TestExcuseOnAClusterKeepsToTheLocksOfTheKilledMaster(t *testing.T) {
	f := killPrimary
	f.Locks = []string{"b", "c"}
	for _, tc := range []struct {
		lock    string
		excused bool
	}{{"a", false}, {"b", true}, {"a+c", true}, {"a+d", false}} {
		a := hold("w1", 8, 9, 12, 1)
		a.Lock, a.LeaseLost = tc.lock, true
		vs := judged([]attempt{a}, f)
		require.Len(t, vs, 1)
		assert.Equal(t, tc.excused, vs[0].Excused != "", tc.lock)
	}
}

// The report counts the excused verdicts apart, names the fault in each,
// and lists the ones that count first.
func TestReportSaysWhichVerdictsAreExcused(t *testing.T) {
	a := hold("w1", 8, 9, 12, 1)
	a.LeaseLost = true
	b := hold("w2", 20, 21, 22, 2)
	b.LeaseLost = true
	vs := judged([]attempt{a, b}, restartEmpty)
	s := summarise(vs)
	assert.Equal(t, violationCounts{Total: 2, Excused: 1, Counted: 1,
		ByKind: map[violationKind]int{leaseLost: 2}, ExcusedByKind: map[violationKind]int{leaseLost: 1},
		Examples: s.Examples}, s)
	require.Len(t, s.Examples[leaseLost], 2)
	assert.NotContains(t, s.Examples[leaseLost][0], "excused")
	assert.Contains(t, s.Examples[leaseLost][1], "[excused: fault 1 (restart-empty of s at +0.01s) came while the hold was live]")

	var out strings.Builder
	require.NoError(t, (&report{ViolationSums: s}).write(&out, false))
	assert.Contains(t, out.String(), "violations:  2, 1 of them excused by a fault: 1 counted\n  lease-lost: 2 (1 excused)\n")
}
