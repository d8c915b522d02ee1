package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/internal/redistest"
)

func TestInspectShowsTheHolderAndTheWaitersInOrder(t *testing.T) {
	r := sharedRig(t)
	l := r.lineUp("orders", 2)
	token, err := l.holder.Mutex("orders").Token(l.held)
	require.NoError(t, err)

	code, out, errs := r.cmd("inspect", "orders")
	require.Equal(t, exitOK, code, errs)
	assert.Contains(t, out, `lock "orders"`)
	assert.Contains(t, out, "held by owner boss")
	assert.Regexp(t, `client +`+l.holder.ID(), out)
	assert.Regexp(t, `count +1\n`, out)
	assert.Regexp(t, fmt.Sprintf(`token +%d\n`, token), out)
	assert.Regexp(t, `lease left +[0-9.]+s`, out)
	assert.Contains(t, out, "waiters (2, in order):")
	assert.Regexp(t, `1\. owner w1  client `+l.waiters[0].ID()+`  [0-9.]+s left\n  2\. owner w2  client `+l.waiters[1].ID()+`  [0-9.]+s left`, out)

	for _, flag := range []string{"--json", "-json"} {
		code, out, errs = r.cmd("inspect", "orders", flag) // a flag after the name
		require.Equal(t, exitOK, code, errs)
		var got lockJSON
		require.NoError(t, json.Unmarshal([]byte(out), &got), out)
		assert.Equal(t, "orders", got.Name)
		assert.True(t, got.Held)
		require.NotNil(t, got.Holder)
		assert.Equal(t, holderJSON{Owner: "boss", Client: l.holder.ID(), Count: 1, Token: token, LeaseLeftMS: got.Holder.LeaseLeftMS}, *got.Holder)
		assert.Positive(t, got.Holder.LeaseLeftMS)
		require.Len(t, got.Waiters, 2)
		for i, w := range got.Waiters {
			assert.Equal(t, []string{"w1", "w2"}[i], w.Owner)
			assert.Equal(t, l.waiters[i].ID(), w.Client)
			assert.Positive(t, w.TimeLeftMS)
		}
	}
}

func TestInspectOfAnUnknownLockExitsWithStatus1(t *testing.T) {
	r := sharedRig(t)
	code, out, errs := r.cmd("inspect", "nobody-uses-this")
	assert.Equal(t, exitNotFound, code)
	assert.Empty(t, out)
	assert.Contains(t, errs, `lock "nobody-uses-this" not found`)

	code, out, _ = r.cmd("inspect", "-json", "nobody-uses-this")
	assert.Equal(t, exitNotFound, code)
	var got lockJSON
	require.NoError(t, json.Unmarshal([]byte(out), &got), out)
	assert.False(t, got.Held)
	assert.Nil(t, got.Holder)
	assert.Empty(t, got.Waiters)

	code, _, errs = r.cmd("inspect", "a}b")
	assert.Equal(t, exitError, code, "a bad name")
	assert.Contains(t, errs, "fairlock: invalid lock name")
}

func TestListNamesTheLocksInUse(t *testing.T) {
	r := sharedRig(t)
	r.lineUp("orders-1", 1) // held and waited on
	c := r.client()
	_, err := c.Mutex("orders-2").Lock(t.Context())
	require.NoError(t, err)
	_, err = c.Mutex("billing").Lock(t.Context())
	require.NoError(t, err)

	code, out, errs := r.cmd("list")
	require.Equal(t, exitOK, code, errs)
	assert.Equal(t, "billing\norders-1\norders-2\n", out)

	code, out, errs = r.cmd("list", "orders-*")
	require.Equal(t, exitOK, code, errs)
	assert.Equal(t, "orders-1\norders-2\n", out)

	code, out, errs = r.cmd("list", "--json", "orders-*")
	require.Equal(t, exitOK, code, errs)
	var names []string
	require.NoError(t, json.Unmarshal([]byte(out), &names), out)
	assert.Equal(t, []string{"orders-1", "orders-2"}, names)

	code, out, errs = r.cmd("list", "-json", "nothing-*")
	require.Equal(t, exitNotFound, code, errs)
	assert.Equal(t, "[]\n", out)
	assert.Contains(t, errs, `no lock held or waited on matches "nothing-*"`)
	code, out, _ = r.cmd("list", "nothing-*")
	require.Equal(t, exitNotFound, code)
	assert.Empty(t, out)
}

