package main

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock/internal/redistest"
)

// On a Redis Cluster of 3 masters, with locks on more than one master.
func TestInspectListAndUnlockOnACluster(t *testing.T) {
	redistest.Slow(t)
	cl := redistest.ClusterFor(t, 3, 0)
	p := redistest.Prefix(t)
	r := &rig{t: t, rdb: cl.Client(t), prefix: p, flags: []string{"-cluster", strings.Join(cl.Addrs(), ","), "-prefix", p}}
	names := []string{"a", "b", "c", "d", "e", "f"}
	c := r.client()
	for _, n := range names[1:] {
		_, err := c.Mutex(n).Lock(t.Context())
		require.NoError(t, err)
	}
	l := r.lineUp("a", 1)
	masters := map[string]bool{}
	for _, n := range names {
		m, err := cl.MasterOf(t.Context(), p+":{"+n+"}")
		require.NoError(t, err)
		masters[m] = true
	}
	require.Greater(t, len(masters), 1, "the locks are on one master only")

	code, out, errs := r.cmd("list")
	require.Equal(t, exitOK, code, errs)
	assert.Equal(t, len(names)+1, strings.Count(out, "\n"), out)
	code, out, errs = r.cmd("list", "-json")
	require.Equal(t, exitOK, code, errs)
	var got []string
	for _, n := range decode[listJSON](t, out).Names {
		got = append(got, n.Name)
		assert.Equal(t, "mutex", n.Locks[0].Kind)
	}
	assert.Equal(t, names, got)

	code, out, errs = r.cmd("inspect", "a")
	require.Equal(t, exitOK, code, errs)
	assert.Contains(t, out, "1. lock    owner w1  client "+l.waiters[0].ID())
	code, out, errs = r.cmd("inspect", "-json", "a")
	require.Equal(t, exitOK, code, errs)
	st := decode[inspectJSON](t, out).Locks[0]
	assert.Equal(t, []string{"boss"}, owners(st.Holders))
	require.Len(t, st.Waiters, 1)

	// A watch on a cluster redraws on its timer (sharded wake channels
	// cannot be subscribed by pattern): it shows the next holder.
	wout, werrs, wcode := startWatch(t.Context(), r.args("watch", "-for", "3s", "-every", "100ms", "-json", "a")...)
	waitOutput(t, wout, `"owner":"boss"`, 2*time.Second)

	tok := token(t, l.holder.Mutex("a").Token, l.held)
	code, out, errs = r.cmd("unlock", "-force", "-yes", "-json", "a")
	require.Equal(t, exitOK, code, errs)
	u := decode[unlockJSON](t, out)
	assert.True(t, u.Removed)
	require.NotNil(t, u.Holder)
	assert.Equal(t, []any{"boss", l.holder.ID(), tok}, []any{u.Holder.Owner, u.Holder.Client, u.Holder.Token})
	granted(t, l.granted[0], "the next waiter")
	code, out, errs = r.cmd("inspect", "a")
	require.Equal(t, exitOK, code, errs)
	assert.Contains(t, out, "1. owner w1  client", errs)
	waitOutput(t, wout, `"owner":"w1"`, 2*time.Second)
	select {
	case c := <-wcode:
		assert.Equal(t, exitOK, c, werrs.String())
	case <-time.After(5 * time.Second):
		t.Fatal("watch did not end after -for 3s")
	}
}
