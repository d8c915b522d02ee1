package fairlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/internal/redistest"
)

// The leases of a Semaphore's and a RWMutex's holds, kept by the Client's
// watchdog as a Mutex's are: a hold lasts as long as its holder lives,
// however many leases that is, and a hold whose lease is lost (its keys
// gone, Redis silent past it, a fixed lease run out) ends with
// ErrLeaseLost, and its weight goes to the next in line.

// leaseCase is a hold of one kind and a caller that waits behind it.
type leaseCase struct {
	name   string
	sem    bool
	hold   string // see callOf: the hold under test
	waiter string // a caller it blocks
}

var leaseCases = []leaseCase{
	{"semaphore", true, "3", "1"},
	{"writer", false, "w", "r"},
	{"reader", false, "r", "w"},
}

// Holds of each kind, each with a caller in line behind it, are kept
// for four leases: renewed, and nobody is granted beside them.
func TestWeightedHoldsAreRenewedPastTheirLease(t *testing.T) {
	redistest.Slow(t)
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	const lease = 600 * time.Millisecond
	c := e.client(fairlock.WithLease(lease))
	holds := make([]context.Context, len(leaseCases))
	holders := make([]weightedCall, len(leaseCases))
	waits := make([]<-chan result, len(leaseCases))
	waiters := make([]weightedCall, len(leaseCases))
	began := make([]float64, len(leaseCases))
	for i, lc := range leaseCases {
		k := e.weightedKeys(lc.name, weightedKindOf(lc.sem))
		holders[i] = callOf(c, lc.sem, lc.name, lc.hold)
		var err error
		holds[i], err = holders[i].Lock(ctx)
		require.NoError(t, err)
		first := e.rdb.ZRangeWithScores(ctx, k.Holders, 0, -1).Val()
		require.Len(t, first, 1)
		began[i] = first[0].Score
		waiters[i] = callOf(e.client(), lc.sem, lc.name, lc.waiter)
		waits[i] = lockAsync(ctx, waiters[i])
		e.waitWeightedQueued(lc.name, weightedKindOf(lc.sem), 1)
	}

	require.Never(t, func() bool {
		for i := range leaseCases {
			if holds[i].Err() != nil || len(waits[i]) > 0 {
				return true
			}
		}
		return false
	}, 4*lease, 20*time.Millisecond, "the holds last four leases, and nobody is granted beside them")
	for i, lc := range leaseCases {
		k := e.weightedKeys(lc.name, weightedKindOf(lc.sem))
		renewed := e.rdb.ZRangeWithScores(ctx, k.Holders, 0, -1).Val()
		require.Len(t, renewed, 1)
		require.Greater(t, renewed[0].Score, began[i]+float64(3*lease/time.Millisecond), "the lease of the %s was moved on by renewals", lc.name)
		require.NoError(t, holders[i].unlock(holds[i]))
		r := await(t, waits[i], pushBound)
		require.NoError(t, r.err)
		require.NoError(t, waiters[i].unlock(r.ctx))
		e.requireWeightedGone(lc.name, weightedKindOf(lc.sem))
	}
}

// A hold whose keys are deleted (an operator's DEL, a FLUSHALL, an
// eviction) learns it at its next renewal; the caller in line is granted
// at its next poll, which finds the lock free.
func TestWeightedHoldWhoseKeysAreDeletedIsLost(t *testing.T) {
	t.Parallel()
	for _, lc := range leaseCases {
		t.Run(lc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			ctx := context.Background()
			const name, lease = "deleted", 600 * time.Millisecond
			kind := weightedKindOf(lc.sem)
			k := e.weightedKeys(name, kind)
			holder := callOf(e.client(fairlock.WithLease(lease)), lc.sem, name, lc.hold)
			hctx, err := holder.Lock(ctx)
			require.NoError(t, err)
			waiter := callOf(e.client(fairlock.WithWaiterTTL(1500*time.Millisecond)), lc.sem, name, lc.waiter)
			next := lockAsync(ctx, waiter)
			e.waitWeightedQueued(name, kind, 1)

			require.NoError(t, e.rdb.Del(ctx, k.Lock, k.Holders).Err())
			requireDone(t, hctx, 2*lease)
			require.ErrorIs(t, context.Cause(hctx), fairlock.ErrLeaseLost)
			err = holder.unlock(hctx)
			require.ErrorIs(t, err, fairlock.ErrNotHeld)
			require.ErrorIs(t, err, fairlock.ErrLeaseLost)
			r := await(t, next, 5*time.Second)
			require.NoError(t, r.err)
			require.NoError(t, waiter.unlock(r.ctx))
			e.requireWeightedGone(name, kind)
		})
	}
}