// A Redis user without the rights Inspect needs: exit 2, with the
// library's ErrNoPermission message.
func TestARefusedCommandExitsWithStatus2AndSaysWhy(t *testing.T) {
	r := sharedRig(t)
	user := strings.ToLower(strings.ReplaceAll(r.prefix, "-", ""))
	require.NoError(t, r.rdb.Do(t.Context(), "ACL", "SETUSER", user, "on", ">pw", "~*", "&*", "+@all", "-multi", "-scan").Err())
	t.Cleanup(func() { r.rdb.Do(context.Background(), "ACL", "DELUSER", user) })
	url := "redis://" + user + ":pw@" + redistest.Shared(t).Addr + "/0"
	for _, args := range [][]string{{"inspect", "x"}, {"list"}} {
		code, out, errs := runCmd(t, append(args, "-redis", url, "-prefix", r.prefix)...)
		assert.Equal(t, exitError, code, "%q", args)
		assert.Empty(t, out, "%q", args)
		assert.Contains(t, errs, fairlock.ErrNoPermission.Error(), "%q", args)
		assert.NotContains(t, errs, "pw@", "%q: no password in messages", args)
	}

	// watch also subscribes to the lock's wake channels with a pattern.
	watcher := user + "w"
	require.NoError(t, r.rdb.Do(t.Context(), "ACL", "SETUSER", watcher, "on", ">pw", "~*", "&*", "+@all", "-psubscribe").Err())
	t.Cleanup(func() { r.rdb.Do(context.Background(), "ACL", "DELUSER", watcher) })
	url = "redis://" + watcher + ":pw@" + redistest.Shared(t).Addr + "/0"
	code, out, errs := runCmd(t, "watch", "-redis", url, "-prefix", r.prefix, "-idle", "-for", "1s", "x")
	assert.Equal(t, exitError, code)
	assert.Empty(t, out)
	assert.Contains(t, errs, fairlock.ErrNoPermission.Error())
	assert.Contains(t, errs, "+psubscribe")
	require.NoError(t, r.rdb.Do(t.Context(), "ACL", "SETUSER", watcher, "+psubscribe").Err())
	code, out, errs = runCmd(t, "watch", "-redis", url, "-prefix", r.prefix, "-idle", "-for", "200ms", "x")
	assert.Equal(t, exitOK, code, errs)
	assert.Contains(t, out, "not held")
}

// TestInspectShowsTheHoldersClientName shows a Client's WithName beside
// its id, in text and in JSON.
func TestInspectShowsTheHoldersClientName(t *testing.T) {
	r := sharedRig(t)
	c, err := fairlock.New(r.rdb, fairlock.WithPrefix(r.prefix), fairlock.WithName("billing-worker-3"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	m := c.Mutex("named")
	held, err := m.Lock(context.Background())
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Unlock(held) })
	// The Client writes its name at its first Lock, on a goroutine of its
	// own: wait until Redis has it.
	require.Eventually(t, func() bool {
		return r.rdb.Exists(context.Background(), r.prefix+":client:"+c.ID()).Val() == 1
	}, 5*time.Second, 5*time.Millisecond, "the Client's name is never written")

	code, out, errs := r.cmd("inspect", "named")
	require.Equal(t, exitOK, code, errs)
	assert.Contains(t, out, c.ID()+` ("billing-worker-3")`)
	code, out, errs = r.cmd("inspect", "named", "-json")
	require.Equal(t, exitOK, code, errs)
	var got lockJSON
	require.NoError(t, json.Unmarshal([]byte(out), &got), out)
	require.NotNil(t, got.Holder)
	assert.Equal(t, "billing-worker-3", got.Holder.ClientName)
}
