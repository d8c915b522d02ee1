package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock/internal/redistest"
)

// A watch through Sentinel survives the crash of the primary: it says
// that Redis stopped answering, then that it reconnected once the
// sentinels promoted the replica, and it redraws on a hand-over made on
// the new primary (its pattern subscription followed the primary).
func TestWatchFollowsASentinelFailover(t *testing.T) {
	redistest.Slow(t)
	set := redistest.SentinelFor(t, 1, 3)
	p := redistest.Prefix(t)
	r := &rig{t: t, rdb: set.Client(t), prefix: p,
		flags: []string{"-sentinel", strings.Join(set.SentinelAddrs(), ","), "-master", set.MasterName(), "-prefix", p}}
	c := r.client()
	held, err := c.Mutex("f").Lock(context.Background())
	require.NoError(t, err)
	require.NoError(t, r.rdb.Do(t.Context(), "WAIT", 1, 5000).Err(), "the hold reached the replica")

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	out, errs, code := startWatch(ctx, append(append([]string{"watch"}, r.flags...), "-every", "200ms", "-timeout", "1s", "-json", "f")...)
	waitOutput(t, out, `"why":"start"`, 5*time.Second)
	old, err := set.KillPrimary(ctx)
	require.NoError(t, err)
	waitOutput(t, out, `"why":"error"`, 10*time.Second)
	_, err = set.WaitFailover(old, 60*time.Second)
	require.NoError(t, err)
	waitOutput(t, out, `"why":"reconnected"`, 30*time.Second)

	// A hand-over on the new primary is drawn as one.
	next := r.client()
	granted := make(chan error, 1)
	go func() {
		h, err := next.Mutex("f").Lock(ctx)
		if err == nil {
			err = next.Mutex("f").Unlock(h)
		}
		granted <- err
	}()
	require.Eventually(t, func() bool {
		st, err := c.Inspect(ctx, "f")
		return err == nil && len(st.Waiters) == 1
	}, 30*time.Second, 10*time.Millisecond, "the waiter never joined the line on the new primary")
	require.NoError(t, c.Mutex("f").Unlock(held))
	require.NoError(t, <-granted)
	waitOutput(t, out, `"why":"hand-over"`, 10*time.Second)
	cancel()
	select {
	case c := <-code:
		assert.Equal(t, exitOK, c, errs.String())
	case <-time.After(10 * time.Second):
		t.Fatal("watch did not end when interrupted")
	}
}
