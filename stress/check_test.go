package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock/queue"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// at returns t0 plus ms milliseconds.
func at(ms float64) time.Time { return t0.Add(time.Duration(ms * float64(time.Millisecond))) }

// hold is an attempt that was granted at granted and unlocked from unlock
// to unlock+0.5ms.
func hold(worker string, start, granted, unlock float64, token int64) attempt {
	return attempt{
		Worker: worker, Lock: "a", Kind: kindLock, Outcome: outGranted,
		Start: at(start), Granted: at(granted), Token: token,
		UnlockStart: at(unlock), UnlockEnd: at(unlock + 0.5),
	}
}

// queued is hold with one join sent at sent and answered 0.5ms later.
func queued(worker string, start, sent, granted, unlock float64, token int64) attempt {
	a := hold(worker, start, granted, unlock, token)
	a.Joins = []join{{Sent: at(sent), Answered: at(sent + 0.5)}}
	return a
}

// gaveUp is a waiter that joined at sent and gave up at its deadline.
func gaveUp(worker string, start, sent, deadline float64) attempt {
	return attempt{
		Worker: worker, Lock: "a", Kind: kindLock, Outcome: outGaveUp,
		Start: at(start), Joins: []join{{Sent: at(sent), Answered: at(sent + 0.5)}},
		Deadline: at(deadline), Ended: at(deadline + 0.3),
	}
}

func try(worker string, start, granted, unlock float64, token int64) attempt {
	a := hold(worker, start, granted, unlock, token)
	a.Kind = kindTry
	return a
}

// kinds counts violations by kind.
func kinds(vs []violation) map[violationKind]int {
	m := map[violationKind]int{}
	for _, v := range vs {
		m[v.Kind]++
	}
	return m
}

func cleanHistory() []attempt {
	failedTry := attempt{Worker: "w3", Lock: "a", Kind: kindTry, Outcome: outTryFailed, Start: at(4), Ended: at(4.5)}
	other := hold("w1", 0, 0.5, 3, 1)
	other.Lock = "b"
	return []attempt{
		hold("w1", 0, 1, 5, 1),
		queued("w2", 2, 2, 7, 9, 2),     // queued behind w1, granted after its unlock
		failedTry,                       // w1 held the lock
		gaveUp("w4", 3.5, 3.5, 6),       // gave up before w2 was granted
		queued("w5", 4, 4.2, 10, 12, 3), // behind w2 and w4
		try("w6", 13, 13.5, 14, 4),      // the line was empty
		other,                           // another lock: its own tokens
	}
}

func TestCheckerAcceptsCleanHistory(t *testing.T) {
	assert.Empty(t, check(cleanHistory(), 0, oneTicket))
	assert.Empty(t, check(cleanHistory(), 3*time.Millisecond, oneTicket))
	assert.Empty(t, check(nil, 0, oneTicket))
}

func TestCheckerReportsOverlap(t *testing.T) {
	h := []attempt{
		hold("w1", 0, 1, 5, 1),
		queued("w2", 2, 2, 4, 6, 2), // granted at 4, w1 unlocked only at 5
	}
	vs := check(h, 0, oneTicket)
	require.Equal(t, map[violationKind]int{overlapped: 1}, kinds(vs), "%v", vs)
	assert.Contains(t, vs[0].Detail, "w2 was granted")
	assert.Equal(t, "a", vs[0].Lock)
}

func TestCheckerReportsOverlapWithAnyEarlierHold(t *testing.T) {
	h := []attempt{
		hold("w1", 0, 1, 10, 1), // a long hold
		hold("w2", 0, 2, 3, 2),  // overlaps w1
		hold("w3", 0, 4, 5, 3),  // overlaps w1 too, not w2
	}
	assert.Equal(t, map[violationKind]int{overlapped: 2}, kinds(check(h, 0, oneTicket)))
}

func TestCheckerReportsOutOfOrderGrant(t *testing.T) {
	h := []attempt{
		hold("h", 0, 0.5, 5, 1),
		queued("a", 1, 1, 8, 9, 3), // joined first
		queued("b", 3, 3, 6, 7, 2), // joined after a, granted before it
	}
	vs := check(h, 0, oneTicket)
	require.Equal(t, map[violationKind]int{outOfOrder: 1}, kinds(vs), "%v", vs)
	assert.Contains(t, vs[0].Detail, "a joined the queue before b")
}

