package main

import (
	"context"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock/queue"
)

// The histories of this file are of Semaphores of 3 permits and of
// RWMutexes, built from the Mutex attempts of check_test.go.

// sem makes a an attempt on a Semaphore of 3 permits that asked for
// weight of them.
func sem(weight int64, a attempt) attempt {
	a.Type, a.Permits, a.Weight = runSemaphore, 3, weight
	return a
}

// reader makes a an attempt on the read lock of a RWMutex.
func reader(a attempt) attempt {
	a.Type = runRWMutex
	return a
}

// writer makes a an attempt on the write lock of a RWMutex.
func writer(a attempt) attempt {
	a.Type, a.Write = runRWMutex, true
	return a
}

// downgraded makes writer a downgrade at ms: it called the Unlock of its
// write level then, and kept its read level until its UnlockStart.
func downgraded(ms float64, a attempt) attempt {
	a.Downgrade = at(ms)
	return a
}

// polled records that a waiter's last poll, which left it in line, was
// sent at ms.
func polled(ms float64, a attempt) attempt {
	a.Polled = at(ms)
	return a
}

func triedAndFailed(worker string, start float64) attempt {
	return attempt{Worker: worker, Lock: "a", Kind: kindTry, Outcome: outTryFailed, Start: at(start), Ended: at(start + 0.2)}
}

// cleanSemaphoreHistory: A and B share the 3 permits; a TryAcquire finds
// them taken; C (2 permits) heads the line behind them and blocks D (1),
// which would fit beside B; B's release grants both at once, and D is
// seen granted first; E gives up in line; F is granted once D is done.
func cleanSemaphoreHistory() []attempt {
	return []attempt{
		sem(1, hold("A", 0, 1, 4, 1)),
		sem(2, hold("B", 0.5, 2, 6, 2)),
		sem(1, triedAndFailed("T", 2.5)),
		sem(2, queued("C", 3, 3, 6.5, 9, 4)),
		sem(1, queued("D", 3.8, 3.8, 6.3, 8, 5)),
		sem(1, gaveUp("E", 5, 5, 6.6)),
		sem(1, queued("F", 5.8, 5.8, 8.2, 10, 6)),
	}
}

func TestCheckerAcceptsCleanSemaphoreHistory(t *testing.T) {
	assert.Empty(t, check(cleanSemaphoreHistory(), 0, oneTicket))
	assert.Empty(t, check(cleanSemaphoreHistory(), 3*time.Millisecond, oneTicket))
}

func TestCheckerReportsMorePermitsThanTheSemaphoreHas(t *testing.T) {
	h := []attempt{
		sem(2, hold("A", 0, 1, 5, 1)),
		sem(2, hold("B", 0, 3, 6, 2)), // granted at 3, A released its 2 after 5
	}
	vs := check(h, 0, oneTicket)
	require.Equal(t, map[violationKind]int{overHeld: 1}, kinds(vs), "%v", vs)
	assert.Contains(t, vs[0].Detail, "B was granted 2 permit(s) at +0.003000s (token 2), 4 of the 3 permits then held, by it and A 2 (granted +0.001000s, token 1, release called +0.005000s)")

	// EventGranted as A called Release: A may have released first.
	h[1] = sem(2, hold("B", 0, 5, 6, 2))
	assert.Empty(t, check(h, 0, oneTicket))

	// Three holds of 1 fit; a fourth does not.
	h = []attempt{
		sem(1, hold("A", 0, 1, 9, 1)),
		sem(1, hold("B", 0, 2, 9, 2)),
		sem(1, hold("C", 0, 3, 9, 3)),
	}
	assert.Empty(t, check(h, 0, oneTicket))
	h = append(h, sem(1, hold("D", 0, 4, 5, 4)))
	assert.Equal(t, map[violationKind]int{overHeld: 1}, kinds(check(h, 0, oneTicket)))
}

func TestCheckerReportsAWaiterThatPassedTheHeadOfTheLine(t *testing.T) {
	h := []attempt{
		sem(2, hold("H", 0, 1, 5, 1)),
		sem(3, queued("W", 2, 2, 6, 8, 3)),   // 3 permits: waits for H
		sem(1, queued("G", 3, 3, 4, 4.5, 2)), // fits beside H, but W is ahead
	}
	vs := check(h, 0, oneTicket)
	require.Equal(t, map[violationKind]int{outOfOrder: 1}, kinds(vs), "%v", vs)
	assert.Contains(t, vs[0].Detail, "W joined the queue before G")
	assert.Contains(t, vs[0].Detail, "granted later (token 3 > 2)")

	// The same by a TryAcquire: barging.
	h[2] = sem(1, try("G", 3, 4, 4.5, 2))
	vs = check(h, 0, oneTicket)
	require.Equal(t, map[violationKind]int{barged: 1}, kinds(vs), "%v", vs)
	assert.Contains(t, vs[0].Detail, "TryLock by G")
}

