package fairlock_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/queue"
)

// weightedKeys returns the keys of a Semaphore (kind queue.KindSemaphore)
// or a RWMutex of name under the env's prefix.
func (e *env) weightedKeys(name, kind string) queue.Keys {
	k, err := queue.Weighted(e.prefix, name, kind)
	require.NoError(e.t, err)
	return k
}

// waitWeightedQueued waits until the weighted lock has n waiters in line.
func (e *env) waitWeightedQueued(name, kind string, n int) {
	e.t.Helper()
	k := e.weightedKeys(name, kind)
	require.Eventually(e.t, func() bool { return e.rdb.LLen(context.Background(), k.Queue).Val() == int64(n) },
		10*time.Second, 2*time.Millisecond, "waiting for %d queued waiters of %s", n, name)
}

// requireWeightedGone asserts that Redis keeps nothing of the weighted
// lock but its fencing counter (which expires by itself).
func (e *env) requireWeightedGone(name, kind string) {
	e.t.Helper()
	k := e.weightedKeys(name, kind)
	require.Eventually(e.t, func() bool {
		return e.rdb.Exists(context.Background(), k.Lock, k.Holders, k.Queue, k.Deadline).Val() == 0
	}, 5*time.Second, 5*time.Millisecond, "keys of %s left behind", name)
}

type acquired struct {
	ctx context.Context
	err error
}

func acquireAsync(ctx context.Context, s *fairlock.Semaphore, n int64) <-chan acquired {
	ch := make(chan acquired, 1)
	go func() {
		hctx, err := s.Acquire(ctx, n)
		ch <- acquired{hctx, err}
	}()
	return ch
}

func awaitAcquired(t *testing.T, ch <-chan acquired) acquired {
	t.Helper()
	select {
	case a := <-ch:
		return a
	case <-time.After(10 * time.Second):
		t.Fatal("no grant within 10s")
		return acquired{}
	}
}

func requirePending(t *testing.T, ch <-chan acquired) {
	t.Helper()
	select {
	case a := <-ch:
		t.Fatalf("granted out of turn: %v", a.err)
	case <-time.After(50 * time.Millisecond):
	}
}

// A release that grants waiters of its own Client hands each of them its
// wake message itself, as a Mutex's hand-over within one Client does:
// nothing is published, whether it grants one waiter or several.
func TestAWeightedReleaseWithinOneClientPublishesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	// Waiters poll every 20 s: a grant sooner came by its wake message.
	s := e.client(fairlock.WithWaiterTTL(time.Minute), fairlock.WithLease(time.Minute)).Semaphore("local", 3)
	k := e.weightedKeys("local", queue.KindSemaphore)
	wakes := e.rdb.PSubscribe(ctx, k.Wake+"*")
	t.Cleanup(func() { _ = wakes.Close() })
	_, err := wakes.Receive(ctx) // the subscription's confirmation
	require.NoError(t, err)

	held, err := s.Acquire(ctx, 3)
	require.NoError(t, err)
	one := acquireAsync(ctx, s, 1)
	e.waitWeightedQueued("local", queue.KindSemaphore, 1)
	two := acquireAsync(ctx, s, 2)
	e.waitWeightedQueued("local", queue.KindSemaphore, 2)
	require.NoError(t, s.Release(held)) // grants both
	a, b := awaitAcquired(t, one), awaitAcquired(t, two)
	require.NoError(t, a.err)
	require.NoError(t, b.err)

	three := acquireAsync(ctx, s, 3)
	e.waitWeightedQueued("local", queue.KindSemaphore, 1)
	require.NoError(t, s.Release(a.ctx))
	require.NoError(t, s.Release(b.ctx)) // grants one
	c := awaitAcquired(t, three)
	require.NoError(t, c.err)
	require.NoError(t, s.Release(c.ctx))

	// A message on the wake channels would arrive before this one, which
	// is published after every grant above.
	require.NoError(t, e.rdb.Publish(ctx, k.Wake+":barrier", "barrier").Err())
	msg, err := wakes.ReceiveMessage(ctx)
	require.NoError(t, err)
	require.Equal(t, "barrier", msg.Payload, "a grant within one Client was published on %s", msg.Channel)
}

