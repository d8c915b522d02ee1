package fairlock_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/fairlock/fairlock/queue"
)

// The Semaphore's and the RWMutex's core cases, run on every kind of
// client: a *redis.Client (TestWeightedCoreCasesOnOneServer), a Redis
// Cluster and a failover client under Sentinel (in TestTopologies, which
// runs them with the Mutex's core cases on the deployments it shares), and
// a Ring (TestRingWeightedCoreCases). Each case runs with a watchdog lease
// and with a fixed one.
//
// The Clients of the cases poll only every 10s (waiter TTL 30s): a grant
// within pushBound came by push, on the wake channel of the lock's kind
// in the lock's slot (sharded on a Cluster).

const pushBound = 5 * time.Second

// weightedCoreCases are run by runCoreCases on every topology.
var weightedCoreCases = []struct {
	name string
	run  func(t *testing.T, e *env, lock string)
}{
	{"SemaphoreHeadBlocksTheLineAndAReleaseGrantsSeveral", func(t *testing.T, e *env, lock string) {
		semaphoreHeadBlocksTheLineAndAReleaseGrantsSeveral(t, e, lock)
	}},
	{"SemaphoreHeadBlocksTheLineWithAFixedLease", func(t *testing.T, e *env, lock string) {
		semaphoreHeadBlocksTheLineAndAReleaseGrantsSeveral(t, e, lock, fairlock.WithFixedLease(20*time.Second))
	}},
	{"RWMutexBatchesReadersAndStarvesNoWriter", func(t *testing.T, e *env, lock string) {
		rwMutexBatchesReadersAndStarvesNoWriter(t, e, lock)
	}},
	{"RWMutexBatchesReadersWithAFixedLease", func(t *testing.T, e *env, lock string) {
		rwMutexBatchesReadersAndStarvesNoWriter(t, e, lock, fairlock.WithFixedLease(20*time.Second))
	}},
	{"SemaphoreCrowdNeverHoldsMoreThanItsPermits", semaphoreCrowd},
	{"RWMutexCrowdNeverHasAWriterBesideAnyone", rwMutexCrowd},
	{"SemaphoreCountsExactlyAtTheLargestCapacity", semaphoreCountsExactlyAtTheLargestCapacity},
	{"SemaphoreWaiterAboveALoweredCapacityIsToldAtOnce", semaphoreWaiterAboveALoweredCapacityIsToldAtOnce},
	{"SemaphoreWaiterBehindTheHeadAboveALoweredCapacityIsToldAtOnce", semaphoreWaiterBehindTheHeadAboveALoweredCapacityIsToldAtOnce},
}

func TestWeightedCoreCasesOnOneServer(t *testing.T) {
	t.Parallel()
	for _, c := range weightedCoreCases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.run(t, newEnv(t), "weighted")
		})
	}
}

// The core cases on a Ring of two shards, on names of each.
func TestRingWeightedCoreCases(t *testing.T) {
	redistest.Slow(t)
	t.Parallel()
	ring := newRing(t)
	dial := func(testing.TB) redis.UniversalClient { return ring }
	shards := map[string]string{} // shard address -> a name it serves
	for i := 0; len(shards) < 2; i++ {
		require.Less(t, i, 1000)
		name := fmt.Sprintf("ring-%d", i)
		shard, err := ring.GetShardClientForKey("{" + name + "}")
		require.NoError(t, err)
		if _, ok := shards[shard.Options().Addr]; !ok {
			shards[shard.Options().Addr] = name
		}
	}
	for _, c := range weightedCoreCases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			for _, name := range shards {
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					c.run(t, &env{t: t, rdb: ring, prefix: redistest.Prefix(t), dial: dial}, name)
				})
			}
		})
	}
}