func TestCheckerTrustsAGivenUpWaiterOnlyAgainstAGrantThatCouldNotFitBesideIt(t *testing.T) {
	h := []attempt{
		sem(3, hold("H", 0, 1, 5, 1)),
		sem(1, gaveUp("W", 2, 2, 5.4)),
		// EventGranted as H released, with W still waiting until 5.4: W may
		// have been granted in the same release, seen it too late and
		// given it back as it gave up.
		sem(1, queued("G", 3, 3, 5.2, 7, 3)),
	}
	assert.Empty(t, check(h, 0, oneTicket))

	// 3 permits cannot be granted beside W's 1: W was still in line.
	h[2] = sem(3, queued("G", 3, 3, 5.2, 7, 3))
	vs := check(h, 0, oneTicket)
	require.Equal(t, map[violationKind]int{outOfOrder: 1}, kinds(vs), "%v", vs)
	assert.Contains(t, vs[0].Detail, "it gave up at its deadline")

	// A poll of W after G's grant found W still in line.
	h[1] = polled(5.3, sem(1, gaveUp("W", 2, 2, 5.4)))
	h[2] = sem(1, queued("G", 3, 3, 5.2, 7, 3))
	vs = check(h, 0, oneTicket)
	require.Equal(t, map[violationKind]int{outOfOrder: 1}, kinds(vs), "%v", vs)
	assert.Contains(t, vs[0].Detail, "a poll of it sent at +0.005300s, after the other was granted at +0.005200s, found it still in line")
}

func TestCheckerOrdersTokensOfASemaphoreOnlyWhereTheGrantsAreOrdered(t *testing.T) {
	h := []attempt{
		sem(1, hold("A", 0, 1, 5, 2)),
		sem(1, hold("B", 0.5, 2, 6, 1)), // called before A's grant was seen: either may have come first
	}
	assert.Empty(t, check(h, 0, oneTicket))

	// Called after A's grant was seen: granted after it.
	h[1] = sem(1, hold("B", 1.5, 2, 6, 1))
	vs := check(h, 0, oneTicket)
	require.Equal(t, map[violationKind]int{tokenOrder: 1}, kinds(vs), "%v", vs)
	assert.Contains(t, vs[0].Detail, "token went back from 2 (A, granted +0.001000s) to 1 (B, granted +0.002000s)")

	// EventPolled in line after A's grant was seen: granted after it.
	h[1] = polled(1.5, sem(1, queued("B", 0.5, 0.5, 2, 6, 1)))
	assert.Equal(t, map[violationKind]int{tokenOrder: 1}, kinds(check(h, 0, oneTicket)))

	// 2 and 2 permits cannot be held at once: B, granted after A began
	// to release, came after it.
	h = []attempt{
		sem(2, hold("A", 0, 1, 3, 5)),
		sem(2, hold("B", 0, 4, 6, 4)),
	}
	vs = check(h, 0, oneTicket)
	require.Equal(t, map[violationKind]int{tokenOrder: 1}, kinds(vs), "%v", vs)
	assert.Contains(t, vs[0].Detail, "went back from 5")
	h[1].Weight = 1 // 2 and 1 fit: either may have come first
	assert.Empty(t, check(h, 0, oneTicket))
}

// cleanRWMutexHistory: two readers hold at once; a writer X joins behind
// them and a TryRLock behind X fails; readers R3 and R4 join behind X and
// are granted as X downgrades, beside its read level, R4 first and with
// the lower token (a batch comes in any order); a TryLock is granted once
// everyone is done.
func cleanRWMutexHistory() []attempt {
	return []attempt{
		reader(hold("R1", 0, 1, 5, 1)),
		reader(hold("R2", 0.5, 1.5, 4, 2)),
		downgraded(7, writer(queued("X", 2, 2, 5.5, 9, 3))),
		reader(triedAndFailed("T", 3.4)),
		reader(queued("R3", 3, 3, 7.3, 8, 5)),
		reader(queued("R4", 4, 4, 7.2, 8.5, 4)),
		writer(try("Y", 10, 10.2, 11, 6)),
	}
}

func TestCheckerAcceptsCleanRWMutexHistory(t *testing.T) {
	assert.Empty(t, check(cleanRWMutexHistory(), 0, oneTicket))
	assert.Empty(t, check(cleanRWMutexHistory(), 3*time.Millisecond, oneTicket))
}

