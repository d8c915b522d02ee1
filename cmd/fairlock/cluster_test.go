package main

import (
	"encoding/json"
	"fmt"
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
	assert.Equal(t, strings.Join(names, "\n")+"\n", out)
	code, out, errs = r.cmd("list", "-json")
	require.Equal(t, exitOK, code, errs)
	var got []string
	require.NoError(t, json.Unmarshal([]byte(out), &got), out)
	assert.Equal(t, names, got)

	code, out, errs = r.cmd("inspect", "a")
	require.Equal(t, exitOK, code, errs)
	assert.Contains(t, out, "1. owner w1  client "+l.waiters[0].ID())
	code, out, errs = r.cmd("inspect", "-json", "a")
	require.Equal(t, exitOK, code, errs)
	var st lockJSON
	require.NoError(t, json.Unmarshal([]byte(out), &st), out)
	require.NotNil(t, st.Holder)
	assert.Equal(t, "boss", st.Holder.Owner)
	require.Len(t, st.Waiters, 1)

	// A watch on a cluster redraws on its timer (sharded wake channels
	// cannot be subscribed by pattern): it shows the next holder.
	wout, werrs, wcode := startWatch(t.Context(), append(append([]string{"watch"}, r.flags...), "-for", "3s", "-every", "100ms", "-json", "a")...)
	waitOutput(t, wout, `"owner":"boss"`, 2*time.Second)

	token, err := l.holder.Mutex("a").Token(l.held)
	require.NoError(t, err)
	code, out, errs = r.cmd("unlock", "-force", "-yes", "-json", "a")
	require.Equal(t, exitOK, code, errs)
	var u unlockJSON
	require.NoError(t, json.Unmarshal([]byte(out), &u), out)
	assert.Equal(t, unlockJSON{Name: "a", Removed: true, Owner: "boss", Client: l.holder.ID(), Token: token}, u)
	select {
	case <-l.granted[0]:
	case <-time.After(5 * time.Second):
		t.Fatal("the next waiter was not granted the lock")
	}
	code, out, errs = r.cmd("inspect", "a")
	require.Equal(t, exitOK, code, errs)
	assert.Contains(t, out, "held by owner w1", fmt.Sprint(errs))
	waitOutput(t, wout, `"owner":"w1"`, 2*time.Second)
	select {
	case c := <-wcode:
		assert.Equal(t, exitOK, c, werrs.String())
	case <-time.After(5 * time.Second):
		t.Fatal("watch did not end after -for 3s")
	}
}
