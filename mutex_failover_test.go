package fairlock_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/internal/redistest"
)

// Failovers during contention, on the real topologies: the master of a
// lock's slot is killed (cluster), the primary is killed or handed over
// (Sentinel). Nobody overlaps, tokens keep rising, the waiters are granted
// soon after the deployment recovers, and hand-overs are pushed again
// afterwards.

// contention is a holder and waiters of one lock, each on a Client of its
// own, that hand the lock down the line and check that no two hold it.
type contention struct {
	t       *testing.T
	name    string
	inside  atomic.Int32 // holds in progress
	overlap atomic.Bool
	mu      sync.Mutex
	tokens  []int64 // in grant order; guarded by mu
}

// hold records one hold of the lock: it must be alone, and its token
// higher than every earlier one.
func (c *contention) hold(m *fairlock.Mutex, hctx context.Context) {
	if c.inside.Add(1) != 1 {
		c.overlap.Store(true)
	}
	tok, err := m.Token(hctx)
	if err == nil {
		c.mu.Lock()
		c.tokens = append(c.tokens, tok)
		c.mu.Unlock()
	}
	time.Sleep(2 * time.Millisecond)
	c.inside.Add(-1)
}

func (c *contention) check() {
	c.t.Helper()
	require.False(c.t, c.overlap.Load(), "two holders at once")
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := 1; i < len(c.tokens); i++ {
		require.Greater(c.t, c.tokens[i], c.tokens[i-1], "tokens in grant order: %v", c.tokens)
	}
}

// failoverRun holds the lock through one Client, queues waiters on others,
// runs fail (which returns once the deployment serves the lock again) and
// then releases: every waiter must be granted in turn. It returns how long
// after fail returned the last waiter was granted.
func failoverRun(t *testing.T, newClient func() *fairlock.Client, name string, queued func() int64, fail func()) time.Duration {
	c := &contention{t: t, name: name}
	ctx := context.Background()
	holder := newClient().Mutex(name)
	hctx, err := holder.Lock(ctx)
	require.NoError(t, err)
	c.hold(holder, hctx)

	const waiters = 3
	var wg sync.WaitGroup
	errs := make(chan error, waiters)
	for i := range waiters {
		m := newClient().Mutex(name)
		wg.Go(func() {
			wctx, cancel := context.WithTimeout(ctx, 45*time.Second)
			defer cancel()
			lctx, err := m.Lock(wctx)
			if err != nil {
				errs <- err
				return
			}
			c.hold(m, lctx)
			errs <- m.Unlock(lctx)
		})
		require.Eventually(t, func() bool { return queued() == int64(i+1) }, 10*time.Second, 5*time.Millisecond,
			"waiter %d queued", i)
	}

	fail()
	recovered := time.Now()
	// The release may find the old master dead: it is sent again until
	// the new one answers.
	if err := holder.Unlock(hctx); err != nil {
		t.Logf("unlock during the failover: %v", err)
	}
	wg.Wait()
	took := time.Since(recovered)
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	c.check()
	return took
}

// pushedAfter checks that a hand-over is pushed: the waiter polls only
// every 10s, so a grant within 2s came by pub/sub.
func pushedAfter(t *testing.T, rdb func() redis.UniversalClient, prefix, name string) {
	ctx := context.Background()
	opts := []fairlock.Option{fairlock.WithPrefix(prefix), fairlock.WithWaiterTTL(30 * time.Second)}
	a, err := fairlock.New(rdb(), opts...)
	require.NoError(t, err)
	defer a.Close()
	b, err := fairlock.New(rdb(), opts...)
	require.NoError(t, err)
	defer b.Close()
	hctx, err := a.Mutex(name).Lock(ctx)
	require.NoError(t, err)
	next := lockAsync(ctx, b.Mutex(name))
	time.Sleep(200 * time.Millisecond) // queued and subscribed, in all likelihood; a poll would be 10s away
	released := time.Now()
	require.NoError(t, a.Mutex(name).Unlock(hctx))
	r := await(t, next, 5*time.Second)
	require.NoError(t, r.err)
	t.Logf("hand-over after the failover took %v", time.Since(released))
	require.Less(t, time.Since(released), 2*time.Second, "pushed, not polled")
	require.NoError(t, b.Mutex(name).Unlock(r.ctx))
}

