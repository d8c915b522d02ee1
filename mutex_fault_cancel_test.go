package fairlock_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock"
)

// allOrNothing checks the outcome of a Lock by owner whose context ctx
// ended at some point: either Lock returned ctx's error and Redis keeps
// nothing of the call (eventually: the clean-up may outlast Lock), or Lock
// returned the hold, and Unlock gives it back. It reports whether the lock
// was granted.
func allOrNothing(t *testing.T, e *env, m *fairlock.Mutex, name, owner string, ctx context.Context, r result) bool {
	t.Helper()
	if r.err != nil {
		require.ErrorIs(t, r.err, ctx.Err(), "%s: a failed Lock reports its context's error", owner)
		require.Nil(t, r.ctx, "%s: a failed Lock returns no hold", owner)
		var trace string
		require.Eventually(t, func() bool { trace = e.traceOf(name, owner); return trace == "" },
			10*time.Second, 2*time.Millisecond, "%s: Lock failed, yet Redis keeps: %s", owner, trace)
		return false
	}
	require.NotNil(t, r.ctx, "%s: no error and no hold", owner)
	n, err := m.HoldCount(r.ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n, "%s: Lock succeeded without the lock", owner)
	require.NoError(t, m.Unlock(r.ctx), "%s: Lock succeeded without the lock", owner)
	return true
}

func lockNow(ctx context.Context, m *fairlock.Mutex) result {
	lctx, err := m.Lock(ctx)
	return result{lctx, err}
}

func newRand(t *testing.T) *rand.Rand {
	seed := rand.Uint64()
	t.Logf("random offsets from seed %d", seed)
	return rand.New(rand.NewPCG(seed, seed))
}

func TestLockEndedByItsContextHoldsAllOrNothing(t *testing.T) {
	t.Parallel()

	t.Run("before the call", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		hm, wm := e.client().Mutex("before"), e.client().Mutex("before")
		for _, held := range []bool{false, true} {
			owner := fmt.Sprintf("before-%v", held)
			var hctx context.Context
			if held {
				var err error
				hctx, err = hm.Lock(context.Background())
				require.NoError(t, err)
			}
			ctx, cancel := context.WithCancel(fairlock.ContextWithOwner(context.Background(), owner))
			cancel()
			r := lockNow(ctx, wm)
			require.ErrorIs(t, r.err, context.Canceled)
			require.Empty(t, e.traceOf("before", owner), "a Lock called with an ended context sends nothing")
			allOrNothing(t, e, wm, "before", owner, ctx, r)
			if held {
				require.NoError(t, hm.Unlock(hctx))
			}
		}
		e.requireClean("before")
	})

	t.Run("first acquire", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		// 25ms each way: the first acquire takes at least 50ms.
		const rtt = 50 * time.Millisecond
		c, p := e.proxied(&redis.Options{})
		wm, hm := c.Mutex("first"), e.client().Mutex("first")
		_, err := wm.IsLocked(context.Background()) // a pooled connection
		require.NoError(t, err)
		p.SetLatency(rtt / 2)
		rng := newRand(t)
		outcomes := map[bool]int{}
		for i := range 16 {
			owner := fmt.Sprintf("first-%d", i)
			held := i%4 == 3 // the first acquire finds the lock held: it only looks
			var hctx context.Context
			if held {
				hctx, err = hm.Lock(context.Background())
				require.NoError(t, err)
			}
			// The deadline falls before the first reply can arrive, or
			// around it.
			d := time.Duration(rng.Int64N(int64(2 * rtt)))
			ctx, cancel := context.WithTimeout(fairlock.ContextWithOwner(context.Background(), owner), d)
			r := lockNow(ctx, wm)
			if held {
				require.ErrorIs(t, r.err, context.DeadlineExceeded, "%s: the lock is held", owner)
			}
			outcomes[allOrNothing(t, e, wm, "first", owner, ctx, r)]++
			cancel()
			if held {
				require.NoError(t, hm.Unlock(hctx))
			}
		}
		t.Logf("granted %d, gave up %d", outcomes[true], outcomes[false])
		e.requireClean("first")
	})

	t.Run("subscribing", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		c, p := e.proxied(&redis.Options{ReadTimeout: 300 * time.Millisecond, DialTimeout: 300 * time.Millisecond})
		wm, hm := c.Mutex("subscribing"), e.client().Mutex("subscribing")
		_, err := wm.IsLocked(context.Background()) // a pooled connection for the first acquire
		require.NoError(t, err)
		hctx, err := hm.Lock(context.Background())
		require.NoError(t, err)
		// The pub/sub connection a wait opens never answers: Lock stays
		// in the subscription until its context ends.
		p.FreezeNew()
		rng := newRand(t)
		for i := range 3 {
			owner := fmt.Sprintf("subscribing-%d", i)
			accepted := p.Accepted()
			d := 50*time.Millisecond + time.Duration(rng.Int64N(int64(250*time.Millisecond)))
			ctx, cancel := context.WithTimeout(fairlock.ContextWithOwner(context.Background(), owner), d)
			start := time.Now()
			r := lockNow(ctx, wm)
			took := time.Since(start)
			require.ErrorIs(t, r.err, context.DeadlineExceeded)
			require.Less(t, took, d+time.Second, "Lock overstayed its deadline")
			require.Empty(t, e.queued("subscribing"), "a waiter that never subscribed never joined")
			if i == 0 {
				require.Greater(t, p.Accepted(), accepted, "Lock never tried to subscribe")
			}
			allOrNothing(t, e, wm, "subscribing", owner, ctx, r)
			cancel()
		}
		require.NoError(t, hm.Unlock(hctx))
		e.requireClean("subscribing")
	})

	t.Run("waiting", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		// Polls every 20ms, each in flight for 10ms: the end of the wait
		// often finds a poll under way.
		c, p := e.proxied(&redis.Options{}, fairlock.WithWaiterTTL(60*time.Millisecond))
		p.SetLatency(5 * time.Millisecond)
		wm, hm := c.Mutex("waiting"), e.client().Mutex("waiting")
		hctx, err := hm.Lock(context.Background())
		require.NoError(t, err)
		rng := newRand(t)
		for i := range 10 {
			owner := fmt.Sprintf("waiting-%d", i)
			ctx, cancel := context.WithCancel(fairlock.ContextWithOwner(context.Background(), owner))
			res := lockAsync(ctx, wm)
			e.waitQueued("waiting", 1)
			stop := time.AfterFunc(time.Duration(rng.Int64N(int64(40*time.Millisecond))), cancel)
			r := await(t, res, 5*time.Second)
			require.ErrorIs(t, r.err, context.Canceled, "%s: the lock is held", owner)
			allOrNothing(t, e, wm, "waiting", owner, ctx, r)
			stop.Stop()
			cancel()
		}
		require.NoError(t, hm.Unlock(hctx))
		e.requireClean("waiting")
	})

	t.Run("as the grant arrives", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		hm, wm := e.client().Mutex("grant"), e.client().Mutex("grant")
		rng := newRand(t)
		outcomes := map[bool]int{}
		const iterations = 120
		for i := range iterations {
			owner := fmt.Sprintf("grant-%d", i)
			hctx, err := hm.Lock(context.Background())
			require.NoError(t, err)
			ctx, cancel := context.WithCancel(fairlock.ContextWithOwner(context.Background(), owner))
			res := lockAsync(ctx, wm)
			e.waitQueued("grant", 1)

			// The release at 1ms, the end of the waiter's context anywhere
			// from 1ms before it to a few ms after the hand-over.
			released := make(chan error, 1)
			rel := time.AfterFunc(time.Millisecond, func() { released <- hm.Unlock(hctx) })
			end := time.AfterFunc(time.Duration(rng.Int64N(int64(5*time.Millisecond))), cancel)
			r := await(t, res, 5*time.Second)
			require.NoError(t, <-released)
			outcomes[allOrNothing(t, e, wm, "grant", owner, ctx, r)]++
			rel.Stop()
			end.Stop()
			cancel()
			e.requireClean("grant")
			locked, err := hm.IsLocked(context.Background())
			require.NoError(t, err)
			require.False(t, locked, "%s: the lock is left held", owner)
		}
		t.Logf("of %d waiters whose context ended around the hand-over, %d were granted and %d gave up",
			iterations, outcomes[true], outcomes[false])
		require.Positive(t, outcomes[true], "no waiter was granted: the offsets missed the hand-over")
		require.Positive(t, outcomes[false], "no waiter gave up: the offsets missed the hand-over")
	})
}