// Redis stopped (SIGSTOP) past the lease: no renewal is answered, and
// every hold ends with ErrLeaseLost within the lease. Once Redis runs
// again, their weight is free: the callers in line are granted.
func TestWeightedHoldsAreLostWhileRedisIsStopped(t *testing.T) {
	redistest.Slow(t)
	t.Parallel()
	e := newPrivateEnv(t)
	ctx := context.Background()
	const lease = 900 * time.Millisecond
	c := e.client(fairlock.WithLease(lease))
	holds := make([]context.Context, len(leaseCases))
	holders := make([]weightedCall, len(leaseCases))
	waits := make([]<-chan result, len(leaseCases))
	waiters := make([]weightedCall, len(leaseCases))
	for i, lc := range leaseCases {
		holders[i] = callOf(c, lc.sem, lc.name, lc.hold)
		var err error
		holds[i], err = holders[i].Lock(ctx)
		require.NoError(t, err)
		waiters[i] = callOf(e.client(), lc.sem, lc.name, lc.waiter)
		waits[i] = lockAsync(ctx, waiters[i])
		e.waitWeightedQueued(lc.name, weightedKindOf(lc.sem), 1)
	}

	stopped := time.Now()
	resume := redistest.Pause(t, e.rdb.(*redis.Client))
	for i, lc := range leaseCases {
		requireDone(t, holds[i], 2*lease)
		require.ErrorIs(t, context.Cause(holds[i]), fairlock.ErrLeaseLost, lc.name)
	}
	t.Logf("every hold lost %v after Redis stopped (lease %v)", time.Since(stopped), lease)
	time.Sleep(lease) // past the lease in Redis too
	resume()

	for i, lc := range leaseCases {
		require.ErrorIs(t, holders[i].unlock(holds[i]), fairlock.ErrLeaseLost, lc.name)
		r := await(t, waits[i], 15*time.Second)
		require.NoError(t, r.err, lc.name)
		require.NoError(t, waiters[i].unlock(r.ctx))
		e.requireWeightedGone(lc.name, weightedKindOf(lc.sem))
	}
}

// A fixed lease is never renewed: the hold ends when it runs out, with
// ErrLeaseLost, and the caller in line is granted then.
func TestWeightedFixedLeaseRunsOut(t *testing.T) {
	t.Parallel()
	for _, lc := range leaseCases {
		t.Run(lc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			ctx := context.Background()
			const name, lease = "fixed", 500 * time.Millisecond
			kind := weightedKindOf(lc.sem)
			c := e.client()
			var holder weightedCall
			if lc.sem {
				holder = acquireCall(c.Semaphore(name, crashPermits, fairlock.WithFixedLease(lease)), crashPermits)
			} else {
				rw := c.RWMutex(name, fairlock.WithFixedLease(lease))
				holder = map[string]weightedCall{"r": readCall(rw), "w": writeCall(rw)}[lc.hold]
			}
			taken := time.Now()
			hctx, err := holder.Lock(ctx)
			require.NoError(t, err)
			waiter := callOf(e.client(), lc.sem, name, lc.waiter)
			next := lockAsync(ctx, waiter)
			e.waitWeightedQueued(name, kind, 1)

			requireDone(t, hctx, 5*lease)
			require.ErrorIs(t, context.Cause(hctx), fairlock.ErrLeaseLost)
			r := await(t, next, 5*time.Second)
			require.NoError(t, r.err)
			require.Greater(t, time.Since(taken), lease/2, "the fixed lease ran for most of itself")
			err = holder.unlock(hctx)
			require.ErrorIs(t, err, fairlock.ErrNotHeld)
			require.NoError(t, waiter.unlock(r.ctx))
			e.requireWeightedGone(name, kind)
		})
	}
}
