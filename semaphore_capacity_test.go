package fairlock_test

import (
	"context"
	"math"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/queue"
)

func TestSemaphoreRefusesCapacitiesItCannotCountExactly(t *testing.T) {
	e := newEnv(t)
	c := e.client()
	ctx := context.Background()
	require.EqualValues(t, int64(1)<<53, fairlock.MaxPermits)
	limit := strconv.FormatInt(fairlock.MaxPermits, 10)
	for _, permits := range []int64{fairlock.MaxPermits + 1, math.MaxInt64} {
		s := c.Semaphore("huge", permits)
		_, err := s.Acquire(ctx, 1)
		require.ErrorIs(t, err, fairlock.ErrInvalidOption, "capacity %d", permits)
		require.ErrorContains(t, err, limit)
		_, err = s.TryAcquire(ctx, 1)
		require.ErrorIs(t, err, fairlock.ErrInvalidOption)
		require.ErrorIs(t, s.SetPermits(ctx, 1), fairlock.ErrInvalidOption)

		err = c.Semaphore("huge", 1).SetPermits(ctx, permits)
		require.ErrorIs(t, err, fairlock.ErrInvalidOption, "SetPermits(%d)", permits)
		require.ErrorContains(t, err, limit)
	}
	e.requireWeightedGone("huge", queue.KindSemaphore)
}

func TestSemaphoreCountsExactlyAtTheLargestCapacity(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	s := e.client().Semaphore("exact", fairlock.MaxPermits)
	most, err := s.Acquire(ctx, fairlock.MaxPermits-1)
	require.NoError(t, err)
	last, err := s.TryAcquire(ctx, 1)
	require.NoError(t, err, "the last permit fits")
	_, err = s.TryAcquire(ctx, 1)
	require.ErrorIs(t, err, fairlock.ErrLocked, "every permit is held")
	e.requireWeightedState("exact", queue.KindSemaphore, 2, fairlock.MaxPermits)

	// One more waits for a permit to come back.
	other := e.client().Semaphore("exact", fairlock.MaxPermits)
	more := acquireAsync(ctx, other, 1)
	e.waitWeightedQueued("exact", queue.KindSemaphore, 1)
	requirePending(t, more)
	require.NoError(t, s.Release(last))
	got := awaitAcquired(t, more)
	require.NoError(t, got.err)
	_, err = s.TryAcquire(ctx, 1)
	require.ErrorIs(t, err, fairlock.ErrLocked)
	require.NoError(t, other.Release(got.ctx))
	require.NoError(t, s.Release(most))
	e.requireWeightedGone("exact", queue.KindSemaphore)
}