// semaphoreHeadBlocksTheLineAndAReleaseGrantsSeveral: a caller whose
// weight does not fit waits, and those behind it wait too, even one whose
// weight would fit; a release grants every caller from the head that now
// fits, at once, by push, each under a fresh token.
func semaphoreHeadBlocksTheLineAndAReleaseGrantsSeveral(t *testing.T, e *env, name string, opts ...fairlock.HandleOption) {
	ctx := context.Background()
	const permits = 4
	kind := queue.KindSemaphore
	newSem := func() *fairlock.Semaphore {
		return e.client(fairlock.WithWaiterTTL(30*time.Second)).Semaphore(name, permits, opts...)
	}
	a, b, c, d := newSem(), newSem(), newSem(), newSem()

	// Uncontended: every permit, and back.
	all, err := a.TryAcquire(ctx, permits)
	require.NoError(t, err)
	_, err = b.TryAcquire(ctx, 1)
	require.ErrorIs(t, err, fairlock.ErrLocked)
	require.NoError(t, a.Release(all))
	e.requireWeightedGone(name, kind)

	held, err := a.Acquire(ctx, 3)
	require.NoError(t, err)
	ta, err := a.Token(held)
	require.NoError(t, err)
	big := lockAsync(ctx, permitsOf{b, 2})
	e.waitWeightedQueued(name, kind, 1)
	small := lockAsync(ctx, permitsOf{c, 1})
	e.waitWeightedQueued(name, kind, 2)
	last := lockAsync(ctx, permitsOf{d, 1})
	e.waitWeightedQueued(name, kind, 3)
	requireWaiting(t, small, "an Acquire of 1 behind one of 2 that does not fit")
	_, err = d.TryAcquire(ctx, 1)
	require.ErrorIs(t, err, fairlock.ErrLocked, "a try passes nobody")
	e.requireWeightedState(name, kind, 1, 3)

	// One release grants the three waiters together: 2+1+1 fit in 4.
	require.NoError(t, a.Release(held))
	tokens := map[int64]bool{}
	var got []context.Context
	for i, ch := range []<-chan result{big, small, last} {
		r := await(t, ch, pushBound)
		require.NoError(t, r.err, "waiter %d", i)
		tok, err := []*fairlock.Semaphore{b, c, d}[i].Token(r.ctx)
		require.NoError(t, err)
		require.Greater(t, tok, ta, "a grant's token is above the hold before it")
		require.False(t, tokens[tok], "each grant has a token of its own")
		tokens[tok] = true
		got = append(got, r.ctx)
	}
	e.requireWeightedState(name, kind, 3, permits)
	require.Zero(t, e.weightedQueued(name, kind))

	// Releases of 1 grant a waiter of 2 once it fits.
	next := lockAsync(ctx, permitsOf{a, 2})
	e.waitWeightedQueued(name, kind, 1)
	require.NoError(t, c.Release(got[1]))
	requireWaiting(t, next, "an Acquire of 2 beside 3 held")
	require.NoError(t, d.Release(got[2]))
	r := await(t, next, pushBound)
	require.NoError(t, r.err)
	require.NoError(t, b.Release(got[0]))
	require.NoError(t, a.Release(r.ctx))
	e.requireWeightedGone(name, kind)
}

