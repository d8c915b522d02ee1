package fairlock_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/fairlock/fairlock/queue"
)

// aclRules creates the least-privileged Redis user that can use every part
// of fairlock's API under the default key prefix. docs/operations.md shows
// this very line; TestACLLeastPrivilegeUserRunsTheWholeAPI checks both.
const aclRules = "ACL SETUSER locker on >secret" +
	" resetkeys ~fairlock:* resetchannels &fairlock:* -@all" +
	" +evalsha +eval +fcall +function|load" +
	" +get +set +hget +hmget +hset +hincrby +hdel +del +pexpire +pttl" +
	" +lindex +lpop +rpush +lrem +lrange +zscore +zadd +zrem +time +publish" +
	" +exists +subscribe +unsubscribe +ping"

// aclServerCheck are the rules that let fairlock check the server's
// version and eviction policy; recommended, not required.
const aclServerCheck = "+info +config|get"

// aclLockWithin bounds every wait of the ACL scenario. The second Client
// of the scenario polls every 20 s, so a grant within this bound comes
// from the push.
const aclLockWithin = 5 * time.Second

func TestACLLeastPrivilegeUserRunsTheWholeAPI(t *testing.T) {
	redistest.Slow(t)
	t.Parallel()
	srv, err := redistest.Start()
	require.NoError(t, err)
	t.Cleanup(srv.Stop)
	runAPIAsACLUser(t, srv.Addr, srv.Client(t), aclRules, "fairlock")

	doc, err := os.ReadFile("docs/operations.md")
	require.NoError(t, err)
	require.Contains(t, string(doc), "\n"+aclRules+"\n", "docs/operations.md shows the rule line the test checks")
}

// TestACLEveryRuleOfTheLineIsNeeded drops one rule at a time from the line
// and expects the scenario to fail.
func TestACLEveryRuleOfTheLineIsNeeded(t *testing.T) {
	redistest.Slow(t)
	t.Parallel()
	eachRuleLeftOut(t, aclRules, func(t *testing.T, srv *redistest.Server, rule, line string) {
		failure := expectFailure(func(ft require.TestingT) {
			runAPIAsACLUser(ft, srv.Addr, srv.Client(t), line, "fairlock")
		})
		require.NotEmpty(t, failure, "the whole API ran without %s", rule)
		t.Logf("without %s: %s", rule, firstLine(failure))
	})
}

// eachRuleLeftOut runs f, in a parallel subtest with a redis-server of its
// own, once for each rule of the ACL line rules (a key or channel pattern,
// or a +command), with line the rules without that one. The rules that
// send scripts (scriptRules) stand in for one another, so they are left
// out together, once: TestACLWithoutFunctionsRunsByScripts shows what
// each pair of them is for.
func eachRuleLeftOut(t *testing.T, rules string, f func(t *testing.T, srv *redistest.Server, rule, line string)) {
	fields := strings.Fields(rules)
	for i, rule := range fields {
		if !strings.HasPrefix(rule, "~") && !strings.HasPrefix(rule, "&") && !strings.HasPrefix(rule, "+") {
			continue
		}
		without := func(drop func(int, string) bool) string {
			var kept []string
			for j, r := range fields {
				if !drop(j, r) {
					kept = append(kept, r)
				}
			}
			return strings.Join(kept, " ")
		}
		line := without(func(j int, _ string) bool { return j == i })
		if slices.Contains(scriptRules, rule) {
			if rule != scriptRules[0] {
				continue
			}
			rule = strings.Join(scriptRules, " ")
			line = without(func(_ int, r string) bool { return slices.Contains(scriptRules, r) })
		}
		t.Run(rule, func(t *testing.T) {
			t.Parallel()
			srv, err := redistest.Start()
			require.NoError(t, err)
			t.Cleanup(srv.Stop)
			f(t, srv, rule, line)
		})
	}
}

