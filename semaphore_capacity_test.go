package fairlock_test

import (
	"context"
	"math"
	"strconv"
	"testing"
	"time"

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

// The cases below run on every kind of client with the weighted core
// cases (see weightedCoreCases).

func semaphoreCountsExactlyAtTheLargestCapacity(t *testing.T, e *env, lock string) {
	ctx := context.Background()
	s := e.client().Semaphore(lock, fairlock.MaxPermits)
	most, err := s.Acquire(ctx, fairlock.MaxPermits-1)
	require.NoError(t, err)
	last, err := s.TryAcquire(ctx, 1)
	require.NoError(t, err, "the last permit fits")
	_, err = s.TryAcquire(ctx, 1)
	require.ErrorIs(t, err, fairlock.ErrLocked, "every permit is held")
	e.requireWeightedState(lock, queue.KindSemaphore, 2, fairlock.MaxPermits)

	// One more waits for a permit to come back.
	other := e.client().Semaphore(lock, fairlock.MaxPermits)
	more := acquireAsync(ctx, other, 1)
	e.waitWeightedQueued(lock, queue.KindSemaphore, 1)
	requirePending(t, more)
	require.NoError(t, s.Release(last))
	got := awaitAcquired(t, more)
	require.NoError(t, got.err)
	_, err = s.TryAcquire(ctx, 1)
	require.ErrorIs(t, err, fairlock.ErrLocked)
	require.NoError(t, other.Release(got.ctx))
	require.NoError(t, s.Release(most))
	e.requireWeightedGone(lock, queue.KindSemaphore)
}

// A waiter that SetPermits leaves asking for more than the capacity is
// told by push, as a grant is: it fails at once, not at its next poll.
func semaphoreWaiterAboveALoweredCapacityIsToldAtOnce(t *testing.T, e *env, lock string) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := e.client().Semaphore(lock, 10)
	held, err := s.Acquire(ctx, 8)
	require.NoError(t, err)

	// It polls every 10 s: a third of its waiter TTL, and before the
	// holder's lease (30 s) ends.
	waiter := e.client(fairlock.WithWaiterTTL(30*time.Second)).Semaphore(lock, 10)
	w := acquireAsync(ctx, waiter, 5)
	e.waitWeightedQueued(lock, queue.KindSemaphore, 1)
	resized := time.Now()
	require.NoError(t, e.client().Semaphore(lock, 10).SetPermits(ctx, 4))
	select {
	case got := <-w:
		require.ErrorIs(t, got.err, fairlock.ErrInvalidOption)
		require.ErrorContains(t, got.err, "lowered to 4")
		require.Less(t, time.Since(resized), 2*time.Second)
	case <-time.After(2 * time.Second):
		t.Fatal("the waiter was not told within 2s that its weight is above the capacity")
	}
	require.NoError(t, s.Release(held))
	e.requireWeightedGone(lock, queue.KindSemaphore)
}

// So is a waiter further back, behind a head that waits for room.
func semaphoreWaiterBehindTheHeadAboveALoweredCapacityIsToldAtOnce(t *testing.T, e *env, lock string) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := e.client().Semaphore(lock, 10)
	held, err := s.Acquire(ctx, 8)
	require.NoError(t, err)

	waiters := e.client(fairlock.WithWaiterTTL(30 * time.Second))
	first := waiters.Semaphore(lock, 10)
	head := acquireAsync(ctx, first, 3)
	e.waitWeightedQueued(lock, queue.KindSemaphore, 1)
	back := acquireAsync(ctx, waiters.Semaphore(lock, 10), 5)
	e.waitWeightedQueued(lock, queue.KindSemaphore, 2)
	resized := time.Now()
	require.NoError(t, s.SetPermits(ctx, 4))
	select {
	case got := <-back:
		require.ErrorIs(t, got.err, fairlock.ErrInvalidOption)
		require.ErrorContains(t, got.err, "lowered to 4")
		require.Less(t, time.Since(resized), 2*time.Second)
	case <-time.After(2 * time.Second):
		t.Fatal("the waiter behind the head was not told within 2s that its weight is above the capacity")
	}
	requirePending(t, head) // 3 fits under 4, not beside the 8 held
	require.NoError(t, s.Release(held))
	got := awaitAcquired(t, head)
	require.NoError(t, got.err)
	require.NoError(t, first.Release(got.ctx))
	e.requireWeightedGone(lock, queue.KindSemaphore)
}
