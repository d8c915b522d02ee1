package fairlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock/internal/redistest"
)

func TestResentCallsAfterLostRepliesCountOnce(t *testing.T) {
	redistest.Slow(t)
	t.Parallel()
	e := newPrivateEnv(t) // MONITOR sees every command: keep it to this test
	// go-redis gives up on a reply after 300ms and sends the call again
	// on another connection; the lease is long enough that no renewal
	// runs meanwhile.
	c, p := e.proxied(&redis.Options{ReadTimeout: 300 * time.Millisecond})
	m := c.Mutex("resent")
	ctx := context.Background()

	// Load the scripts, so that the reply lost is the script's, not a
	// NOSCRIPT error.
	warm, err := m.Lock(ctx)
	require.NoError(t, err)
	warm, err = m.Lock(warm)
	require.NoError(t, err)
	require.NoError(t, m.Unlock(warm))
	require.NoError(t, m.Unlock(warm))

	mon := e.monitorCalls("resent")
	count := func(hctx context.Context) int {
		t.Helper()
		n, err := m.HoldCount(hctx)
		require.NoError(t, err)
		return n
	}
	// lost runs do with the next reply lost, and checks that the call it
	// made reached the server twice under one call id.
	lost := func(what string, do func() error) {
		t.Helper()
		before := mon.resent()
		p.LoseNextReply()
		require.NoError(t, do(), what)
		require.Equal(t, 1, p.Lost()-len(before), "%s: no reply was lost", what)
		require.Eventually(t, func() bool { return len(mon.resent()) == len(before)+1 },
			5*time.Second, time.Millisecond, "%s: the call was not sent again", what)
		for id, n := range mon.resent() {
			require.Equal(t, 2, n, "%s: call %s sent %d times", what, id, n)
		}
	}

	var hctx, rctx context.Context
	lost("fresh acquire", func() (err error) { hctx, err = m.Lock(ctx); return err })
	require.Equal(t, 1, count(hctx), "a re-sent fresh acquire counts once")

	lost("re-entry", func() (err error) { rctx, err = m.Lock(hctx); return err })
	require.Equal(t, 2, count(hctx), "a re-sent re-entry counts once")

	lost("release of a level", func() error { return m.Unlock(rctx) })
	require.Equal(t, 1, count(hctx), "a re-sent release gives up one level")
	require.NoError(t, hctx.Err())

	// The final release hands the lock to a waiter: sent again, the
	// release would find the lock owned by someone else.
	other := e.client().Mutex("resent")
	next := lockAsync(ctx, other)
	e.waitQueued("resent", 1)
	lost("final release", func() error { return m.Unlock(hctx) })
	requireDone(t, hctx, time.Second)
	require.ErrorIs(t, context.Cause(hctx), context.Canceled, "an unlocked hold, not a lost one")
	r := await(t, next, 5*time.Second)
	require.NoError(t, r.err)
	require.Equal(t, 1, count(r.ctx), "the waiter holds one level")
	require.NoError(t, other.Unlock(r.ctx))
	e.requireClean("resent")
}
