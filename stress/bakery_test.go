package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// checkQuorum checks h as the history of a run on a quorum of masters
// that lost their keys in outages.
func checkQuorum(h []attempt, outages ...outage) ([]violation, bakeryTally) {
	q := &quorumCheck{Outages: outages}
	vs := checkRun(h, 5*time.Second, oneTicket, q)
	return vs, q.Tally
}

// beganAt is a with its EventWaitStarted at ms.
func beganAt(a attempt, ms float64) attempt {
	a.Began = at(ms)
	return a
}

// bakeryHistory is one lock's history: w1 holds from 1 to 5; w2 joins
// (answered at 2.7) and w3 begins after that (3.1), so w2 is granted
// first; a TryLock comes when the line is empty. With swap, w3 is granted
// before w2: it passed w2.
func bakeryHistory(swap bool) []attempt {
	w2 := beganAt(queued("w2", 2, 2.2, 5.5, 7, 2), 2.1)
	w3 := beganAt(queued("w3", 3, 3.2, 7.5, 9, 3), 3.1)
	if swap {
		w2.Granted, w2.Token, w2.UnlockStart, w2.UnlockEnd = at(7.5), 3, at(9), at(9.5)
		w3.Granted, w3.Token, w3.UnlockStart, w3.UnlockEnd = at(5.5), 2, at(7), at(7.5)
	}
	return []attempt{
		beganAt(hold("w1", 0, 1, 5, 1), 0.1),
		w2, w3,
		beganAt(try("w4", 9.5, 9.8, 10, 4), 9.6),
	}
}

func TestBakeryCheckAcceptsGrantsInBakeryOrder(t *testing.T) {
	vs, tally := checkQuorum(bakeryHistory(false))
	assert.Empty(t, vs)
	assert.Equal(t, bakeryTally{Pairs: 1}, tally, "w2 ahead of w3")
}

func TestBakeryCheckCatchesAGrantThatPassedAnEarlierJoin(t *testing.T) {
	vs, tally := checkQuorum(bakeryHistory(true))
	require.Len(t, vs, 1)
	assert.Equal(t, bakeryPass, vs[0].Kind)
	assert.Contains(t, vs[0].Detail, "Lock by w3 began at +0.003100s, after the join of w2 had reached a majority")
	assert.Contains(t, vs[0].Detail, "granted later (token 3 > 2)")
	assert.Equal(t, bakeryTally{Pairs: 1, Passed: 1}, tally)
}

// A TryLock is bound by the order too: it takes the lock only where no
// one waits.
func TestBakeryCheckCatchesATryLockThatPassedAWaiter(t *testing.T) {
	h := []attempt{
		beganAt(hold("w1", 0, 1, 5, 1), 0.1),
		beganAt(queued("w2", 2, 2.2, 6, 7, 3), 2.1),
		beganAt(try("w3", 3, 5.2, 5.4, 2), 3.1),
	}
	vs, tally := checkQuorum(h)
	assert.Equal(t, map[violationKind]int{bakeryPass: 1}, kinds(vs))
	require.NotEmpty(t, vs)
	assert.Contains(t, vs[0].Detail, "TryLock by w3")
	assert.Equal(t, 1, tally.Passed)
}

// Two calls whose doorways overlap may be served in either order: w3
// began before w2's join had reached a majority. One server's FIFO check
// would flag it (w2's join was answered before w3's was sent); the
// bakery check must not.
func TestBakeryCheckAllowsOvertakingByACallThatBeganBeforeTheJoinWasAnswered(t *testing.T) {
	w2 := beganAt(queued("w2", 2, 2.2, 7.5, 9, 3), 2.1) // join answered 2.7
	w3 := beganAt(queued("w3", 2.4, 3, 5.5, 7, 2), 2.5)
	h := []attempt{beganAt(hold("w1", 0, 1, 5, 1), 0.1), w2, w3}

	assert.Equal(t, map[violationKind]int{outOfOrder: 1}, kinds(check(h, 0, oneTicket)), "one server's rule")
	vs, tally := checkQuorum(h)
	assert.Empty(t, vs)
	assert.Equal(t, bakeryTally{}, tally)
}

// Without an EventWaitStarted (a history from before it was recorded), the
// start of the call stands for it: earlier, so no more pairs.
func TestBakeryCheckFallsBackToTheStartOfTheCall(t *testing.T) {
	h := bakeryHistory(true)
	for i := range h {
		h[i].Began = time.Time{}
	}
	vs, tally := checkQuorum(h)
	assert.Equal(t, map[violationKind]int{bakeryPass: 1}, kinds(vs))
	assert.Equal(t, 1, tally.Pairs)

	h[2].Start = at(2.5) // w3 called Lock before w2's join was answered
	vs, tally = checkQuorum(h)
	assert.Empty(t, vs)
	assert.Zero(t, tally.Pairs)
}