func TestSemaphoreWeightedFIFOAcrossClients(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	s1 := e.client().Semaphore("sem", 3)
	s2 := e.client().Semaphore("sem", 3)

	a, err := s1.Acquire(ctx, 2)
	require.NoError(t, err)
	// b asks for 2 of the 1 left, and c, whose 1 would fit, waits behind.
	b := acquireAsync(ctx, s2, 2)
	e.waitWeightedQueued("sem", queue.KindSemaphore, 1)
	c := acquireAsync(ctx, s1, 1)
	e.waitWeightedQueued("sem", queue.KindSemaphore, 2)
	requirePending(t, c)
	_, err = s2.TryAcquire(ctx, 1)
	require.ErrorIs(t, err, fairlock.ErrLocked, "a try passes nobody")

	ta, err := s1.Token(a)
	require.NoError(t, err)
	require.NoError(t, s1.Release(a))
	require.ErrorIs(t, a.Err(), context.Canceled, "the hold's context ends with it")
	gb, gc := awaitAcquired(t, b), awaitAcquired(t, c)
	require.NoError(t, gb.err)
	require.NoError(t, gc.err)
	tb, err := s2.Token(gb.ctx)
	require.NoError(t, err)
	tc, err := s1.Token(gc.ctx)
	require.NoError(t, err)
	require.Greater(t, tb, ta)
	require.Greater(t, tc, tb, "tokens rise in the order of the grants")

	require.ErrorIs(t, s1.Release(a), fairlock.ErrNotHeld)
	require.NoError(t, s2.Release(gb.ctx))
	require.NoError(t, s1.Release(gc.ctx))
	e.requireWeightedGone("sem", queue.KindSemaphore)
}

func TestSemaphoreNeverHoldsMoreThanItsPermits(t *testing.T) {
	e := newEnv(t)
	const permits = 3
	var inUse, most atomic.Int64
	var wg sync.WaitGroup
	for i := range 4 {
		s := e.client().Semaphore("crowd", permits)
		for j := range 4 {
			n := int64(1 + (i+j)%2)
			wg.Go(func() {
				for range 15 {
					hctx, err := s.Acquire(context.Background(), n)
					if !assertNoError(t, err) {
						return
					}
					now := inUse.Add(n)
					for m := most.Load(); now > m && !most.CompareAndSwap(m, now); m = most.Load() {
					}
					time.Sleep(time.Millisecond)
					inUse.Add(-n)
					assertNoError(t, s.Release(hctx))
				}
			})
		}
	}
	wg.Wait()
	require.LessOrEqual(t, most.Load(), int64(permits))
	require.Equal(t, int64(permits), most.Load(), "the permits were used together")
	e.requireWeightedGone("crowd", queue.KindSemaphore)
}

func assertNoError(t *testing.T, err error) bool {
	if err != nil {
		t.Error(err)
		return false
	}
	return true
}