// scriptRules are the rules that send fairlock's scripts: as the
// functions of its library (FCALL, and FUNCTION LOAD where the server
// lacks it), and as scripts (EVALSHA, and EVAL where the server lacks
// it), which a server without functions needs and every server at its
// maxmemory, where Redis starts no function that may write.
var scriptRules = []string{"+evalsha", "+eval", "+fcall", "+function|load"}

// A user without the rules of functions runs the whole API by scripts:
// its Client is refused FCALL once and sends only EVALSHA after that.
func TestACLWithoutFunctionsRunsByScripts(t *testing.T) {
	t.Parallel()
	srv, err := redistest.Start()
	require.NoError(t, err)
	t.Cleanup(srv.Stop)
	admin := srv.Client(t)
	line := strings.Replace(aclRules, " +fcall +function|load", "", 1)
	require.NotEqual(t, aclRules, line)
	runAPIAsACLUser(t, srv.Addr, admin, line, "fairlock")
	info, err := admin.Info(context.Background(), "commandstats").Result()
	require.NoError(t, err)
	require.Contains(t, redistest.InfoField(info, "cmdstat_fcall"), "calls=0,", "no function ran")
	require.NotEmpty(t, redistest.InfoField(info, "cmdstat_evalsha"), "the scripts ran")
	libs, err := admin.FunctionList(context.Background(), redis.FunctionListQuery{}).Result()
	require.NoError(t, err)
	require.Empty(t, libs, "the user could not load the library")
}

// TestACLServerCheckNeedsInfoAndConfigGet shows what the optional rules
// do: on a server that may evict lock keys, only a user that may run INFO
// and CONFIG GET learns so; without them the first Lock logs the refusal
// and goes ahead.
func TestACLServerCheckNeedsInfoAndConfigGet(t *testing.T) {
	t.Parallel()
	srv, err := redistest.Start("--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru")
	require.NoError(t, err)
	t.Cleanup(srv.Stop)
	admin := srv.Client(t)
	for _, tc := range []struct {
		name    string
		line    string
		refused string // the command whose refusal is logged, "" for none
	}{
		{"with INFO and CONFIG GET", aclRules + " " + aclServerCheck, ""},
		// The same user again: the line takes back what it had.
		{"with INFO", aclRules + " +info", "'config|get'"},
		{"the line alone", aclRules, "'info'"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			rdb := newACLUser(t, srv.Addr, admin, tc.line)
			t.Cleanup(func() { _ = rdb.Close() })
			logs := &logRecorder{}
			c, err := fairlock.New(rdb, fairlock.WithLogger(slog.New(logs)))
			require.NoError(t, err)
			t.Cleanup(func() { _ = c.Close() })
			m := c.Mutex("check")
			hctx, err := m.Lock(ctx)
			if tc.refused == "" {
				require.ErrorIs(t, err, fairlock.ErrUnsafeServer)
				require.Nil(t, hctx)
				return
			}
			require.NoError(t, err, "a server that cannot be checked is trusted")
			require.NoError(t, m.Unlock(hctx))
			require.True(t, logs.warned(tc.refused), "a warning names the refused command %s: %v", tc.refused, logs.all())
			// A refusal is an answer: the server is not asked again.
			for range 19 {
				hctx, err := m.Lock(ctx)
				require.NoError(t, err)
				require.NoError(t, m.Unlock(hctx))
			}
			require.Len(t, logs.all(), 1, "one warning for 20 Locks: %v", logs.all())
		})
	}
}

// TestACLRulesForAnotherPrefix: with WithPrefix(p), the line's patterns
// name p in place of fairlock.
func TestACLRulesForAnotherPrefix(t *testing.T) {
	redistest.Slow(t)
	t.Parallel()
	srv, err := redistest.Start()
	require.NoError(t, err)
	t.Cleanup(srv.Stop)
	line := strings.ReplaceAll(aclRules, " ~fairlock:* ", " ~billing-locks:* ")
	line = strings.ReplaceAll(line, " &fairlock:* ", " &billing-locks:* ")
	require.NotEqual(t, aclRules, line)
	runAPIAsACLUser(t, srv.Addr, srv.Client(t), line, "billing-locks")
}