func TestBakeryCheckOfAWaiterThatGaveUp(t *testing.T) {
	x := beganAt(queued("w3", 3, 3.2, 5.5, 7, 2), 3.1)
	for _, tc := range []struct {
		name     string
		deadline float64
		want     map[violationKind]int
		pairs    int
	}{
		{"before the other's grant: it may have left first", 4, map[violationKind]int{}, 0},
		{"after the other's grant: it was passed", 6, map[violationKind]int{bakeryPass: 1}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := beganAt(gaveUp("w2", 2, 2.2, tc.deadline), 2.1)
			vs, tally := checkQuorum([]attempt{beganAt(hold("w1", 0, 1, 5, 1), 0.1), w, x})
			assert.Equal(t, tc.want, kinds(vs))
			assert.Equal(t, tc.pairs, tally.Pairs)
			assert.Equal(t, tc.pairs, tally.Passed)
		})
	}
}

// A waiter that started over with a fresh entry lost its place at a
// moment the record does not show: only its last join counts.
func TestBakeryCheckCountsOnlyTheLastJoinOfAWaiterThatJoinedAgain(t *testing.T) {
	h := bakeryHistory(true)
	h[1].Joins = append(h[1].Joins, join{Sent: at(4), Answered: at(4.5)}) // w2, after w3 began
	vs, tally := checkQuorum(h)
	assert.Empty(t, vs)
	assert.Equal(t, bakeryTally{Rejoined: 1}, tally)

	h[1].Joins[1] = join{Sent: at(2.8), Answered: at(3)} // before w3 began: it counts
	vs, tally = checkQuorum(h)
	assert.Equal(t, map[violationKind]int{bakeryPass: 1}, kinds(vs))
	assert.Equal(t, bakeryTally{Pairs: 1, Passed: 1, Rejoined: 1}, tally)
}

// A master that lost its keys between W's join and X's grant may have
// been in W's majority: the pair is left out. Outside that stretch the
// outage changes nothing.
func TestBakeryCheckLeavesOutPairsAcrossALossOfKeys(t *testing.T) {
	for _, tc := range []struct {
		name   string
		o      outage
		passed int
		across int
	}{
		{"while the join was sent", outage{at(2.3), at(2.4)}, 0, 1},
		{"while both waited", outage{at(4), at(4.1)}, 0, 1},
		{"before the join was sent", outage{at(1.5), at(2.1)}, 1, 0},
		{"after the grant", outage{at(5.6), at(5.7)}, 1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vs, tally := checkQuorum(bakeryHistory(true), tc.o)
			assert.Len(t, vs, tc.passed)
			assert.Equal(t, tc.passed, tally.Passed)
			assert.Equal(t, tc.passed, tally.Pairs)
			assert.Equal(t, tc.across, tally.AcrossRestart)
		})
	}
}

func TestBakeryCheckCatchesAWaiterNeverGranted(t *testing.T) {
	w2 := beganAt(queued("w2", 2, 2.2, 0, 0, 0), 2.1)
	w2.Granted, w2.UnlockStart, w2.UnlockEnd, w2.Outcome = time.Time{}, time.Time{}, time.Time{}, outPending
	h := []attempt{beganAt(hold("w1", 0, 1, 5, 1), 0.1), w2, beganAt(queued("w3", 3, 3.2, 5.5, 7, 2), 3.1)}
	vs, _ := checkQuorum(h)
	assert.Equal(t, map[violationKind]int{bakeryPass: 1, leftBehind: 1}, kinds(vs))
}

// One grant that passed several waiters is one violation; the tally
// counts every pair.
func TestBakeryCheckReportsAGrantOnceForEveryWaiterItPassed(t *testing.T) {
	h := []attempt{
		beganAt(hold("w1", 0, 1, 5, 1), 0.1),
		beganAt(queued("w2", 2, 2.2, 7.5, 8, 3), 2.1),
		beganAt(queued("w3", 2.75, 2.85, 8.5, 9, 4), 2.8),
		beganAt(queued("w4", 3.4, 3.6, 5.5, 7, 2), 3.5),
	}
	vs, tally := checkQuorum(h)
	require.Len(t, vs, 1)
	assert.Contains(t, vs[0].Detail, "passed 1 more waiter(s)")
	assert.Equal(t, bakeryTally{Pairs: 3, Passed: 2}, tally, "w2 before w3, kept; w2 and w3 before w4, passed")
}

// The checks that hold for any lock hold on a quorum: one hold at a time,
// tokens rising in grant order.
func TestQuorumCheckStillCatchesOverlapAndTokens(t *testing.T) {
	h := bakeryHistory(false)
	h[2].Granted = at(6.5) // w3 while w2 held (until 7)
	assert.Contains(t, kinds(checkRun(h, 0, oneTicket, &quorumCheck{})), overlapped)

	h = bakeryHistory(false)
	h[3].Token = 2 // w4's TryLock, after w3's hold
	assert.Contains(t, kinds(checkRun(h, 0, oneTicket, &quorumCheck{})), tokenOrder)
}