// rwMutexBatchesReadersAndStarvesNoWriter: readers hold together; a
// writer waits for them, and readers who ask after it wait behind it; the
// writer's release grants every reader up to the next writer at once.
func rwMutexBatchesReadersAndStarvesNoWriter(t *testing.T, e *env, name string, opts ...fairlock.HandleOption) {
	ctx := context.Background()
	kind := queue.KindRWMutex
	newRW := func() *fairlock.RWMutex {
		return e.client(fairlock.WithWaiterTTL(30*time.Second)).RWMutex(name, opts...)
	}
	a, b, c, d := newRW(), newRW(), newRW(), newRW()

	// Uncontended: a writer alone, then two readers together.
	w, err := a.Lock(ctx)
	require.NoError(t, err)
	_, err = b.TryRLock(ctx)
	require.ErrorIs(t, err, fairlock.ErrLocked)
	require.NoError(t, a.Unlock(w))
	e.requireWeightedGone(name, kind)
	r1, err := a.RLock(ctx)
	require.NoError(t, err)
	r2, err := b.RLock(ctx)
	require.NoError(t, err, "readers hold together")
	_, err = c.TryLock(ctx)
	require.ErrorIs(t, err, fairlock.ErrLocked)
	tr2, err := b.Token(r2)
	require.NoError(t, err)
	e.requireWeightedState(name, kind, 2, 2)

	// The line: writer, reader, reader, writer, reader.
	w1 := lockAsync(ctx, c)
	e.waitWeightedQueued(name, kind, 1)
	r3 := lockAsync(ctx, readerOf{d})
	e.waitWeightedQueued(name, kind, 2)
	r4 := lockAsync(ctx, readerOf{a})
	e.waitWeightedQueued(name, kind, 3)
	w2 := lockAsync(ctx, b)
	e.waitWeightedQueued(name, kind, 4)
	r5 := lockAsync(ctx, readerOf{c})
	e.waitWeightedQueued(name, kind, 5)
	requireWaiting(t, r3, "a reader behind a waiting writer")
	_, err = d.TryRLock(ctx)
	require.ErrorIs(t, err, fairlock.ErrLocked, "a reader passes no waiting writer")

	require.NoError(t, a.RUnlock(r1))
	requireWaiting(t, w1, "a writer while a reader holds")
	require.NoError(t, b.RUnlock(r2))
	g1 := await(t, w1, pushBound)
	require.NoError(t, g1.err)
	tw1, err := c.Token(g1.ctx)
	require.NoError(t, err)
	require.Greater(t, tw1, tr2)
	st := e.requireWeightedState(name, kind, 1, queue.RWCapacity)
	require.Equal(t, 1, st.writers())
	requireWaiting(t, r3, "a reader while the writer holds")

	// The writer's release grants both readers before the next writer.
	require.NoError(t, c.Unlock(g1.ctx))
	g3, g4 := await(t, r3, pushBound), await(t, r4, pushBound)
	require.NoError(t, g3.err)
	require.NoError(t, g4.err)
	for _, g := range []struct {
		rw  *fairlock.RWMutex
		ctx context.Context
	}{{d, g3.ctx}, {a, g4.ctx}} {
		tok, err := g.rw.Token(g.ctx)
		require.NoError(t, err)
		require.Greater(t, tok, tw1)
	}
	e.requireWeightedState(name, kind, 2, 2)
	requireWaiting(t, w2, "a writer while readers hold")
	requireWaiting(t, r5, "a reader behind a waiting writer")

	require.NoError(t, d.RUnlock(g3.ctx))
	require.NoError(t, a.RUnlock(g4.ctx))
	gw2 := await(t, w2, pushBound)
	require.NoError(t, gw2.err)
	requireWaiting(t, r5, "a reader while the writer holds")
	require.NoError(t, b.Unlock(gw2.ctx))
	g5 := await(t, r5, pushBound)
	require.NoError(t, g5.err)
	require.NoError(t, c.RUnlock(g5.ctx))
	e.requireWeightedGone(name, kind)
}

// semaphoreCrowd: callers of 1 and 2 permits on several Clients take and
// give back a Semaphore of 3; no more than 3 are ever held.
func semaphoreCrowd(t *testing.T, e *env, name string) {
	const permits = 3
	cr := newCrowd(permits)
	var wg sync.WaitGroup
	for i := range 3 {
		s := e.client().Semaphore(name, permits)
		for j := range 2 {
			n := int64(1 + (i+j)%2)
			wg.Go(func() {
				for range 6 {
					hctx, err := s.Acquire(context.Background(), n)
					if !assertNoError(t, err) {
						return
					}
					tok, err := s.Token(hctx)
					assertNoError(t, err)
					cr.enter(n, false, tok)
					time.Sleep(time.Millisecond)
					cr.leave(n, false)
					assertNoError(t, s.Release(hctx))
				}
			})
		}
	}
	wg.Wait()
	cr.check(t)
	require.EqualValues(t, 36, cr.holds.Load())
	e.requireWeightedGone(name, queue.KindSemaphore)
}

// rwMutexCrowd: a writer and two readers on each of several Clients take
// and give back a RWMutex; a writer never holds beside anyone.
func rwMutexCrowd(t *testing.T, e *env, name string) {
	cr := newCrowd(0)
	var wg sync.WaitGroup
	for range 3 {
		rw := e.client().RWMutex(name)
		for j := range 3 {
			write := j == 0
			wg.Go(func() {
				for range 5 {
					lock, unlock := rw.RLock, rw.RUnlock
					if write {
						lock, unlock = rw.Lock, rw.Unlock
					}
					hctx, err := lock(context.Background())
					if !assertNoError(t, err) {
						return
					}
					tok, err := rw.Token(hctx)
					assertNoError(t, err)
					cr.enter(1, write, tok)
					time.Sleep(time.Millisecond)
					cr.leave(1, write)
					assertNoError(t, unlock(hctx))
				}
			})
		}
	}
	wg.Wait()
	cr.check(t)
	require.EqualValues(t, 45, cr.holds.Load())
	e.requireWeightedGone(name, queue.KindRWMutex)
}