func TestCheckerReportsAWriterBesideAnotherHold(t *testing.T) {
	h := []attempt{
		reader(hold("R", 0, 1, 5, 1)),
		writer(hold("X", 2, 3, 6, 2)),
	}
	vs := check(h, 0, oneTicket)
	require.Equal(t, map[violationKind]int{overlapped: 1}, kinds(vs), "%v", vs)
	assert.Contains(t, vs[0].Detail, "X was granted the write lock at +0.003000s (token 2) while R held a read lock (granted +0.001000s, token 1, unlock called +0.005000s)")

	h = []attempt{
		writer(hold("X", 0, 1, 5, 1)),
		reader(hold("R", 2, 3, 6, 2)),
	}
	vs = check(h, 0, oneTicket)
	require.Equal(t, map[violationKind]int{overlapped: 1}, kinds(vs), "%v", vs)
	assert.Contains(t, vs[0].Detail, "R was granted a read lock at +0.003000s (token 2) while X held the write lock")

	// Two writers.
	h[1] = writer(hold("Y", 2, 3, 6, 2))
	assert.Equal(t, map[violationKind]int{overlapped: 1}, kinds(check(h, 0, oneTicket)))

	// A reader beside a writer that downgraded: only after the downgrade.
	h = []attempt{
		downgraded(4, writer(hold("X", 0, 1, 8, 1))),
		reader(hold("R", 2, 4.5, 6, 2)),
	}
	assert.Empty(t, check(h, 0, oneTicket))
	h[1] = reader(hold("R", 2, 3.5, 6, 2))
	vs = check(h, 0, oneTicket)
	require.Equal(t, map[violationKind]int{overlapped: 1}, kinds(vs), "%v", vs)
	assert.Contains(t, vs[0].Detail, "while X held the write lock (granted +0.001000s, token 1, downgrade called +0.004000s, unlock called +0.008000s)")
	// A writer beside what a downgraded writer still reads.
	h[1] = writer(hold("Y", 2, 5, 6, 2))
	assert.Equal(t, map[violationKind]int{overlapped: 1}, kinds(check(h, 0, oneTicket)))
}

func TestCheckerReportsAReaderThatPassedAWaitingWriter(t *testing.T) {
	h := []attempt{
		reader(hold("H", 0, 1, 5, 1)),
		writer(queued("X", 2, 2, 6, 7, 3)),
		reader(queued("R", 3, 3, 4, 4.5, 2)), // a reader behind a waiting writer waits behind it
	}
	vs := check(h, 0, oneTicket)
	require.Equal(t, map[violationKind]int{outOfOrder: 1}, kinds(vs), "%v", vs)
	assert.Contains(t, vs[0].Detail, "X joined the queue before R")

	// A TryRLock while the writer waits.
	h[2] = reader(try("R", 3, 4, 4.5, 2))
	vs = check(h, 0, oneTicket)
	require.Equal(t, map[violationKind]int{barged: 1}, kinds(vs), "%v", vs)

	// A writer that gave up later was still in line: a reader cannot be
	// granted with it.
	h[1] = writer(gaveUp("X", 2, 2, 10))
	assert.Equal(t, map[violationKind]int{barged: 1}, kinds(check(h, 0, oneTicket)))
}

func TestCheckerTakesReadersOfABatchInAnyOrder(t *testing.T) {
	// X writes until 3; R1 joined before R2; as X unlocks both are
	// granted, R2 first and with the lower token.
	h := []attempt{
		writer(hold("X", 0, 0.5, 3, 1)),
		reader(queued("R1", 1, 1, 3.6, 4, 4)),
		reader(queued("R2", 2, 2, 3.2, 3.3, 2)),
	}
	assert.Empty(t, check(h, 0, oneTicket))

	// A writer's grant came between them (its join bracket overlaps both
	// of theirs, so it passed neither): they were granted by different
	// releases, R2 first.
	withWriter := append(h[:3:3], writer(queued("Y", 1.2, 1.2, 3.4, 3.5, 3)))
	withWriter[3].Joins[0].Answered = at(2.3)
	vs := check(withWriter, 0, oneTicket)
	require.Equal(t, map[violationKind]int{outOfOrder: 1}, kinds(vs), "%v", vs)
	assert.Contains(t, vs[0].Detail, "R1 joined the queue before R2")
	assert.Contains(t, vs[0].Detail, "after a writer's grant between them (token 3)")

	// R1 still polled in line after R2's grant.
	h[1] = polled(3.25, h[1])
	vs = check(h, 0, oneTicket)
	require.Equal(t, map[violationKind]int{outOfOrder: 1}, kinds(vs), "%v", vs)
	assert.Contains(t, vs[0].Detail, "a poll of it sent at +0.003250s")
}

