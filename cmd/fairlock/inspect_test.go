package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/internal/redistest"
)

func TestInspectShowsAMutexsHolderAndWaitersInOrder(t *testing.T) {
	t.Parallel()
	r := sharedRig(t)
	l := r.lineUp("orders", 2)
	tok := token(t, l.holder.Mutex("orders").Token, l.held)

	code, out, errs := r.cmd("inspect", "orders")
	require.Equal(t, exitOK, code, errs)
	assert.Regexp(t, `^lock "orders" \(mutex\) at \d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} UTC \(server clock\)\nheld\n`, out)
	assert.Contains(t, out, "holders (1, in order of grant):\n")
	assert.Regexp(t, fmt.Sprintf(`  1\. owner boss  client %s  weight 1  count 1  token %d  held for [0-9.]+m?s  lease left [0-9.]+s\n`, l.holder.ID(), tok), out)
	assert.Contains(t, out, "waiters (2, in order):")
	assert.Regexp(t, `  1\. lock    owner w1  client `+l.waiters[0].ID()+`  weight 1  waited [0-9.]+m?s  [0-9.]+s left\n`+
		`  2\. lock    owner w2  client `+l.waiters[1].ID()+`  weight 1  waited [0-9.]+m?s  [0-9.]+s left\n`, out)

	for _, flag := range []string{"--json", "-json"} {
		code, out, errs = r.cmd("inspect", "orders", flag) // a flag after the name
		require.Equal(t, exitOK, code, errs)
		got := decode[inspectJSON](t, out)
		assert.Equal(t, schemaVersion, got.Schema)
		assert.Equal(t, "inspect", got.Command)
		assert.Equal(t, "orders", got.Name)
		require.Len(t, got.Locks, 1)
		lk := got.Locks[0]
		assert.Equal(t, "mutex", lk.Kind)
		assert.Equal(t, got.At, lk.At, "one read, one clock")
		assert.Equal(t, ptr(int64(1)), lk.Capacity)
		assert.Equal(t, ptr(int64(1)), lk.Used)
		assert.Nil(t, lk.Readers)
		assert.Nil(t, lk.Writer)
		assert.Nil(t, lk.Masters)
		require.Len(t, lk.Holders, 1)
		h := lk.Holders[0]
		assert.Equal(t, holderJSON{Owner: "boss", Client: l.holder.ID(), Weight: 1, Count: 1, Token: tok,
			Since: h.Since, HeldForMS: h.HeldForMS, LeaseLeftMS: h.LeaseLeftMS}, h)
		require.NotNil(t, h.Since)
		assert.Equal(t, got.At.Sub(*h.Since).Milliseconds(), h.HeldForMS, "held for: the server's now less the grant")
		assert.Positive(t, h.LeaseLeftMS)
		require.Len(t, lk.Waiters, 2)
		for i, w := range lk.Waiters {
			assert.Equal(t, waiterJSON{Kind: "lock", Owner: []string{"w1", "w2"}[i], Client: l.waiters[i].ID(), Weight: 1,
				WaitedForMS: w.WaitedForMS, TimeLeftMS: w.TimeLeftMS}, w)
			assert.Positive(t, w.TimeLeftMS)
		}
		assert.GreaterOrEqual(t, lk.Waiters[0].WaitedForMS, lk.Waiters[1].WaitedForMS, "w1 joined first")
	}
}