// TestACLWithoutTheChannelPatternAContendedLockFails: a user without the
// channel pattern can take a free lock, but a Lock that has to wait fails
// with an error that names the refusal, and leaves nothing in line.
func TestACLWithoutTheChannelPatternAContendedLockFails(t *testing.T) {
	t.Parallel()
	srv, err := redistest.Start()
	require.NoError(t, err)
	t.Cleanup(srv.Stop)
	admin := srv.Client(t)
	line := strings.Replace(aclRules, " &fairlock:* ", " ", 1)
	require.NotEqual(t, aclRules, line)
	rdb := newACLUser(t, srv.Addr, admin, line)
	t.Cleanup(func() { _ = rdb.Close() })
	c, err := fairlock.New(rdb, fairlock.WithLogger(slog.New(&logRecorder{})))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })

	ctx := context.Background()
	m := c.Mutex("no-channel")
	hctx, err := m.Lock(ctx)
	require.NoError(t, err, "an uncontended Lock needs no channel")
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	r := awaitResult(t, lockAsync(wctx, c.Mutex("no-channel")))
	require.Error(t, r.err)
	require.NotErrorIs(t, r.err, context.DeadlineExceeded)
	require.ErrorIs(t, r.err, fairlock.ErrNoPermission)
	require.ErrorContains(t, r.err, "NOPERM")
	require.ErrorContains(t, r.err, "channel")
	t.Logf("the waiting Lock failed with: %v", r.err)
	require.Nil(t, r.ctx)
	k, err := queue.For("fairlock", "no-channel")
	require.NoError(t, err)
	require.Zero(t, admin.LLen(ctx, k.Queue).Val(), "nothing left in line")
	require.NoError(t, m.Unlock(hctx))
}

// TestACLGoRedisOptionsNeedTheirOwnRules: go-redis options that send a
// command of their own when a connection opens need a rule for it, or no
// command gets through.
func TestACLRefusedWakeMessageStillHandsOverAndIsReported(t *testing.T) {
	t.Parallel()
	srv, err := redistest.Start()
	require.NoError(t, err)
	t.Cleanup(srv.Stop)
	admin := srv.Client(t)
	line := strings.Replace(aclRules, " +publish", "", 1)
	require.NotEqual(t, aclRules, line)
	rdb := newACLUser(t, srv.Addr, admin, line)
	t.Cleanup(func() { _ = rdb.Close() })
	ttl := fairlock.WithWaiterTTL(600 * time.Millisecond) // the waiter polls every 200ms
	holderClient, err := fairlock.New(rdb, ttl)
	require.NoError(t, err)
	t.Cleanup(func() { _ = holderClient.Close() })
	waiterClient, err := fairlock.New(srv.Client(t), ttl)
	require.NoError(t, err)
	t.Cleanup(func() { _ = waiterClient.Close() })

	ctx := context.Background()
	m := holderClient.Mutex("no-publish")
	hctx, err := m.Lock(ctx)
	require.NoError(t, err)
	next := lockAsync(ctx, waiterClient.Mutex("no-publish"))
	k, err := queue.For("fairlock", "no-publish")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return admin.LLen(ctx, k.Queue).Val() == 1 }, aclLockWithin, 2*time.Millisecond)

	err = m.Unlock(hctx)
	require.ErrorIs(t, err, fairlock.ErrNoPermission)
	require.ErrorContains(t, err, "handed to the next waiter")
	require.ErrorContains(t, err, k.Wake)
	requireDone(t, hctx, time.Second)
	require.NotErrorIs(t, context.Cause(hctx), fairlock.ErrLeaseLost, "the hold was unlocked, not lost")
	r := awaitResult(t, next)
	require.NoError(t, r.err, "the waiter finds its grant at its next poll")
	require.NoError(t, waiterClient.Mutex("no-publish").Unlock(r.ctx))
}

