package fairlock_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/fairlock/fairlock/queue"
)

// The core cases of the end-to-end suite, run on the production
// topologies: a Redis Cluster of 3 masters with a replica each, through a
// *redis.ClusterClient, and a primary with 2 replicas under 3 sentinels,
// through a failover client. TestTopologies starts both at once, shares
// them between the cases (parallel subtests) and stops them in its
// cleanup, which runs after every case has ended.

// topology is a Redis deployment the core cases run on.
type topology struct {
	// rdb returns a new client of the deployment, closed when t ends.
	rdb func(t testing.TB) redis.UniversalClient
	// names returns the lock names to run a case on, made from base.
	names func(t *testing.T, base string) []string
}

func TestTopologies(t *testing.T) {
	t.Parallel()
	var (
		wg                 sync.WaitGroup
		cluster            *redistest.Cluster
		set                *redistest.SentinelSet
		clusterErr, setErr error
		clusterUp, setUp   time.Duration
	)
	start := time.Now()
	wg.Go(func() {
		cluster, clusterErr = redistest.StartCluster(3, 1)
		clusterUp = time.Since(start)
	})
	wg.Go(func() {
		set, setErr = redistest.StartSentinel(2, 3)
		setUp = time.Since(start)
	})
	wg.Wait()
	if cluster != nil {
		t.Cleanup(cluster.Stop)
		t.Logf("cluster of 3 masters and 3 replicas ready in %v", clusterUp)
	}
	if set != nil {
		t.Cleanup(set.Stop)
		t.Logf("primary, 2 replicas and 3 sentinels ready in %v", setUp)
	}

	t.Run("Cluster", func(t *testing.T) {
		t.Parallel()
		require.NoError(t, clusterErr)
		masters, err := cluster.Masters(context.Background())
		require.NoError(t, err)
		require.Len(t, masters, 3)
		runCoreCases(t, topology{
			rdb: func(t testing.TB) redis.UniversalClient { return cluster.Client(t) },
			// One name per master: every case runs on every master.
			names: func(t *testing.T, base string) []string {
				byMaster := map[string]string{}
				for i := 0; len(byMaster) < len(masters); i++ {
					require.Less(t, i, 1000, "no names on every master")
					name := fmt.Sprintf("%s-%d", base, i)
					m, err := cluster.MasterOf(context.Background(), "{"+name+"}")
					require.NoError(t, err)
					if _, ok := byMaster[m]; !ok {
						byMaster[m] = name
					}
				}
				var names []string
				for _, m := range masters {
					names = append(names, byMaster[m])
				}
				return names
			},
		})
	})
	t.Run("Sentinel", func(t *testing.T) {
		t.Parallel()
		require.NoError(t, setErr)
		runCoreCases(t, topology{
			rdb:   func(t testing.TB) redis.UniversalClient { return set.Client(t) },
			names: func(_ *testing.T, base string) []string { return []string{base} },
		})
	})
}

// runCoreCases runs every core case on every name the topology gives, as
// parallel subtests of t.
func runCoreCases(t *testing.T, topo topology) {
	cases := []struct {
		name string
		run  func(t *testing.T, e *topoEnv, lock string)
	}{
		{"UncontendedLockAndUnlock", uncontendedLockAndUnlock},
		{"TryLockFailsWhileHeldOrAwaited", tryLockFailsWhileHeldOrAwaited},
		{"WaitersAreGrantedInJoinOrder", waitersAreGrantedInJoinOrder},
		{"ConcurrentIncrementsLoseNoUpdate", concurrentIncrementsLoseNoUpdate},
		{"ReentryCountsLevels", reentryCountsLevels},
		{"TokensIncreaseAcrossGrants", tokensIncreaseAcrossGrants},
		{"ForceUnlockHandsOverToTheWaiter", forceUnlockHandsOverToTheWaiter},
		{"TimedOutWaiterLeavesNoTrace", timedOutWaiterLeavesNoTrace},
		{"CloseReturnsErrClosedAndReleasesHolds", closeReturnsErrClosedAndReleasesHolds},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			for _, lock := range topo.names(t, c.name) {
				t.Run(lock, func(t *testing.T) {
					t.Parallel()
					c.run(t, &topoEnv{t: t, topo: topo, rdb: topo.rdb(t), prefix: redistest.Prefix(t)}, lock)
				})
			}
		})
	}
}