func TestInspectShowsASemaphoresPermitsHoldersAndLine(t *testing.T) {
	t.Parallel()
	r := sharedRig(t)
	p := r.semaphoreLine("pool")
	tok1 := token(t, p.clients[0].Semaphore("pool", 3).Token, p.holds[0])
	tok2 := token(t, p.clients[1].Semaphore("pool", 3).Token, p.holds[1])

	code, out, errs := r.cmd("inspect", "pool")
	require.Equal(t, exitOK, code, errs)
	assert.Contains(t, out, `lock "pool" (semaphore) at `)
	assert.Contains(t, out, "\npermits: 3 of 3 held, 0 free\nholders (2, in order of grant):\n")
	assert.Regexp(t, fmt.Sprintf(`  1\. owner %s  client %s  weight 2  count 1  token %d  held for `, p.owners[0], p.clients[0].ID(), tok1), out)
	assert.Regexp(t, fmt.Sprintf(`  2\. owner %s  client %s  weight 1  count 1  token %d  held for `, p.owners[1], p.clients[1].ID(), tok2), out)
	assert.Regexp(t, `  1\. permits owner `+p.waiting[0]+`  client `+p.waiters[0].ID()+`  weight 2  waited `, out)
	assert.Regexp(t, `  2\. permits owner `+p.waiting[1]+`  client `+p.waiters[1].ID()+`  weight 1  waited `, out)

	code, out, errs = r.cmd("inspect", "-json", "pool")
	require.Equal(t, exitOK, code, errs)
	got := decode[inspectJSON](t, out)
	require.Len(t, got.Locks, 1)
	lk := got.Locks[0]
	assert.Equal(t, "semaphore", lk.Kind)
	assert.Equal(t, ptr(int64(3)), lk.Capacity)
	assert.Equal(t, ptr(int64(3)), lk.Used)
	assert.Nil(t, lk.Readers)
	assert.Equal(t, p.owners, owners(lk.Holders))
	assert.Equal(t, []int64{2, 1}, []int64{lk.Holders[0].Weight, lk.Holders[1].Weight})
	assert.Equal(t, []int64{tok1, tok2}, []int64{lk.Holders[0].Token, lk.Holders[1].Token})
	assert.Equal(t, []string{p.clients[0].ID(), p.clients[1].ID()}, []string{lk.Holders[0].Client, lk.Holders[1].Client})
	require.Len(t, lk.Waiters, 2)
	assert.Equal(t, []string{"permits", "permits"}, []string{lk.Waiters[0].Kind, lk.Waiters[1].Kind})
	assert.Equal(t, []int64{2, 1}, []int64{lk.Waiters[0].Weight, lk.Waiters[1].Weight})
	assert.Equal(t, []string{p.waiters[0].ID(), p.waiters[1].ID()}, []string{lk.Waiters[0].Client, lk.Waiters[1].Client})
}

func TestInspectShowsARWMutexsReadersAndLine(t *testing.T) {
	t.Parallel()
	r := sharedRig(t)
	p := r.rwLine("doc")

	code, out, errs := r.cmd("inspect", "doc")
	require.Equal(t, exitOK, code, errs)
	assert.Contains(t, out, `lock "doc" (rwmutex) at `)
	assert.Contains(t, out, "\nheld by 2 reader(s)\n")
	assert.Regexp(t, `  1\. reader  owner `+p.owners[0]+`  client `+p.clients[0].ID()+`  weight 1  count 1  token \d+  held for `, out)
	assert.Regexp(t, `  2\. reader  owner `+p.owners[1]+`  client `+p.clients[1].ID(), out)
	assert.Regexp(t, `  1\. write   owner `+p.waiting[0]+`  client `+p.waiters[0].ID()+`  weight 1  waited `, out)
	assert.Regexp(t, `  2\. read    owner `+p.waiting[1]+`  client `+p.waiters[1].ID()+`  weight 1  waited `, out)

	code, out, errs = r.cmd("inspect", "-json", "doc")
	require.Equal(t, exitOK, code, errs)
	lk := decode[inspectJSON](t, out).Locks[0]
	assert.Equal(t, "rwmutex", lk.Kind)
	assert.Nil(t, lk.Capacity)
	assert.Nil(t, lk.Used)
	assert.Equal(t, ptr(2), lk.Readers)
	assert.Equal(t, ptr(false), lk.Writer)
	assert.Equal(t, p.owners, owners(lk.Holders))
	require.Len(t, lk.Waiters, 2)
	assert.Equal(t, []string{"write", "read"}, []string{lk.Waiters[0].Kind, lk.Waiters[1].Kind})

	// The writer, once granted.
	require.NoError(t, p.clients[0].RWMutex("doc").RUnlock(p.holds[0]))
	require.NoError(t, p.clients[1].RWMutex("doc").RUnlock(p.holds[1]))
	granted(t, p.waits[0], "the writer")
	code, out, errs = r.cmd("inspect", "doc")
	require.Equal(t, exitOK, code, errs)
	assert.Contains(t, out, "\nheld by a writer\n")
	assert.Regexp(t, `  1\. writer  owner `+p.waiting[0]+`  client `+p.waiters[0].ID(), out)
	code, out, errs = r.cmd("inspect", "-json", "doc")
	require.Equal(t, exitOK, code, errs)
	lk = decode[inspectJSON](t, out).Locks[0]
	assert.Equal(t, ptr(true), lk.Writer)
	assert.Equal(t, ptr(0), lk.Readers)
	require.Len(t, lk.Holders, 1)
	assert.True(t, lk.Holders[0].Write)
	assert.Equal(t, int64(1), lk.Holders[0].Weight)
}