func TestACLGoRedisOptionsNeedTheirOwnRules(t *testing.T) {
	t.Parallel()
	srv, err := redistest.Start()
	require.NoError(t, err)
	t.Cleanup(srv.Stop)
	admin := srv.Client(t)
	for _, tc := range []struct {
		option  string
		rule    string
		refused string
		set     func(*redis.Options)
	}{
		{"ClientName", "+client|setname", "'client|setname'", func(o *redis.Options) { o.ClientName = "billing-worker" }},
		{"DB", "+select", "'select'", func(o *redis.Options) { o.DB = 1 }},
	} {
		t.Run(tc.option, func(t *testing.T) {
			ctx := context.Background()
			for _, extra := range []string{"", " " + tc.rule} {
				rdb := newACLUser(t, srv.Addr, admin, aclRules+extra, tc.set)
				t.Cleanup(func() { _ = rdb.Close() })
				c, err := fairlock.New(rdb, fairlock.WithLogger(slog.New(&logRecorder{})))
				require.NoError(t, err)
				t.Cleanup(func() { _ = c.Close() })
				m := c.Mutex("options")
				hctx, err := m.Lock(ctx)
				if extra == "" {
					require.ErrorContains(t, err, "NOPERM")
					require.ErrorContains(t, err, tc.refused)
				} else {
					require.NoError(t, err, "with %s", tc.rule)
					require.NoError(t, m.Unlock(hctx))
				}
				require.NoError(t, c.Close())
			}
		})
	}
}

