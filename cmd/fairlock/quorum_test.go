package main

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock/internal/redistest"
)

// With -masters the command builds a quorum Client: it shows the
// majority's view and each master's, lists the quorum locks, and
// removes a hold from every master.
func TestInspectListAndUnlockOfAQuorumLock(t *testing.T) {
	t.Parallel()
	servers := redistest.Masters(t, 3)
	r := quorumRig(t, servers)
	l := r.lineUp("q", 2)
	tok := token(t, l.holder.Mutex("q").Token, l.held)

	code, out, errs := r.cmd("inspect", "q")
	require.Equal(t, exitOK, code, errs)
	assert.Contains(t, out, `lock "q" (mutex, quorum of 3 masters: the majority's view) at `)
	assert.Regexp(t, fmt.Sprintf(`\nheld\nholders \(1, in order of grant\):\n  1\. owner boss  client %s  weight 1  count 1  token %d  held for `, l.holder.ID(), tok), out)
	assert.Regexp(t, `  1\. lock    owner w1  client `+l.waiters[0].ID()+`  weight 1  waited `, out)
	assert.Regexp(t, `  2\. lock    owner w2  client `+l.waiters[1].ID()+`  weight 1  waited `, out)
	for i, s := range servers {
		assert.Regexp(t, fmt.Sprintf(`\nmaster %d %s at [^\n]+ UTC:\n  held\n  holders \(1, in order of grant\):\n    1\. owner boss  client %s`, i+1, s.Addr, l.holder.ID()), out)
	}

	code, out, errs = r.cmd("inspect", "-json", "q")
	require.Equal(t, exitOK, code, errs)
	got := decode[inspectJSON](t, out)
	require.Len(t, got.Locks, 1)
	lk := got.Locks[0]
	assert.Equal(t, "mutex", lk.Kind)
	assert.Equal(t, []string{"boss"}, owners(lk.Holders))
	assert.Equal(t, tok, lk.Holders[0].Token)
	require.Len(t, lk.Waiters, 2)
	assert.Equal(t, []string{"w1", "w2"}, []string{lk.Waiters[0].Owner, lk.Waiters[1].Owner})
	require.Len(t, lk.Masters, 3)
	for i, m := range lk.Masters {
		assert.Equal(t, servers[i].Addr, m.Master)
		assert.Nil(t, m.Error)
		require.NotNil(t, m.Lock)
		assert.Equal(t, []string{"boss"}, owners(m.Lock.Holders))
		assert.Len(t, m.Lock.Waiters, 2)
		assert.Nil(t, m.Lock.Masters)
	}

	code, out, errs = r.cmd("list", "-json")
	require.Equal(t, exitOK, code, errs)
	assert.Equal(t, []nameJSON{{Name: "q", Locks: []summaryJSON{{Kind: "mutex", Capacity: ptr(int64(1)), Used: ptr(int64(1)), Holders: 1, Waiters: 2}}}},
		decode[listJSON](t, out).Names)

	code, out, errs = r.cmd("unlock", "--force", "--yes", "q")
	require.Equal(t, exitOK, code, errs)
	assert.Contains(t, out, `removed the hold of mutex "q": owner boss`)
	granted(t, l.granted[0], "the next waiter")
	code, out, errs = r.cmd("inspect", "-json", "q")
	require.Equal(t, exitOK, code, errs)
	lk = decode[inspectJSON](t, out).Locks[0]
	assert.Equal(t, []string{"w1"}, owners(lk.Holders))
	for i, m := range lk.Masters {
		require.NotNil(t, m.Lock, "master %d", i)
		assert.Equal(t, []string{"w1"}, owners(m.Lock.Holders), "master %d: removed on every master", i)
	}

	// A master that does not answer is shown as such; the majority's view
	// stands. Each inspect waits -timeout for it at each step (seconds in
	// all): left to the full run.
	if testing.Short() {
		return
	}
	servers[2].Kill()
	code, out, errs = r.cmd("inspect", "-timeout", "1s", "q")
	require.Equal(t, exitOK, code, errs)
	assert.Regexp(t, fmt.Sprintf(`\nmaster 3 %s: no answer: `, servers[2].Addr), out)
	assert.Contains(t, out, "  1. owner w1  client")
	code, out, errs = r.cmd("inspect", "-json", "-timeout", "1s", "q")
	require.Equal(t, exitOK, code, errs)
	lk = decode[inspectJSON](t, out).Locks[0]
	assert.Equal(t, []string{"w1"}, owners(lk.Holders))
	require.NotNil(t, lk.Masters[2].Error)
	assert.Nil(t, lk.Masters[2].Lock)
	assert.NotContains(t, errs, "redis: ", "no go-redis log lines")

	// The master back (empty), so that the Clients' Close, at the test's
	// end, has its answers instead of waiting for them a call timeout.
	require.NoError(t, servers[2].Restart())
}