// On a healthy but slow server, a Lock whose context ends while a call is
// out returns only once that call's clean-up is done: from the moment it
// returns with its context's error, Redis keeps nothing of it, not even
// for a few ms (the call itself may reach the server after the deadline
// and take the lock). Each call is in flight 50 ms, so every deadline
// below falls with a call under way; the clean-up (give the grant back,
// leave the lines) is one more call, well within the grace.
func TestAFailedLockLeavesNothingWhenItReturns(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c, p := e.proxied(&redis.Options{})
	m, ml := c.Mutex("alone"), c.MultiLock([]string{"x", "y"})
	_, err := m.IsLocked(context.Background()) // a pooled connection
	require.NoError(t, err)
	p.SetLatency(25 * time.Millisecond)
	for i, d := range []time.Duration{5, 20, 45, 60, 80} {
		for _, l := range []struct {
			name  string
			lock  func(context.Context) (context.Context, error)
			names []string
		}{
			{"Mutex", m.Lock, []string{"alone"}},
			{"MultiLock", ml.Lock, []string{"x", "y"}},
		} {
			owner := fmt.Sprintf("%s-%d", l.name, i)
			ctx, cancel := context.WithTimeout(fairlock.ContextWithOwner(context.Background(), owner), d*time.Millisecond)
			held, err := l.lock(ctx)
			cancel()
			if err == nil {
				require.NoError(t, c.MultiLock(l.names).Unlock(held))
				continue
			}
			require.ErrorIs(t, err, context.DeadlineExceeded)
			// The call may still be on its way to the server: watch for
			// longer than it and its clean-up take.
			for until := time.Now().Add(150 * time.Millisecond); time.Now().Before(until); time.Sleep(2 * time.Millisecond) {
				for _, name := range l.names {
					require.Empty(t, e.traceOf(name, owner), "%s with a deadline of %v: Redis keeps some of it after Lock returned", l.name, d*time.Millisecond)
				}
			}
		}
	}
}