// runAPIAsACLUser creates the user of an ACL SETUSER line on the server at
// addr (through admin, a client with every permission, which the scenario
// also uses to look at the keys) and runs every entry point of the API as
// that user, with Clients under the key prefix, asserting what each
// returns. At the end, no Client has logged a refused command other than
// the server check's INFO.
func runAPIAsACLUser(t require.TestingT, addr string, admin *redis.Client, line, prefix string) {
	ctx := context.Background()
	var base []fairlock.Option
	if prefix != "fairlock" {
		base = append(base, fairlock.WithPrefix(prefix))
	}
	logs := &logRecorder{}
	opts := func(extra ...fairlock.Option) []fairlock.Option {
		return append(append([]fairlock.Option{fairlock.WithLogger(slog.New(logs))}, base...), extra...)
	}
	rdb1 := newACLUser(t, addr, admin, line)
	defer rdb1.Close()
	rdb2 := newACLUser(t, addr, admin, line)
	defer rdb2.Close()

	// The user is as narrow as the line: other keys and the server's
	// settings are out of its reach.
	require.ErrorContains(t, rdb1.Get(ctx, "elsewhere").Err(), "NOPERM")
	require.ErrorContains(t, rdb1.ConfigGet(ctx, "maxmemory").Err(), "NOPERM")

	c1, err := fairlock.New(rdb1, opts()...)
	require.NoError(t, err)
	defer c1.Close()
	// c2 is another process: its own connections, and a waiter TTL under
	// which it polls only every 20 s, so that it is woken by the push.
	c2, err := fairlock.New(rdb2, opts(fairlock.WithWaiterTTL(time.Minute))...)
	require.NoError(t, err)
	defer c2.Close()
	// c3 holds with a short lease, which its watchdog renews every 200 ms.
	c3, err := fairlock.New(rdb1, opts(fairlock.WithLease(600*time.Millisecond))...)
	require.NoError(t, err)
	defer c3.Close()
	keys := func(name string) queue.Keys {
		k, err := queue.For(prefix, name)
		require.NoError(t, err)
		return k
	}
	// waitQueued waits until the Lock call that reports on waiter is in
	// the line of name, and fails at once if the call returned instead.
	waitQueued := func(name string, waiter <-chan result) {
		deadline := time.Now().Add(aclLockWithin)
		for admin.LLen(ctx, keys(name).Queue).Val() != 1 {
			if len(waiter) > 0 {
				r := <-waiter
				require.FailNow(t, fmt.Sprintf("Lock of %s returned before it got in line: %v", name, r.err))
			}
			if time.Now().After(deadline) {
				require.FailNow(t, fmt.Sprintf("the waiter of %s is not in line within %v", name, aclLockWithin))
			}
			time.Sleep(2 * time.Millisecond) // the poll interval, as in require.Eventually
		}
	}
	requireClean := func(name string) {
		k := keys(name)
		require.Eventually(t, func() bool {
			return admin.LLen(ctx, k.Queue).Val() == 0 && admin.ZCard(ctx, k.Deadline).Val() == 0
		}, aclLockWithin, 2*time.Millisecond, "nothing of a waiter of %s is left", name)
	}

	// Uncontended Lock and Unlock; IsLocked, TTL, Token, HoldCount.
	m := c1.Mutex("plain")
	hctx, err := m.Lock(ctx)
	require.NoError(t, err, "uncontended Lock")
	locked, err := m.IsLocked(ctx)
	require.NoError(t, err)
	require.True(t, locked)
	ttl, err := m.TTL(ctx)
	require.NoError(t, err)
	require.Positive(t, ttl)
	require.LessOrEqual(t, ttl, 30*time.Second)
	first, err := m.Token(hctx)
	require.NoError(t, err)
	require.Positive(t, first)
	n, err := m.HoldCount(hctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.NoError(t, m.Unlock(hctx))
	locked, err = m.IsLocked(ctx)
	require.NoError(t, err)
	require.False(t, locked)
	ttl, err = m.TTL(ctx)
	require.NoError(t, err)
	require.Zero(t, ttl)
	require.ErrorIs(t, m.Unlock(hctx), fairlock.ErrNotHeld)
	require.True(t, logs.warned("'info'"), "the refused server check is logged: %v", logs.all())

	// TryLock: granted on a free lock, ErrLocked on a held one.
	tctx, err := c1.Mutex("try").TryLock(ctx)
	require.NoError(t, err, "TryLock of a free lock")
	_, err = c2.Mutex("try").TryLock(ctx)
	require.ErrorIs(t, err, fairlock.ErrLocked)
	require.NoError(t, c1.Mutex("try").Unlock(tctx))

	// A waiter of another Client is handed the lock by push; its token is
	// greater; it re-enters with Lock and TryLock.
	m1, m2 := c1.Mutex("push"), c2.Mutex("push")
	h1, err := m1.Lock(ctx)
	require.NoError(t, err)
	tok1, err := m1.Token(h1)
	require.NoError(t, err)
	require.Greater(t, tok1, first)
	waiter := lockAsync(ctx, m2)
	waitQueued("push", waiter)
	require.NoError(t, m1.Unlock(h1), "Unlock that hands over")
	r := awaitResult(t, waiter)
	require.NoError(t, r.err, "the waiter is granted by push")
	tok2, err := m2.Token(r.ctx)
	require.NoError(t, err)
	require.Greater(t, tok2, tok1)
	h2, err := m2.Lock(r.ctx)
	require.NoError(t, err, "re-entry with Lock")
	h3, err := m2.TryLock(h2)
	require.NoError(t, err, "re-entry with TryLock")
	for _, hold := range []context.Context{h3, h2, r.ctx} {
		n, err := m2.HoldCount(hold)
		require.NoError(t, err)
		require.Equal(t, 3, n, "every context of the hold counts all its levels")
	}
	tok3, err := m2.Token(h3)
	require.NoError(t, err)
	require.Equal(t, tok2, tok3, "re-entry keeps the token")
	require.NoError(t, m2.Unlock(h3))
	require.NoError(t, m2.Unlock(h2))
	n, err = m2.HoldCount(r.ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.NoError(t, m2.Unlock(r.ctx))
	locked, err = m1.IsLocked(ctx)
	require.NoError(t, err)
	require.False(t, locked)
	requireClean("push")

	// The watchdog renews a hold: its remaining lease rises again.
	force := c3.Mutex("force")
	fctx, err := force.Lock(ctx)
	require.NoError(t, err)
	last := 600 * time.Millisecond
	require.Eventually(t, func() bool {
		d, err := force.TTL(ctx)
		rose := err == nil && d > last
		last = d
		return rose
	}, aclLockWithin, 10*time.Millisecond, "the lease is renewed")
	require.NoError(t, fctx.Err())

	// ForceUnlock with a waiter in line: the waiter is granted, the holder
	// learns it lost the lock.
	waiter = lockAsync(ctx, c2.Mutex("force"))
	waitQueued("force", waiter)
	removed, err := c2.Mutex("force").ForceUnlock(ctx)
	require.NoError(t, err)
	require.True(t, removed)
	r = awaitResult(t, waiter)
	require.NoError(t, r.err, "the waiter is granted after ForceUnlock")
	awaitDone(t, fctx)
	require.ErrorIs(t, context.Cause(fctx), fairlock.ErrLeaseLost)
	require.NoError(t, c2.Mutex("force").Unlock(r.ctx))
	removed, err = c2.Mutex("force").ForceUnlock(ctx)
	require.NoError(t, err)
	require.False(t, removed, "ForceUnlock of a free lock")

	// A waiter whose context ends leaves nothing behind.
	blocker, err := c1.Mutex("cancel").Lock(ctx)
	require.NoError(t, err)
	wctx, cancel := context.WithCancel(ctx)
	waiter = lockAsync(wctx, c2.Mutex("cancel"))
	waitQueued("cancel", waiter)
	cancel()
	r = awaitResult(t, waiter)
	require.ErrorIs(t, r.err, context.Canceled)
	require.Nil(t, r.ctx)
	requireClean("cancel")
	require.NoError(t, c1.Mutex("cancel").Unlock(blocker))

	// A level handed to a waiter that gives up before it hears of it is
	// given back, and a level its owner holds from elsewhere stays. The
	// state a hand-over followed by that owner's re-entry leaves is
	// written directly, so the waiter has not been told.
	k := keys("race")
	blocker, err = c3.Mutex("race").Lock(ctx)
	require.NoError(t, err)
	wctx, cancel = context.WithCancel(fairlock.ContextWithOwner(ctx, "job-1"))
	defer cancel()
	waiter = lockAsync(wctx, c2.Mutex("race"))
	waitQueued("race", waiter)
	entry, err := admin.LIndex(ctx, k.Queue, 0).Result()
	require.NoError(t, err)
	require.NoError(t, admin.HSet(ctx, k.Lock, "owner", "job-1", "count", 2, "entry", entry).Err())
	cancel()
	r = awaitResult(t, waiter)
	require.ErrorIs(t, r.err, context.Canceled)
	require.Eventually(t, func() bool {
		return admin.HGet(ctx, k.Lock, "count").Val() == "1" && !admin.HExists(ctx, k.Lock, "entry").Val()
	}, aclLockWithin, 2*time.Millisecond, "one level given back, the other kept")
	requireClean("race")
	removed, err = c1.Mutex("race").ForceUnlock(ctx)
	require.NoError(t, err)
	require.True(t, removed)
	awaitDone(t, blocker)
	require.ErrorIs(t, context.Cause(blocker), fairlock.ErrLeaseLost)

	// A fixed lease ends on its own, with ErrLeaseLost.
	fixed := c1.Mutex("fixed", fairlock.WithFixedLease(500*time.Millisecond))
	xctx, err := fixed.Lock(ctx)
	require.NoError(t, err)
	ttl, err = fixed.TTL(ctx)
	require.NoError(t, err)
	require.Positive(t, ttl)
	require.LessOrEqual(t, ttl, 500*time.Millisecond)
	awaitDone(t, xctx)
	require.ErrorIs(t, context.Cause(xctx), fairlock.ErrLeaseLost)
	require.Eventually(t, func() bool {
		locked, err := fixed.IsLocked(ctx)
		return err == nil && !locked
	}, aclLockWithin, 10*time.Millisecond, "the fixed lease expires")
	require.ErrorIs(t, fixed.Unlock(xctx), fairlock.ErrNotHeld)

	// ContextWithOwner shares one hold between two Clients.
	a, b := c1.Mutex("owner"), c2.Mutex("owner")
	actx, err := a.Lock(fairlock.ContextWithOwner(ctx, "job-2"))
	require.NoError(t, err)
	bctx, err := b.TryLock(fairlock.ContextWithOwner(ctx, "job-2"))
	require.NoError(t, err, "the same owner re-enters from another Client")
	n, err = b.HoldCount(bctx)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	_, err = b.TryLock(ctx)
	require.ErrorIs(t, err, fairlock.ErrLocked)
	require.NoError(t, a.Unlock(actx))
	require.NoError(t, b.Unlock(bctx))
	locked, err = a.IsLocked(ctx)
	require.NoError(t, err)
	require.False(t, locked)

	// A MultiLock waits with one ticket behind a holder of one of its
	// names, and the release that frees it grants it both, by push.
	holder := c1.Mutex("multi-b")
	mbctx, err := holder.Lock(ctx)
	require.NoError(t, err)
	both := c2.MultiLock([]string{"multi-a", "multi-b"})
	waiter = lockAsync(ctx, both)
	waitQueued("multi-b", waiter)
	require.NoError(t, holder.Unlock(mbctx), "Unlock that grants a ticket")
	r = awaitResult(t, waiter)
	require.NoError(t, r.err, "the MultiLock is granted by push")
	for _, name := range []string{"multi-a", "multi-b"} {
		tok, err := both.Token(r.ctx, name)
		require.NoError(t, err)
		require.Positive(t, tok)
	}
	require.NoError(t, both.Unlock(r.ctx))
	requireClean("multi-a")
	requireClean("multi-b")

	// An Election: an observer in another Client sees each leadership and
	// a proclaimed value, and a candidate in line is handed the
	// leadership by push at the leader's Resign.
	ek, err := queue.Election(prefix, "leader")
	require.NoError(t, err)
	octx, stopObserving := context.WithCancel(ctx)
	defer stopObserving()
	views, err := c3.Election("leader").Observe(octx)
	require.NoError(t, err)
	seen := func(what string, ok func(fairlock.Leadership) bool) {
		deadline := time.After(aclLockWithin)
		for {
			select {
			case l := <-views:
				if ok(l) {
					return
				}
			case <-deadline:
				require.FailNow(t, "the observer saw no "+what)
			}
		}
	}
	lead, err := c1.Election("leader").Campaign(ctx, "one")
	require.NoError(t, err)
	seen("first leader", func(l fairlock.Leadership) bool { return l.Value == "one" })
	require.NoError(t, c1.Election("leader").Proclaim(lead, "two"))
	seen("proclaimed value", func(l fairlock.Leadership) bool { return l.Value == "two" })
	candidate := make(chan result, 1)
	go func() {
		lctx, err := c2.Election("leader").Campaign(ctx, "three")
		candidate <- result{lctx, err}
	}()
	deadline := time.Now().Add(aclLockWithin)
	for admin.LLen(ctx, ek.Queue).Val() != 1 {
		require.True(t, time.Now().Before(deadline), "the candidate is not in line within %v", aclLockWithin)
		time.Sleep(2 * time.Millisecond)
	}
	require.NoError(t, c1.Election("leader").Resign(lead), "Resign that hands the leadership over")
	r = awaitResult(t, candidate)
	require.NoError(t, r.err, "the candidate is elected by push")
	l, err := c1.Election("leader").Leader(ctx)
	require.NoError(t, err)
	require.Equal(t, "three", l.Value)
	seen("second leader", func(l fairlock.Leadership) bool { return l.Value == "three" })
	require.NoError(t, c2.Election("leader").Resign(r.ctx))
	seen("end of leadership", func(l fairlock.Leadership) bool { return !l.HasLeader() })
	stopObserving()

	// Close: a waiting Lock returns ErrClosed and leaves the line, a live
	// hold is released.
	held, err := c2.Mutex("close-held").Lock(ctx)
	require.NoError(t, err)
	blocker, err = c1.Mutex("close").Lock(ctx)
	require.NoError(t, err)
	waiter = lockAsync(ctx, c2.Mutex("close"))
	waitQueued("close", waiter)
	require.NoError(t, c2.Close())
	r = awaitResult(t, waiter)
	require.ErrorIs(t, r.err, fairlock.ErrClosed)
	requireClean("close")
	awaitDone(t, held)
	require.ErrorIs(t, context.Cause(held), fairlock.ErrClosed)
	locked, err = c1.Mutex("close-held").IsLocked(ctx)
	require.NoError(t, err)
	require.False(t, locked, "Close released the hold")
	require.NoError(t, c2.Close(), "Close twice")
	require.NoError(t, c1.Mutex("close").Unlock(blocker))
	require.NoError(t, c1.Close())
	require.NoError(t, c3.Close())
	require.Empty(t, logs.refusals("'info'"), "commands refused to the user")
}

// newACLUser runs an ACL SETUSER line through admin and returns a client
// that logs in as its user, with the line's password, and the options
// tweak sets.
func newACLUser(t require.TestingT, addr string, admin *redis.Client, line string, tweak ...func(*redis.Options)) *redis.Client {
	fields := strings.Fields(line)
	require.GreaterOrEqual(t, len(fields), 3)
	require.Equal(t, "ACL SETUSER", strings.ToUpper(fields[0]+" "+fields[1]))
	args := make([]any, len(fields))
	password := ""
	for i, f := range fields {
		args[i] = f
		if p, ok := strings.CutPrefix(f, ">"); ok {
			password = p
		}
	}
	require.NotEmpty(t, password, "the line sets a password")
	require.NoError(t, admin.Do(context.Background(), args...).Err())
	o := &redis.Options{Addr: addr, Username: fields[2], Password: password}
	for _, f := range tweak {
		f(o)
	}
	return redis.NewClient(o)
}

func awaitResult(t require.TestingT, ch <-chan result) result {
	select {
	case r := <-ch:
		return r
	case <-time.After(aclLockWithin):
		require.FailNow(t, fmt.Sprintf("no result of Lock within %v", aclLockWithin))
		return result{}
	}
}

func awaitDone(t require.TestingT, ctx context.Context) {
	select {
	case <-ctx.Done():
	case <-time.After(aclLockWithin):
		require.FailNow(t, fmt.Sprintf("the hold's context is not done within %v", aclLockWithin))
	}
}

// expectFailure runs f in a goroutine of its own with a TestingT that
// records failures, and returns them ("" when f did not fail).
func expectFailure(f func(t require.TestingT)) string {
	rec := &failureRecorder{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(rec)
	}()
	<-done
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return strings.Join(rec.msgs, "\n")
}

// failureRecorder is a require.TestingT whose FailNow ends the goroutine
// that calls it, as testing.T's does, without failing the test.
type failureRecorder struct {
	mu   sync.Mutex
	msgs []string // guarded by mu
}

func (r *failureRecorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, fmt.Sprintf(format, args...))
}

func (r *failureRecorder) FailNow() { runtime.Goexit() }

// firstLine returns the first failure of a testify report on one line,
// without its trace.
func firstLine(failure string) string {
	if _, rest, ok := strings.Cut(failure, "Error:"); ok {
		failure = rest
	}
	failure, _, _ = strings.Cut(failure, "Error Trace:") // where a second failure starts
	return strings.Join(strings.Fields(failure), " ")
}

// warned reports whether a record mentions the refusal of command (as
// Redis quotes it in a NOPERM error).
func (h *logRecorder) warned(command string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, l := range h.lines {
		if strings.Contains(l, "NOPERM") && strings.Contains(l, command) {
			return true
		}
	}
	return false
}

// refusals returns the records that report a refused command (a NOPERM
// error) other than the one named.
func (h *logRecorder) refusals(except string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, l := range h.lines {
		if strings.Contains(l, "NOPERM") && !strings.Contains(l, except) {
			out = append(out, l)
		}
	}
	return out
}
