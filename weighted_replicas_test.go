//go:build unix

package fairlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/fairlock/fairlock/queue"
)

// WithReplicas for a Semaphore and a RWMutex, on a primary with one
// replica: every grant (fresh, handed over, a re-entry, a read level
// under the write hold) and every release is on the replica when the call
// returns; a grant the replica does not acknowledge is given back.

// replicaHolders returns the holders a server keeps of the weighted lock
// of keys k, by token: their shared and exclusive levels.
func replicaHolders(t *testing.T, rdb *redis.Client, k queue.Keys) map[int64][2]int64 {
	t.Helper()
	st, err := weightedStateIn(rdb, k)
	require.NoError(t, err)
	out := map[int64][2]int64{}
	for _, h := range st.holders {
		out[h.token] = [2]int64{h.shared, h.excl}
	}
	return out
}

// weightedLeft returns how many keys of the weighted lock of keys k the
// server keeps (its fencing counter aside), -1 when it cannot say.
func weightedLeft(rdb *redis.Client, k queue.Keys) int64 {
	n, err := rdb.Exists(context.Background(), k.Lock, k.Holders, k.Queue, k.Deadline).Result()
	if err != nil {
		return -1
	}
	return n
}

func TestWeightedReplicatedGrantsAndReleases(t *testing.T) {
	redistest.Slow(t)
	t.Parallel()
	p := startPair(t)
	bg := context.Background()
	acked := fairlock.WithReplicas(1, time.Second)

	// The subtests run one after another: the last stops the replica.
	t.Run("Semaphore", func(t *testing.T) {
		prefix := redistest.Prefix(t)
		k, err := queue.Weighted(prefix, "sem", queue.KindSemaphore)
		require.NoError(t, err)
		s := clientOf(t, p.primary, prefix, acked).Semaphore("sem", 3)
		w := clientOf(t, p.primary, prefix, acked).Semaphore("sem", 3)
		onReplica := func(sem *fairlock.Semaphore, hctx context.Context) {
			t.Helper()
			tok, err := sem.Token(hctx)
			require.NoError(t, err)
			require.Contains(t, replicaHolders(t, p.replica, k), tok, "the replica has the grant when the call returns")
		}

		h, err := s.Acquire(bg, 2)
		require.NoError(t, err)
		onReplica(s, h)
		// A hand-over: the waiter's grant counts once the replica has it.
		waiter := lockAsync(bg, permitsOf{w, 2})
		require.Eventually(t, func() bool { return p.primary.LLen(bg, k.Queue).Val() == 1 },
			10*time.Second, 5*time.Millisecond, "the waiter joins the line")
		require.NoError(t, s.Release(h))
		r := await(t, waiter, 10*time.Second)
		require.NoError(t, r.err)
		onReplica(w, r.ctx)
		require.NoError(t, w.Release(r.ctx))
		require.Empty(t, replicaHolders(t, p.replica, k), "the replica has the release when Release returns")

		tctx, err := s.TryAcquire(bg, 3)
		require.NoError(t, err)
		onReplica(s, tctx)
		require.NoError(t, s.Release(tctx))
		require.Empty(t, replicaHolders(t, p.replica, k))
		require.Zero(t, weightedLeft(p.primary, k))
	})

	t.Run("RWMutex", func(t *testing.T) {
		prefix := redistest.Prefix(t)
		k, err := queue.Weighted(prefix, "rw", queue.KindRWMutex)
		require.NoError(t, err)
		rw := clientOf(t, p.primary, prefix, acked).RWMutex("rw")
		other := clientOf(t, p.primary, prefix, acked).RWMutex("rw")
		levels := func(hctx context.Context, want [2]int64) {
			t.Helper()
			tok, err := rw.Token(hctx)
			require.NoError(t, err)
			require.Equal(t, map[int64][2]int64{tok: want}, replicaHolders(t, p.replica, k),
				"the replica has the hold's read and write levels when the call returns")
		}

		wctx, err := rw.Lock(bg)
		require.NoError(t, err)
		levels(wctx, [2]int64{0, 1})
		inner, err := rw.Lock(wctx)
		require.NoError(t, err)
		levels(wctx, [2]int64{0, 2})
		rctx, err := rw.RLock(inner)
		require.NoError(t, err)
		levels(wctx, [2]int64{1, 2})
		require.NoError(t, rw.Unlock(inner))
		levels(rctx, [2]int64{1, 1})
		require.NoError(t, rw.Unlock(rctx)) // a downgrade
		levels(rctx, [2]int64{1, 0})

		// A writer waits for the reader; its grant is on the replica.
		writer := lockAsync(bg, other)
		require.Eventually(t, func() bool { return p.primary.LLen(bg, k.Queue).Val() == 1 },
			10*time.Second, 5*time.Millisecond, "the writer joins the line")
		require.NoError(t, rw.RUnlock(rctx))
		r := await(t, writer, 10*time.Second)
		require.NoError(t, r.err)
		tok, err := other.Token(r.ctx)
		require.NoError(t, err)
		require.Equal(t, map[int64][2]int64{tok: {0, 1}}, replicaHolders(t, p.replica, k))
		require.NoError(t, other.Unlock(r.ctx))
		require.Empty(t, replicaHolders(t, p.replica, k))
		require.Zero(t, weightedLeft(p.primary, k))
	})

	t.Run("UnacknowledgedGrantsAreGivenBack", func(t *testing.T) {
		prefix := redistest.Prefix(t)
		c := clientOf(t, p.primary, prefix, fairlock.WithReplicas(1, 100*time.Millisecond))
		sk, err := queue.Weighted(prefix, "lock", queue.KindSemaphore)
		require.NoError(t, err)
		rk, err := queue.Weighted(prefix, "lock", queue.KindRWMutex)
		require.NoError(t, err)
		resume := redistest.Pause(t, p.replica)
		defer resume()

		ctx, cancel := context.WithTimeout(bg, time.Second)
		defer cancel()
		_, err = c.Semaphore("lock", 3).Acquire(ctx, 1)
		require.ErrorIs(t, err, fairlock.ErrNotReplicated)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		_, err = c.RWMutex("lock").TryRLock(bg)
		require.ErrorIs(t, err, fairlock.ErrNotReplicated)
		require.NotErrorIs(t, err, fairlock.ErrLocked)
		_, err = c.RWMutex("lock").TryLock(bg)
		require.ErrorIs(t, err, fairlock.ErrNotReplicated)
		for _, k := range []queue.Keys{sk, rk} {
			require.Eventually(t, func() bool { return weightedLeft(p.primary, k) == 0 },
				5*time.Second, 5*time.Millisecond, "the grant is given back and the line left")
		}
	})
}
