package fairlock_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/internal/redistest"
)

func TestPausedRedisHonoursWaiterDeadlines(t *testing.T) {
	redistest.Slow(t)
	t.Parallel()
	e := newPrivateEnv(t)
	opts := []fairlock.Option{fairlock.WithWaiterTTL(300 * time.Millisecond)} // polls every 100ms
	holder := e.client(opts...).Mutex("paused")
	hctx, err := holder.Lock(context.Background())
	require.NoError(t, err)

	const waiters = 4
	var wg sync.WaitGroup
	errs := make(chan error, waiters)
	took := make(chan time.Duration, waiters)
	for range waiters {
		m := e.client(opts...).Mutex("paused")
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 800*time.Millisecond)
			defer cancel()
			start := time.Now()
			_, err := m.Lock(ctx)
			took <- time.Since(start)
			errs <- err
		})
	}
	e.waitQueued("paused", waiters)
	// Pause every client (writes and reads) for far longer than the deadlines.
	require.NoError(t, e.rdb.Do(context.Background(), "CLIENT", "PAUSE", 3000, "ALL").Err())
	wg.Wait()
	close(errs)
	close(took)
	for err := range errs {
		require.ErrorIs(t, err, context.DeadlineExceeded)
	}
	for d := range took {
		// The deadline (800ms) plus the cleanup grace, with room for a
		// loaded machine; without honouring the deadline, Lock would
		// return only after the pause (3s).
		require.Less(t, d, 2*time.Second, "Lock returned %v after it was called", d)
	}
	require.NoError(t, e.rdb.Do(context.Background(), "CLIENT", "UNPAUSE").Err())
	require.Eventually(t, func() bool { return len(e.queued("paused")) == 0 }, 15*time.Second, 20*time.Millisecond,
		"the waiters that gave up leave the queue once Redis answers again")
	e.requireClean("paused")
	require.NoError(t, holder.Unlock(hctx))
}