func TestCheckerReportsTokensOfARWMutexGoingBack(t *testing.T) {
	h := []attempt{
		writer(hold("X", 0, 1, 2, 5)),
		reader(hold("R", 0, 3, 4, 4)), // after the writer: a higher token
	}
	vs := check(h, 0, oneTicket)
	require.Equal(t, map[violationKind]int{tokenOrder: 1}, kinds(vs), "%v", vs)

	h = []attempt{
		reader(hold("R1", 0, 1, 5, 5)),
		reader(hold("R2", 0.5, 2, 6, 4)), // may have been granted first
	}
	assert.Empty(t, check(h, 0, oneTicket))
	h[1] = reader(hold("R2", 0.5, 2, 6, 5))
	assert.Equal(t, map[violationKind]int{tokenOrder: 1}, kinds(check(h, 0, oneTicket)), "a token granted twice")
}

func TestWeightedResidueReportsLeftovers(t *testing.T) {
	s := weightedState{Name: "a", Kind: queue.KindSemaphore}
	assert.Empty(t, s.residue())
	s.LastToken, s.TokenTTL = 7, time.Second
	assert.Empty(t, s.residue(), "a counter that expires")

	s = weightedState{
		Name: "a", Kind: queue.KindSemaphore,
		Hold:      map[string]string{"permits": "3", "used": "2", "o:owner": "2 1 0 7 entry"},
		Holders:   []redis.Z{{Member: "owner", Score: 1}},
		Queue:     []string{"0123456789abcdef:100:1s:o2"},
		Deadlines: []redis.Z{{Member: "0123456789abcdef:100:1s:o2", Score: 1}},
		LastToken: 7, TokenTTL: -1,
	}
	vs := s.residue()
	require.Len(t, vs, 5, "%v", vs)
	for _, v := range vs {
		assert.Equal(t, residual, v.Kind)
	}
	assert.Contains(t, vs[0].Detail, "still held after the run by 1 holder(s), using 2 of 3, first owner 2 1 0 7 entry")
	assert.Contains(t, s.String(), "holder owner 2 1 0 7 entry")

	s = weightedState{Name: "a", Kind: queue.KindRWMutex, Hold: map[string]string{"permits": "1073741824"}}
	vs = s.residue()
	require.Len(t, vs, 1)
	assert.Contains(t, vs[0].Detail, "its hash is left")
}

func TestCheckerPlacesAFreshGrantAfterTheHoldsItCannotBeHeldBeside(t *testing.T) {
	// G's TryAcquire was called before W joined, but could not be granted
	// beside H's 3 permits: it was granted after H began to release, with
	// W in line.
	h := []attempt{
		sem(3, hold("H", 0, 1, 5, 1)),
		sem(1, queued("W", 2, 2, 7, 8, 3)),
		sem(1, try("G", 1.5, 5.2, 6, 2)),
	}
	vs := check(h, 0, oneTicket)
	require.Equal(t, map[violationKind]int{barged: 1}, kinds(vs), "%v", vs)
	assert.Contains(t, vs[0].Detail, "called +0.001500s, was granted (token 2, not before +0.005000s)")

	// Beside H's 2 permits it could have been granted at once.
	h[0].Weight = 2
	assert.Empty(t, check(h, 0, oneTicket))
}

func TestLeftoversReadTheKeysOfTheRunsKind(t *testing.T) {
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer rdb.Close()
	ctx := context.Background()
	cfg := config{Kind: runRWMutex, Prefix: "p"}
	_, left, err := leftovers(ctx, rdb, cfg, "lock-0")
	require.NoError(t, err)
	assert.Empty(t, left)

	k, err := queue.Weighted("p", "lock-0", queue.KindRWMutex)
	require.NoError(t, err)
	m.HSet(k.Lock, "permits", "1073741824", "used", "1", "o:own", "1 1 0 5 e1")
	_, err = m.ZAdd(k.Holders, 1e13, "own")
	require.NoError(t, err)
	_, err = m.Lpush(k.Queue, "e2")
	require.NoError(t, err)
	_, err = m.ZAdd(k.Deadline, 1e13, "e2")
	require.NoError(t, err)
	require.NoError(t, m.Set(k.Token, "5"))
	text, left, err := leftovers(ctx, rdb, cfg, "lock-0")
	require.NoError(t, err)
	assert.Len(t, left, 5, "%v", left)
	assert.Contains(t, text, `rwmutex "lock-0"`)
	assert.Contains(t, text, "holder own 1 1 0 5 e1")

	// The name's Mutex, not looked at in a run of RWMutexes, is read in
	// a run of Mutexes.
	cfg.Kind = runMutex
	_, left, err = leftovers(ctx, rdb, cfg, "lock-0")
	require.NoError(t, err)
	assert.Empty(t, left)
}