func TestCheckerReportsGrantWhileEarlierWaiterStillInLine(t *testing.T) {
	h := []attempt{
		hold("h", 0, 0.5, 4, 1),
		gaveUp("a", 1, 1, 10),      // in line until at least 10
		queued("b", 3, 3, 5, 6, 2), // granted at 5: a was still ahead
	}
	vs := check(h, 0, oneTicket)
	require.Equal(t, map[violationKind]int{outOfOrder: 1}, kinds(vs), "%v", vs)
	assert.Contains(t, vs[0].Detail, "still in line")

	// EventGranted after a's deadline: a may have left first.
	h[2] = queued("b", 3, 3, 10.1, 11, 2)
	assert.Empty(t, check(h, 0, oneTicket))
}

func TestCheckerTrustsAPlaceInLineOnlyForTheWaiterTTL(t *testing.T) {
	h := []attempt{
		hold("h", 0, 0.5, 5, 1),
		queued("a", 1, 1, 8, 9, 3), // joined at 1: its place is certain until 1+TTL
		queued("b", 3, 3, 6, 7, 2), // granted at 6
	}
	assert.Equal(t, map[violationKind]int{outOfOrder: 1}, kinds(check(h, 5500*time.Microsecond, oneTicket)))
	// With a 5ms TTL, a may have stalled and been dropped before 6.
	assert.Empty(t, check(h, 5*time.Millisecond, oneTicket))
}

func TestCheckerIgnoresWaiterThatLostItsPlace(t *testing.T) {
	a := queued("a", 1, 1, 8, 9, 3)
	a.Joins = append(a.Joins, join{Sent: at(4), Answered: at(4.5)}) // rejoined at the tail
	h := []attempt{
		hold("h", 0, 0.5, 5, 1),
		a,
		queued("b", 3, 3, 6, 7, 2),
	}
	assert.Empty(t, check(h, 0, oneTicket))
}

func TestCheckerReportsTokenGoingBack(t *testing.T) {
	h := []attempt{
		hold("w1", 0, 1, 2, 5),
		hold("w2", 0, 3, 4, 4),
	}
	vs := check(h, 0, oneTicket)
	require.Equal(t, map[violationKind]int{tokenOrder: 1}, kinds(vs), "%v", vs)
	assert.Contains(t, vs[0].Detail, "went back from 5")
}

func TestCheckerReportsRepeatedToken(t *testing.T) {
	h := []attempt{
		hold("w1", 0, 1, 2, 5),
		hold("w2", 0, 3, 4, 6),
		hold("w3", 0, 5, 6, 5),
	}
	vs := check(h, 0, oneTicket)
	require.Equal(t, map[violationKind]int{tokenOrder: 1}, kinds(vs), "%v", vs)
	assert.Contains(t, vs[0].Detail, "token 5 granted twice")
}

func TestCheckerReportsBargingTryLock(t *testing.T) {
	h := []attempt{
		hold("h", 0, 0.5, 2, 1),
		queued("w", 1, 1, 4, 5, 3), // in line behind h
		try("t", 2.6, 2.7, 3, 2),   // took the lock before w
	}
	vs := check(h, 0, oneTicket)
	require.Equal(t, map[violationKind]int{barged: 1}, kinds(vs), "%v", vs)
	assert.Contains(t, vs[0].Detail, "TryLock by t")

	// Called before w joined, but granted after h unlocked: it barged.
	h[2] = try("t", 1.2, 2.7, 3, 2)
	assert.Equal(t, map[violationKind]int{barged: 1}, kinds(check(h, 0, oneTicket)))

	// EventGranted after the deadline of a waiter that gave up: it may have
	// left the line first.
	h[1] = gaveUp("w", 1, 1, 2.65)
	assert.Empty(t, check(h, 0, oneTicket))
}