func TestSemaphoreBadInput(t *testing.T) {
	e := newEnv(t)
	c := e.client()
	ctx := context.Background()
	for _, permits := range []int64{0, -1} {
		_, err := c.Semaphore("bad", permits).Acquire(ctx, 1)
		require.ErrorIs(t, err, fairlock.ErrInvalidOption)
		require.ErrorContains(t, err, fmt.Sprintf("permits %d", permits))
	}
	s := c.Semaphore("bad", 3)
	for _, n := range []int64{0, -2, 4} {
		_, err := s.Acquire(ctx, n)
		require.ErrorIs(t, err, fairlock.ErrInvalidOption)
		require.ErrorContains(t, err, fmt.Sprintf("acquire of %d permits", n))
		_, err = s.TryAcquire(ctx, n)
		require.ErrorIs(t, err, fairlock.ErrInvalidOption)
	}
	_, err := c.Semaphore("bad", 3, nil).Acquire(ctx, 1)
	require.ErrorIs(t, err, fairlock.ErrInvalidOption)
	_, err = c.Semaphore("bad", 3, fairlock.WithFixedLease(-time.Second)).Acquire(ctx, 1)
	require.ErrorIs(t, err, fairlock.ErrInvalidOption)
	require.ErrorIs(t, s.SetPermits(ctx, 0), fairlock.ErrInvalidOption)
	require.ErrorIs(t, s.Release(ctx), fairlock.ErrNotHeld)
	_, err = s.Token(ctx)
	require.ErrorIs(t, err, fairlock.ErrNotHeld)
	_, err = c.Semaphore("bad}", 1).Acquire(ctx, 1)
	require.ErrorIs(t, err, fairlock.ErrInvalidName)
	var nilSem *fairlock.Semaphore
	_, err = nilSem.Acquire(ctx, 1)
	require.Error(t, err)
	require.Error(t, nilSem.Release(ctx))

	// Not re-entrant: more permits under a hold would wait for itself.
	hctx, err := s.Acquire(ctx, 1)
	require.NoError(t, err)
	_, err = s.Acquire(hctx, 1)
	require.ErrorIs(t, err, fairlock.ErrWouldDeadlock)
	require.NoError(t, s.Release(hctx))
}

func TestSemaphoreCapacityIsStoredAndChangedDeliberately(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	s3 := e.client().Semaphore("cap", 3)
	s4 := e.client().Semaphore("cap", 4)
	a, err := s3.Acquire(ctx, 3)
	require.NoError(t, err)
	_, err = s4.Acquire(ctx, 1)
	require.ErrorIs(t, err, fairlock.ErrPermits)
	require.ErrorContains(t, err, "3 permits")

	// A waiter for 2 is granted by a capacity raised to 5.
	w := acquireAsync(ctx, s3, 2)
	e.waitWeightedQueued("cap", queue.KindSemaphore, 1)
	require.NoError(t, s4.SetPermits(ctx, 5))
	gw := awaitAcquired(t, w)
	require.NoError(t, gw.err)
	require.EqualValues(t, 5, s4.Permits())
	// The other handle still believes in 3.
	_, err = s3.TryAcquire(ctx, 1)
	require.ErrorIs(t, err, fairlock.ErrPermits)
	h, err := s4.TryAcquire(ctx, 1)
	require.ErrorIs(t, err, fairlock.ErrLocked, "5 are held")
	require.Nil(t, h)

	// Lowered to 2 under 5 held: holders keep theirs, nobody new is
	// granted until what is held fits, and a waiter for more than 2 fails.
	require.NoError(t, s4.SetPermits(ctx, 2))
	big := acquireAsync(ctx, s4, 2)
	e.waitWeightedQueued("cap", queue.KindSemaphore, 1)
	require.NoError(t, s3.Release(a))
	requirePending(t, big) // 2 held, 2 asked: does not fit under 2
	require.NoError(t, s3.Release(gw.ctx))
	gb := awaitAcquired(t, big)
	require.NoError(t, gb.err)
	require.NoError(t, s4.Release(gb.ctx))
	e.requireWeightedGone("cap", queue.KindSemaphore)
}

func TestSemaphoreCancelledWaiterLeavesNothing(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	s := e.client().Semaphore("gone", 2)
	a, err := s.Acquire(ctx, 2)
	require.NoError(t, err)
	wctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	_, err = s.Acquire(wctx, 1)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Zero(t, e.rdb.LLen(ctx, e.weightedKeys("gone", queue.KindSemaphore).Queue).Val())
	require.NoError(t, s.Release(a))
	e.requireWeightedGone("gone", queue.KindSemaphore)
}