// topoEnv is one case's world on a topology: a unique key prefix, a client
// to inspect keys with, and fairlock Clients closed when the case ends.
type topoEnv struct {
	t      *testing.T
	topo   topology
	rdb    redis.UniversalClient
	prefix string
}

// client returns a new Client with a redis client of its own, as a
// separate process would have.
func (e *topoEnv) client(opts ...fairlock.Option) *fairlock.Client {
	e.t.Helper()
	c, err := fairlock.New(e.topo.rdb(e.t), append([]fairlock.Option{fairlock.WithPrefix(e.prefix)}, opts...)...)
	require.NoError(e.t, err)
	e.t.Cleanup(func() { _ = c.Close() })
	return c
}

func (e *topoEnv) keys(name string) queue.Keys {
	k, err := queue.For(e.prefix, name)
	require.NoError(e.t, err)
	return k
}

func (e *topoEnv) queued(name string) int64 {
	n, err := e.rdb.LLen(context.Background(), e.keys(name).Queue).Result()
	require.NoError(e.t, err)
	return n
}

// waitQueued waits until the lock has n waiters in line.
func (e *topoEnv) waitQueued(name string, n int64) {
	e.t.Helper()
	require.Eventually(e.t, func() bool { return e.queued(name) == n },
		10*time.Second, 5*time.Millisecond, "waiting for %d queued waiters of %s", n, name)
}

// requireClean asserts that no waiter of the lock is left in Redis.
func (e *topoEnv) requireClean(name string) {
	e.t.Helper()
	ctx := context.Background()
	require.Zero(e.t, e.queued(name), "queue of %s", name)
	require.Zero(e.t, e.rdb.ZCard(ctx, e.keys(name).Deadline).Val(), "deadlines of %s", name)
}