func TestClusterMasterKilledDuringContention(t *testing.T) {
	redistest.Slow(t)
	t.Parallel()
	cluster := redistest.ClusterFor(t, 3, 1)
	ctx := context.Background()
	prefix := redistest.Prefix(t)
	const name = "killed-master"
	key := prefix + ":{" + name + "}"
	master, err := cluster.MasterOf(ctx, key)
	require.NoError(t, err)
	newClient := func() *fairlock.Client {
		c, err := fairlock.New(cluster.Client(t), fairlock.WithPrefix(prefix),
			fairlock.WithLease(3*time.Second), fairlock.WithWaiterTTL(3*time.Second))
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	probe := cluster.Client(t)
	var switched time.Duration
	took := failoverRun(t, newClient, name, func() int64 { return probe.LLen(ctx, key+":queue").Val() }, func() {
		killed := time.Now()
		require.NoError(t, cluster.Kill(master))
		_, err := cluster.WaitFailover(key, master, 30*time.Second)
		require.NoError(t, err)
		switched = time.Since(killed)
	})
	t.Logf("cluster failed over in %v; the waiters were all granted %v later", switched, took)
	require.Less(t, took, 15*time.Second, "go-redis alone would route to the dead master for a minute")
	pushedAfter(t, func() redis.UniversalClient { return cluster.Client(t) }, prefix, name)
}

func TestSentinelFailoverDuringContention(t *testing.T) {
	redistest.Slow(t)
	t.Parallel()
	for _, tc := range []struct {
		name string
		fail func(set *redistest.SentinelSet, ctx context.Context) (string, error)
		// inline: the failover client honours deadlines itself
		// (ContextTimeoutEnabled), so the waiters' Lock calls, which
		// have one, run on their own goroutines.
		inline bool
	}{
		{"primary killed", (*redistest.SentinelSet).KillPrimary, false},
		{"graceful", (*redistest.SentinelSet).Failover, false},
		{"primary killed, inline", (*redistest.SentinelSet).KillPrimary, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			set := redistest.SentinelFor(t, 1, 3)
			ctx := context.Background()
			prefix := redistest.Prefix(t)
			name := "failover"
			key := prefix + ":{" + name + "}"
			dial := func() redis.UniversalClient {
				if !tc.inline {
					return set.Client(t)
				}
				rdb := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: set.MasterName(),
					SentinelAddrs: set.SentinelAddrs(), ContextTimeoutEnabled: true})
				t.Cleanup(func() { _ = rdb.Close() })
				return rdb
			}
			newClient := func() *fairlock.Client {
				c, err := fairlock.New(dial(), fairlock.WithPrefix(prefix),
					fairlock.WithLease(3*time.Second), fairlock.WithWaiterTTL(3*time.Second))
				require.NoError(t, err)
				t.Cleanup(func() { _ = c.Close() })
				return c
			}
			probe := set.Client(t)
			var switched time.Duration
			took := failoverRun(t, newClient, name, func() int64 { return probe.LLen(ctx, key+":queue").Val() }, func() {
				start := time.Now()
				old, err := tc.fail(set, ctx)
				require.NoError(t, err)
				_, err = set.WaitFailover(old, 30*time.Second)
				require.NoError(t, err)
				switched = time.Since(start)
			})
			t.Logf("sentinels switched in %v; the waiters were all granted %v later", switched, took)
			require.Less(t, took, 15*time.Second, "not a lease or a poll per waiter")
			pushedAfter(t, func() redis.UniversalClient { return set.Client(t) }, prefix, name)
		})
	}
}