func TestRWMutexBatchesReadersAndStarvesNoWriter(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	rw := e.client().RWMutex("rw")
	rw2 := e.client().RWMutex("rw")
	r1, err := rw.RLock(ctx)
	require.NoError(t, err)
	r2, err := rw2.RLock(ctx)
	require.NoError(t, err)

	w := make(chan acquired, 1)
	go func() { c, err := rw2.Lock(ctx); w <- acquired{c, err} }()
	e.waitWeightedQueued("rw", queue.KindRWMutex, 1)
	r3 := make(chan acquired, 1)
	go func() { c, err := rw.RLock(ctx); r3 <- acquired{c, err} }()
	e.waitWeightedQueued("rw", queue.KindRWMutex, 2)
	_, err = rw.TryRLock(ctx)
	require.ErrorIs(t, err, fairlock.ErrLocked, "a reader behind a waiting writer waits")

	require.NoError(t, rw.RUnlock(r1))
	requirePending(t, w)
	require.NoError(t, rw2.RUnlock(r2))
	gw := awaitAcquired(t, w)
	require.NoError(t, gw.err)
	requirePending(t, r3)
	require.NoError(t, rw2.Unlock(gw.ctx))
	g3 := awaitAcquired(t, r3)
	require.NoError(t, g3.err)
	require.NoError(t, rw.RUnlock(g3.ctx))
	e.requireWeightedGone("rw", queue.KindRWMutex)
}

func TestRWMutexReentryDowngradeAndNoUpgrade(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	rw := e.client().RWMutex("re")
	other := e.client().RWMutex("re")

	wctx, err := rw.Lock(ctx)
	require.NoError(t, err)
	tw, err := rw.Token(wctx)
	require.NoError(t, err)
	waiting := make(chan acquired, 1)
	go func() { c, err := other.RLock(ctx); waiting <- acquired{c, err} }()
	e.waitWeightedQueued("re", queue.KindRWMutex, 1)

	// Under the write hold: Lock and RLock at once, never behind the
	// waiter.
	w2, err := rw.Lock(wctx)
	require.NoError(t, err)
	rctx, err := rw.RLock(w2)
	require.NoError(t, err)
	tr, err := rw.Token(rctx)
	require.NoError(t, err)
	require.Equal(t, tw, tr, "a read level under the write hold keeps its token")
	require.NoError(t, rw.Unlock(w2))
	requirePending(t, waiting)
	// The last write level goes: the read hold goes on (a downgrade), and
	// the waiting reader is granted beside it.
	require.NoError(t, rw.Unlock(rctx))
	require.Error(t, wctx.Err(), "the write hold ended")
	require.NoError(t, rctx.Err(), "the read hold goes on")
	g := awaitAcquired(t, waiting)
	require.NoError(t, g.err)

	// A read hold is never upgraded.
	_, err = rw.Lock(rctx)
	require.ErrorIs(t, err, fairlock.ErrWouldDeadlock)
	r2, err := rw.RLock(rctx)
	require.NoError(t, err)
	require.NoError(t, rw.RUnlock(r2))
	require.NoError(t, rw.RUnlock(rctx))
	require.ErrorIs(t, rw.RUnlock(rctx), fairlock.ErrNotHeld)
	require.ErrorIs(t, rw.Unlock(ctx), fairlock.ErrNotHeld)
	require.NoError(t, other.RUnlock(g.ctx))
	e.requireWeightedGone("re", queue.KindRWMutex)
}

func TestRWMutexBadInput(t *testing.T) {
	e := newEnv(t)
	c := e.client()
	ctx := context.Background()
	_, err := c.RWMutex("bad}").RLock(ctx)
	require.ErrorIs(t, err, fairlock.ErrInvalidName)
	_, err = c.RWMutex("bad", nil).Lock(ctx)
	require.ErrorIs(t, err, fairlock.ErrInvalidOption)
	var nilRW *fairlock.RWMutex
	_, err = nilRW.RLock(ctx)
	require.Error(t, err)
	require.Error(t, nilRW.Unlock(ctx))
	rw := c.RWMutex("bad")
	require.ErrorIs(t, rw.Unlock(ctx), fairlock.ErrNotHeld)
	require.ErrorIs(t, rw.RUnlock(ctx), fairlock.ErrNotHeld)
	_, err = rw.Token(ctx)
	require.ErrorIs(t, err, fairlock.ErrNotHeld)
	// A write hold is not a read hold, nor the other way round.
	w, err := rw.Lock(ctx)
	require.NoError(t, err)
	require.ErrorIs(t, rw.RUnlock(w), fairlock.ErrNotHeld)
	require.NoError(t, rw.Unlock(w))
	require.NoError(t, c.Close())
	_, err = rw.RLock(ctx)
	require.ErrorIs(t, err, fairlock.ErrClosed)
}