func TestCheckerReportsBargingPastWaiterWhoGaveUpLater(t *testing.T) {
	h := []attempt{
		gaveUp("w", 0, 0, 10),     // in line until its deadline at 10
		try("t", 2, 2.5, 3, 1),    // granted at 2.5 while w waited
		hold("l", 4, 4.5, 5, 2),   // a Lock granted on its first try
		gaveUp("x", 11, 11, 12.5), // joined after everyone
	}
	assert.Equal(t, map[violationKind]int{barged: 2}, kinds(check(h, 0, oneTicket)))
}

func TestCheckerReportsWaiterLeftBehind(t *testing.T) {
	waiting := attempt{Worker: "w2", Lock: "a", Kind: kindLock, Outcome: outPending,
		Start: at(1), Joins: []join{{Sent: at(1), Answered: at(1.5)}}}
	h := []attempt{hold("w1", 0, 0.5, 3, 1), waiting}
	vs := check(h, 0, oneTicket)
	require.Equal(t, map[violationKind]int{leftBehind: 1}, kinds(vs), "%v", vs)
	assert.Contains(t, vs[0].Detail, "still waiting")

	// A waiter left behind while someone who joined later was granted is
	// out of order too.
	h = append(h, queued("w3", 2, 2, 4, 5, 2))
	assert.Equal(t, map[violationKind]int{leftBehind: 1, outOfOrder: 1}, kinds(check(h, 0, oneTicket)))
}

func TestCheckerReportsLeaseLostAndErrors(t *testing.T) {
	lost := hold("w1", 0, 1, 2, 1)
	lost.LeaseLost = true
	failed := attempt{Worker: "w2", Lock: "a", Kind: kindLock, Outcome: outFailed, Start: at(3), Ended: at(4), Err: "boom"}
	vs := check([]attempt{lost, failed}, 0, oneTicket)
	assert.Equal(t, map[violationKind]int{leaseLost: 1, errored: 1}, kinds(vs), "%v", vs)
}

func TestResidueReportsLeftovers(t *testing.T) {
	assert.Empty(t, residue(queue.Snapshot{Name: "a"}))
	assert.Empty(t, residue(queue.Snapshot{Name: "a", LastToken: 3, TokenTTL: time.Second}), "a counter that expires")
	s := queue.Snapshot{
		Name: "a", Held: true, Owner: "o", Token: 3, Count: 1,
		Waiters:   []queue.WaiterState{{Entry: "0123456789abcdef:100:o2"}},
		Orphans:   []string{"x"},
		LastToken: 3, TokenTTL: -1,
	}
	vs := residue(s)
	require.Len(t, vs, 4)
	for _, v := range vs {
		assert.Equal(t, residual, v.Kind)
	}
}

func TestCheckerTrustsAPlaceAsLongAsPollsKeepIt(t *testing.T) {
	const ttl = 3 * time.Millisecond
	// w2 joined at 2ms and kept polling until 20ms; w3 joined after it and
	// was granted at 15ms, far past w2's join plus the TTL, while w2 was
	// still in line: a FIFO violation only the polls can prove.
	w2 := queued("w2", 2, 2, 25, 26, 3)
	broken := false
	for ms := 2.0; ms <= 20; ms += 1 {
		w2.keep(at(ms), at(ms+0.5), ttl, &broken)
	}
	require.False(t, broken)
	require.Equal(t, at(23), w2.Kept)
	history := []attempt{
		hold("w1", 0, 1, 10, 1),
		w2,
		queued("w3", 4, 4, 15, 16, 2),
	}
	assert.Equal(t, map[violationKind]int{outOfOrder: 1}, kinds(check(history, ttl, oneTicket)))

	// Without the polls, w2's place is certain only until 5ms: nothing is
	// proven.
	history[1].Kept = time.Time{}
	assert.Empty(t, check(history, ttl, oneTicket))
}

func TestAPollAnsweredPastTheDeadlineEndsTheCertainPlace(t *testing.T) {
	const ttl = 3 * time.Millisecond
	var a attempt
	broken := false
	a.keep(at(0), at(0.5), ttl, &broken) // deadline at least 3ms
	a.keep(at(2), at(2.5), ttl, &broken) // answered before 3ms: kept until 5ms
	a.keep(at(4), at(6), ttl, &broken)   // answered after 5ms: the place may have been lost
	a.keep(at(7), at(7.5), ttl, &broken) // no longer counts
	require.True(t, broken)
	require.Equal(t, at(5), a.Kept)
}