func uncontendedLockAndUnlock(t *testing.T, e *topoEnv, name string) {
	bg := context.Background()
	m := e.client().Mutex(name)
	hctx, err := m.Lock(bg)
	require.NoError(t, err)
	locked, err := m.IsLocked(bg)
	require.NoError(t, err)
	require.True(t, locked)
	n, err := m.HoldCount(hctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	tok, err := m.Token(hctx)
	require.NoError(t, err)
	require.Positive(t, tok)

	require.NoError(t, m.Unlock(hctx))
	requireDone(t, hctx, time.Second)
	locked, err = m.IsLocked(bg)
	require.NoError(t, err)
	require.False(t, locked)
	e.requireClean(name)
}

func tryLockFailsWhileHeldOrAwaited(t *testing.T, e *topoEnv, name string) {
	bg := context.Background()
	holder := e.client().Mutex(name)
	hctx, err := holder.Lock(bg)
	require.NoError(t, err)
	_, err = e.client().Mutex(name).TryLock(bg)
	require.ErrorIs(t, err, fairlock.ErrLocked, "held")
	require.Zero(t, e.queued(name), "TryLock must not enqueue")

	w := e.client().Mutex(name)
	waiter := lockAsync(bg, w)
	e.waitQueued(name, 1)
	_, err = e.client().Mutex(name).TryLock(bg)
	require.ErrorIs(t, err, fairlock.ErrLocked, "held and awaited")
	require.EqualValues(t, 1, e.queued(name), "TryLock must not enqueue")
	require.NoError(t, holder.Unlock(hctx))
	r := await(t, waiter, 10*time.Second)
	require.NoError(t, r.err)
	require.NoError(t, w.Unlock(r.ctx))

	// A free lock with someone in line (as after a holder's lease ran out
	// before the head polled): plant a live waiter entry of another process.
	k := e.keys(name)
	entry := "0123456789abcdef:60000:someone-else"
	require.NoError(t, e.rdb.RPush(bg, k.Queue, entry).Err())
	require.NoError(t, e.rdb.ZAdd(bg, k.Deadline, redisZ(entry, time.Now().Add(time.Minute))).Err())
	_, err = e.client().Mutex(name).TryLock(bg)
	require.ErrorIs(t, err, fairlock.ErrLocked, "free and awaited: TryLock must not jump the line")
	owner, err := e.rdb.HGet(bg, k.Lock, "owner").Result()
	require.NoError(t, err)
	require.Equal(t, "someone-else", owner, "the head of the line was given the lock")
}

func waitersAreGrantedInJoinOrder(t *testing.T, e *topoEnv, name string) {
	const n = 5
	bg := context.Background()
	holder := e.client().Mutex(name)
	hctx, err := holder.Lock(bg)
	require.NoError(t, err)

	order := make(chan int, n)
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	for i := range n {
		m := e.client().Mutex(name)
		wg.Go(func() {
			ctx, err := m.Lock(bg)
			if !assert.NoError(t, err, "waiter %d", i) {
				return
			}
			order <- i
			assert.NoError(t, m.Unlock(ctx))
		})
		e.waitQueued(name, int64(i+1))
	}
	released := time.Now()
	require.NoError(t, holder.Unlock(hctx))
	var got []int
	for range n {
		select {
		case i := <-order:
			got = append(got, i)
		case <-time.After(10 * time.Second):
			t.Fatalf("grants so far %v; no further grant within 10s", got)
		}
	}
	took := time.Since(released)
	require.Equal(t, []int{0, 1, 2, 3, 4}, got)
	t.Logf("%d hand-overs in %v (%v each)", n, took, took/n)
	wg.Wait()
	e.requireClean(name)
}

func concurrentIncrementsLoseNoUpdate(t *testing.T, e *topoEnv, name string) {
	const clients, goroutines, rounds = 3, 3, 8
	bg := context.Background()
	counter := e.prefix + ":{" + name + "}:counter" // in the lock's slot
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		busy   bool
		tokens []int64 // in grant order; guarded by mu
	)
	for range clients {
		c := e.client()
		for range goroutines {
			m := c.Mutex(name)
			wg.Go(func() {
				for range rounds {
					lctx, err := m.Lock(bg)
					if !assert.NoError(t, err) {
						return
					}
					tok, err := m.Token(lctx)
					assert.NoError(t, err)
					mu.Lock()
					assert.False(t, busy, "two holders at once")
					busy = true
					tokens = append(tokens, tok)
					mu.Unlock()
					// A read-modify-write that loses updates without mutual exclusion.
					v, _ := e.rdb.Get(lctx, counter).Int()
					assert.NoError(t, e.rdb.Set(lctx, counter, v+1, 0).Err())
					mu.Lock()
					busy = false
					mu.Unlock()
					assert.NoError(t, m.Unlock(lctx))
				}
			})
		}
	}
	wg.Wait()
	v, err := e.rdb.Get(bg, counter).Int()
	require.NoError(t, err)
	require.Equal(t, clients*goroutines*rounds, v)
	for i := 1; i < len(tokens); i++ {
		require.Greater(t, tokens[i], tokens[i-1], "tokens must increase in grant order")
	}
	e.requireClean(name)
}

func reentryCountsLevels(t *testing.T, e *topoEnv, name string) {
	bg := context.Background()
	m := e.client().Mutex(name)
	ctx1, err := m.Lock(bg)
	require.NoError(t, err)
	tok1, err := m.Token(ctx1)
	require.NoError(t, err)
	ctx2, err := m.Lock(ctx1)
	require.NoError(t, err)
	ctx3, err := m.TryLock(ctx2)
	require.NoError(t, err)
	n, err := m.HoldCount(ctx3)
	require.NoError(t, err)
	require.Equal(t, 3, n)
	tok3, err := m.Token(ctx3)
	require.NoError(t, err)
	require.Equal(t, tok1, tok3, "re-entry keeps the token")
	_, err = e.client().Mutex(name).TryLock(bg)
	require.ErrorIs(t, err, fairlock.ErrLocked, "another owner")

	require.NoError(t, m.Unlock(ctx3))
	require.NoError(t, m.Unlock(ctx2))
	n, err = m.HoldCount(ctx1)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.NoError(t, ctx1.Err(), "the hold goes on until the last Unlock")
	require.NoError(t, m.Unlock(ctx1))
	requireDone(t, ctx1, time.Second)
	locked, err := m.IsLocked(bg)
	require.NoError(t, err)
	require.False(t, locked)
	require.ErrorIs(t, m.Unlock(ctx1), fairlock.ErrNotHeld, "unlock once more than locked")
}