// A MultiLock's ticket waits in the line of each of its locks, with the
// other names it waits for.
func TestInspectShowsATicketWithTheOtherLocksItWaitsFor(t *testing.T) {
	t.Parallel()
	r := sharedRig(t)
	tk := r.ticketLine()

	for name, others := range map[string]string{"a": "b, c", "b": "a, c", "c": "a, b"} {
		code, out, errs := r.cmd("inspect", name)
		require.Equal(t, exitOK, code, errs)
		assert.Regexp(t, `  1\. ticket  owner batch  client `+tk.waiter.ID()+`  weight 1  waited [0-9.]+m?s  [0-9.]+s left  with `+others+"\n", out, name)
		code, out, errs = r.cmd("inspect", "-json", name)
		require.Equal(t, exitOK, code, errs)
		lk := decode[inspectJSON](t, out).Locks[0]
		require.Len(t, lk.Waiters, 1, name)
		assert.Equal(t, "ticket", lk.Waiters[0].Kind)
		assert.Equal(t, []string{"a", "b", "c"}, lk.Waiters[0].Locks, "every name of the ticket, this one among them")
	}
	code, out, _ := r.cmd("inspect", "b")
	require.Equal(t, exitOK, code)
	assert.Contains(t, out, "\nheld\n")
	code, out, _ = r.cmd("inspect", "a")
	require.Equal(t, exitOK, code)
	assert.Contains(t, out, "\nnot held\n")
}

// A name used by several kinds shows each of them.
func TestInspectShowsEveryKindOfAName(t *testing.T) {
	t.Parallel()
	r := sharedRig(t)
	c := r.client()
	ctx := fairlock.ContextWithOwner(context.Background(), "one")
	_, err := c.Mutex("shared").Lock(ctx)
	require.NoError(t, err)
	_, err = c.Semaphore("shared", 2).Acquire(ctx, 1)
	require.NoError(t, err)
	_, err = c.RWMutex("shared").RLock(ctx)
	require.NoError(t, err)

	code, out, errs := r.cmd("inspect", "shared")
	require.Equal(t, exitOK, code, errs)
	blocks := strings.Split(out, "\n\n")
	require.Len(t, blocks, 3, out)
	assert.Contains(t, blocks[0], `lock "shared" (mutex)`)
	assert.Contains(t, blocks[1], `lock "shared" (semaphore)`)
	assert.Contains(t, blocks[1], "permits: 1 of 2 held, 1 free")
	assert.Contains(t, blocks[2], `lock "shared" (rwmutex)`)
	code, out, errs = r.cmd("inspect", "-json", "shared")
	require.Equal(t, exitOK, code, errs)
	got := decode[inspectJSON](t, out)
	require.Len(t, got.Locks, 3)
	assert.Equal(t, []string{"mutex", "semaphore", "rwmutex"}, []string{got.Locks[0].Kind, got.Locks[1].Kind, got.Locks[2].Kind})
}

func TestInspectOfAnUnknownLockExitsWithStatus1(t *testing.T) {
	t.Parallel()
	r := sharedRig(t)
	code, out, errs := r.cmd("inspect", "nobody-uses-this")
	assert.Equal(t, exitNotFound, code)
	assert.Empty(t, out)
	assert.Contains(t, errs, `lock "nobody-uses-this" not found`)

	code, out, _ = r.cmd("inspect", "-json", "nobody-uses-this")
	assert.Equal(t, exitNotFound, code)
	got := decode[inspectJSON](t, out)
	assert.Empty(t, got.Locks)
	assert.NotNil(t, got.Locks, "[] rather than null")
	assert.WithinDuration(t, time.Now(), got.At, time.Minute, "the server's clock")

	code, _, errs = r.cmd("inspect", "a}b")
	assert.Equal(t, exitError, code, "a bad name")
	assert.Contains(t, errs, "fairlock: invalid lock name")
}

