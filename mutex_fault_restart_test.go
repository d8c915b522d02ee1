package fairlock_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock"
)

func TestRestartWithoutPersistenceRequeuesWaitersAndLosesHolds(t *testing.T) {
	t.Parallel()
	e := newPrivateEnv(t)
	const lease = time.Second
	opts := []fairlock.Option{fairlock.WithLease(lease), fairlock.WithWaiterTTL(3 * time.Second)}

	// A hold with waiters behind it, and a re-entered hold nobody waits for.
	holder := e.client(opts...)
	hctx, err := holder.Mutex("restart").Lock(context.Background())
	require.NoError(t, err)
	lonely := holder.Mutex("restart-alone")
	actx, err := lonely.Lock(context.Background())
	require.NoError(t, err)
	actx, err = lonely.Lock(actx)
	require.NoError(t, err)

	const waiters = 3
	granted := make(chan int, waiters)
	var wg sync.WaitGroup
	for i := range waiters {
		m := e.client(opts...).Mutex("restart")
		wg.Go(func() {
			ctx, err := m.Lock(context.Background())
			if !assert.NoError(t, err, "waiter %d", i) {
				return
			}
			granted <- i
			assert.NoError(t, m.Unlock(ctx))
		})
		e.waitQueued("restart", i+1)
	}
	t.Cleanup(wg.Wait)

	require.NoError(t, e.srv.Restart())
	restarted := time.Now()
	require.Empty(t, e.queued("restart"), "the new server starts empty")

	// Every waiter finds its place gone, joins again and is granted.
	got := collect(t, granted, waiters, 15*time.Second)
	assert.ElementsMatch(t, seq(waiters), got)
	t.Logf("all waiters granted %v after the restart", time.Since(restarted))

	// The holds whose keys vanished are reported lost at their next
	// renewal (every lease/3), well within a lease.
	for name, ctx := range map[string]context.Context{"restart": hctx, "restart-alone": actx} {
		requireDone(t, ctx, lease+5*time.Second)
		require.ErrorIs(t, context.Cause(ctx), fairlock.ErrLeaseLost, name)
	}
	t.Logf("holds reported lost %v after the restart", time.Since(restarted))
	require.ErrorIs(t, lonely.Unlock(actx), fairlock.ErrLeaseLost)

	// The restarted server works as before for everyone.
	wg.Wait()
	e.requireClean("restart")
	m := holder.Mutex("restart")
	ctx, err := m.Lock(context.Background())
	require.NoError(t, err)
	nm := e.client(opts...).Mutex("restart")
	next := lockAsync(context.Background(), nm)
	e.waitQueued("restart", 1)
	require.NoError(t, m.Unlock(ctx))
	r := await(t, next, 5*time.Second)
	require.NoError(t, r.err)
	require.NoError(t, nm.Unlock(r.ctx))
	e.requireClean("restart")
}