func tokensIncreaseAcrossGrants(t *testing.T, e *topoEnv, name string) {
	bg := context.Background()
	var last int64
	for i := range 4 {
		m := e.client().Mutex(name)
		ctx, err := m.Lock(bg)
		require.NoError(t, err)
		tok, err := m.Token(ctx)
		require.NoError(t, err)
		require.Greater(t, tok, last, "grant %d", i)
		last = tok
		require.NoError(t, m.Unlock(ctx))
	}
	// Hand-overs count too.
	holder := e.client().Mutex(name)
	hctx, err := holder.Lock(bg)
	require.NoError(t, err)
	tok, err := holder.Token(hctx)
	require.NoError(t, err)
	require.Greater(t, tok, last)
	last = tok
	w := e.client().Mutex(name)
	next := lockAsync(bg, w)
	e.waitQueued(name, 1)
	require.NoError(t, holder.Unlock(hctx))
	r := await(t, next, 10*time.Second)
	require.NoError(t, r.err)
	tok, err = w.Token(r.ctx)
	require.NoError(t, err)
	require.Greater(t, tok, last, "a hand-over is a fresh grant")
	require.NoError(t, w.Unlock(r.ctx))
}

func forceUnlockHandsOverToTheWaiter(t *testing.T, e *topoEnv, name string) {
	bg := context.Background()
	m := e.client(fairlock.WithLease(300 * time.Millisecond)).Mutex(name)
	hctx, err := m.Lock(bg)
	require.NoError(t, err)
	w := e.client().Mutex(name)
	next := lockAsync(bg, w)
	e.waitQueued(name, 1)

	removed, err := e.client().Mutex(name).ForceUnlock(bg)
	require.NoError(t, err)
	require.True(t, removed)
	r := await(t, next, 10*time.Second)
	require.NoError(t, r.err)
	requireDone(t, hctx, 5*time.Second)
	require.ErrorIs(t, context.Cause(hctx), fairlock.ErrLeaseLost)
	n, err := w.HoldCount(r.ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.NoError(t, w.Unlock(r.ctx))
	e.requireClean(name)
}

func timedOutWaiterLeavesNoTrace(t *testing.T, e *topoEnv, name string) {
	bg := context.Background()
	m := e.client().Mutex(name)
	hctx, err := m.Lock(bg)
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(bg, 300*time.Millisecond)
	defer cancel()
	lctx, err := e.client().Mutex(name).Lock(ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Nil(t, lctx)
	e.requireClean(name)

	require.NoError(t, m.Unlock(hctx))
	locked, err := m.IsLocked(bg)
	require.NoError(t, err)
	require.False(t, locked, "nothing was handed to the waiter that left")
	e.requireClean(name)
}

func closeReturnsErrClosedAndReleasesHolds(t *testing.T, e *topoEnv, name string) {
	bg := context.Background()
	holder := e.client().Mutex(name)
	hctx, err := holder.Lock(bg)
	require.NoError(t, err)

	c := e.client()
	var waiters []<-chan result
	for i := range 3 {
		waiters = append(waiters, lockAsync(bg, c.Mutex(name)))
		e.waitQueued(name, int64(i+1))
	}
	other := name + "-held" // likely in another slot, on another master
	held, err := c.Mutex(other).Lock(bg)
	require.NoError(t, err)

	require.NoError(t, c.Close())
	for _, w := range waiters {
		require.ErrorIs(t, await(t, w, 10*time.Second).err, fairlock.ErrClosed)
	}
	e.requireClean(name)
	requireDone(t, held, time.Second)
	require.ErrorIs(t, context.Cause(held), fairlock.ErrClosed)
	locked, err := e.client().Mutex(other).IsLocked(bg)
	require.NoError(t, err)
	require.False(t, locked, "Close releases live holds")

	require.NoError(t, c.Close(), "Close twice")
	_, err = c.Mutex(name).Lock(bg)
	require.ErrorIs(t, err, fairlock.ErrClosed)
	require.NoError(t, holder.Unlock(hctx))
}