func TestWeightedHoldsHaveOwnersOfTheirOwn(t *testing.T) {
	e := newEnv(t)
	ctx := fairlock.ContextWithOwner(context.Background(), "shared-owner")
	s := e.client().Semaphore("own", 2)
	other := e.client().Semaphore("own", 2)
	// ContextWithOwner does not make two Acquires one hold.
	a, err := s.Acquire(ctx, 1)
	require.NoError(t, err)
	b, err := other.Acquire(ctx, 1)
	require.NoError(t, err)
	_, err = s.TryAcquire(ctx, 1)
	require.ErrorIs(t, err, fairlock.ErrLocked, "two holds of one permit each fill it")
	require.NoError(t, s.Release(a))
	require.NoError(t, b.Err(), "the other hold is its own")
	require.NoError(t, other.Release(b))

	// Readers granted together each get a token of their own.
	rw := e.client().RWMutex("own")
	w, err := rw.Lock(context.Background())
	require.NoError(t, err)
	got := make(chan acquired, 3)
	for range 3 {
		go func() { c, err := rw.RLock(ctx); got <- acquired{c, err} }()
	}
	e.waitWeightedQueued("own", queue.KindRWMutex, 3)
	tw, err := rw.Token(w)
	require.NoError(t, err)
	require.NoError(t, rw.Unlock(w))
	seen := map[int64]bool{}
	for range 3 {
		r := awaitAcquired(t, got)
		require.NoError(t, r.err)
		tok, err := rw.Token(r.ctx)
		require.NoError(t, err)
		require.Greater(t, tok, tw)
		require.False(t, seen[tok], "token %d given twice", tok)
		seen[tok] = true
		require.NoError(t, rw.RUnlock(r.ctx))
	}
	e.requireWeightedGone("own", queue.KindRWMutex)
}

func TestSemaphoreWaiterAboveALoweredCapacityFails(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	s := e.client().Semaphore("shrink", 3)
	a, err := s.Acquire(ctx, 2)
	require.NoError(t, err)
	w := acquireAsync(ctx, e.client(fairlock.WithWaiterTTL(time.Second)).Semaphore("shrink", 3), 3)
	e.waitWeightedQueued("shrink", queue.KindSemaphore, 1)
	require.NoError(t, s.SetPermits(ctx, 2))
	got := awaitAcquired(t, w) // at its next poll, a third of the waiter TTL at most
	require.ErrorIs(t, got.err, fairlock.ErrInvalidOption)
	require.ErrorContains(t, got.err, "lowered to 2")
	require.NoError(t, s.Release(a))
	e.requireWeightedGone("shrink", queue.KindSemaphore)
}

func TestRWMutexReadLevelsUnderOneWriteHoldEndApart(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	rw := e.client().RWMutex("apart")
	for _, downgrade := range []bool{false, true} {
		wctx, err := rw.Lock(ctx)
		require.NoError(t, err)
		// Two read levels taken with the write hold's context: two
		// holds of one owner.
		r1, err := rw.RLock(wctx)
		require.NoError(t, err)
		r2, err := rw.RLock(wctx)
		require.NoError(t, err)
		if downgrade {
			require.NoError(t, rw.Unlock(wctx))
		}
		require.NoError(t, rw.RUnlock(r2))
		require.NoError(t, r1.Err(), "the other read level goes on")
		_, err = rw.TryLock(ctx)
		require.ErrorIs(t, err, fairlock.ErrLocked, "its read level still counts in Redis")
		require.NoError(t, rw.RUnlock(r1), "downgrade %v", downgrade)
		if !downgrade {
			require.NoError(t, rw.Unlock(wctx))
		}
		e.requireWeightedGone("apart", queue.KindRWMutex)
	}
}