func TestListNamesTheLocksInUseWithTheirKinds(t *testing.T) {
	t.Parallel()
	r := sharedRig(t)
	r.lineUp("orders-1", 1) // held and waited on
	c := r.client()
	_, err := c.Mutex("orders-2").Lock(context.Background())
	require.NoError(t, err)
	_, err = c.Mutex("billing").Lock(context.Background())
	require.NoError(t, err)
	r.semaphoreLine("pool")
	r.rwLine("doc")
	r.ticketLine() // b held, a and c waited on by the ticket
	_, err = c.Semaphore("billing", 5).Acquire(context.Background(), 2)
	require.NoError(t, err)

	code, out, errs := r.cmd("list")
	require.Equal(t, exitOK, code, errs)
	assert.Equal(t, strings.Join([]string{
		"NAME      KIND       USE          HOLDERS  WAITERS",
		"a         mutex      free         0        1",
		"b         mutex      held         1        1",
		"billing   mutex      held         1        0",
		"billing   semaphore  2/5 permits  1        0",
		"c         mutex      free         0        1",
		"doc       rwmutex    2 reader(s)  2        2",
		"orders-1  mutex      held         1        1",
		"orders-2  mutex      held         1        0",
		"pool      semaphore  3/3 permits  2        2",
	}, "\n")+"\n", out)

	code, out, errs = r.cmd("list", "orders-*")
	require.Equal(t, exitOK, code, errs)
	assert.Equal(t, 3, strings.Count(out, "\n"), out)

	code, out, errs = r.cmd("list", "--json", "[bp]*")
	require.Equal(t, exitOK, code, errs)
	got := decode[listJSON](t, out)
	assert.Equal(t, listJSON{Schema: schemaVersion, Command: "list", Pattern: "[bp]*", Names: []nameJSON{
		{Name: "b", Locks: []summaryJSON{{Kind: "mutex", Capacity: ptr(int64(1)), Used: ptr(int64(1)), Holders: 1, Waiters: 1}}},
		{Name: "billing", Locks: []summaryJSON{
			{Kind: "mutex", Capacity: ptr(int64(1)), Used: ptr(int64(1)), Holders: 1},
			{Kind: "semaphore", Capacity: ptr(int64(5)), Used: ptr(int64(2)), Holders: 1},
		}},
		{Name: "pool", Locks: []summaryJSON{{Kind: "semaphore", Capacity: ptr(int64(3)), Used: ptr(int64(3)), Holders: 2, Waiters: 2}}},
	}}, got)
	code, out, errs = r.cmd("list", "-json", "doc")
	require.Equal(t, exitOK, code, errs)
	assert.Equal(t, []summaryJSON{{Kind: "rwmutex", Readers: ptr(2), Writer: ptr(false), Holders: 2, Waiters: 2}}, decode[listJSON](t, out).Names[0].Locks)

	code, out, errs = r.cmd("list", "-json", "nothing-*")
	require.Equal(t, exitNotFound, code, errs)
	assert.Equal(t, listJSON{Schema: schemaVersion, Command: "list", Pattern: "nothing-*", Names: []nameJSON{}}, decode[listJSON](t, out))
	assert.Contains(t, errs, `no lock held or waited on matches "nothing-*"`)
	code, out, _ = r.cmd("list", "nothing-*")
	require.Equal(t, exitNotFound, code)
	assert.Empty(t, out)
}

// A Redis user without the rights Inspect needs: exit 2, with the
// library's ErrNoPermission message.
func TestARefusedCommandExitsWithStatus2AndSaysWhy(t *testing.T) {
	t.Parallel()
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

// A Client's WithName is shown beside its id, in text and in JSON.
func TestInspectShowsTheHoldersClientName(t *testing.T) {
	t.Parallel()
	r := sharedRig(t)
	c := r.client(fairlock.WithName("billing-worker-3"))
	_, err := c.Mutex("named").Lock(context.Background())
	require.NoError(t, err)
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
	got := decode[inspectJSON](t, out)
	require.Len(t, got.Locks, 1)
	require.Len(t, got.Locks[0].Holders, 1)
	assert.Equal(t, "billing-worker-3", got.Locks[0].Holders[0].ClientName)
}
