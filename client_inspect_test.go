package fairlock_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/internal/redistest"
)

func TestInspectOfAFreeLockIsNotHeldWithNoWaiters(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := e.client()
	ctx := context.Background()
	m := c.Mutex("was-held")
	hctx, err := m.Lock(ctx)
	require.NoError(t, err)
	require.NoError(t, m.Unlock(hctx))

	for _, name := range []string{"never-used", "was-held"} {
		s, err := c.Inspect(ctx, name)
		require.NoError(t, err, name)
		assert.Equal(t, name, s.Name)
		assert.False(t, s.Held, name)
		assert.Empty(t, s.Owner, name)
		assert.Empty(t, s.Waiters, name)
		assert.WithinDuration(t, time.Now(), s.At, 5*time.Second, "the server's clock")
	}
}

func TestInspectShowsTheHoldWithItsReentries(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := e.client(fairlock.WithLease(20 * time.Second))
	ctx := context.Background()
	m := c.Mutex("held")
	hctx, err := m.Lock(fairlock.ContextWithOwner(ctx, "worker-7"))
	require.NoError(t, err)
	_, err = m.Lock(hctx)
	require.NoError(t, err)
	token, err := m.Token(hctx)
	require.NoError(t, err)

	s, err := e.client().Inspect(ctx, "held") // any Client of the deployment
	require.NoError(t, err)
	require.True(t, s.Held)
	require.Equal(t, "worker-7", s.Owner)
	require.Equal(t, 2, s.Count)
	require.Equal(t, token, s.Token)
	require.Equal(t, c.ID(), s.Client, "the Client the hold was granted to")
	require.Positive(t, s.LeaseLeft)
	require.LessOrEqual(t, s.LeaseLeft, 20*time.Second)
	require.Empty(t, s.Waiters)
	require.NoError(t, m.Unlock(hctx))
	require.NoError(t, m.Unlock(hctx))
}

func TestInspectShowsWaitersInJoinOrderWithTheirClients(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	const name = "line"
	holder := e.client()
	hctx, err := holder.Mutex(name).Lock(fairlock.ContextWithOwner(ctx, "holder"))
	require.NoError(t, err)
	waiterTTL := 30 * time.Second
	c1, c2 := e.client(fairlock.WithWaiterTTL(waiterTTL)), e.client(fairlock.WithWaiterTTL(waiterTTL))
	require.Len(t, c1.ID(), 8)
	require.NotEqual(t, c1.ID(), c2.ID())
	joins := []struct {
		owner string
		c     *fairlock.Client
	}{{"first", c1}, {"second", c2}, {"third", c1}}
	waits := make([]<-chan result, len(joins))
	for i, j := range joins {
		waits[i] = lockAsync(fairlock.ContextWithOwner(ctx, j.owner), j.c.Mutex(name))
		e.waitQueued(name, i+1)
	}

	s, err := holder.Inspect(ctx, name)
	require.NoError(t, err)
	require.True(t, s.Held)
	require.Equal(t, "holder", s.Owner)
	require.Equal(t, holder.ID(), s.Client)
	require.Len(t, s.Waiters, 3)
	for i, j := range joins {
		w := s.Waiters[i]
		assert.Equal(t, j.owner, w.Owner, "waiter %d", i)
		assert.Equal(t, j.c.ID(), w.Client, "waiter %d", i)
		assert.Positive(t, w.TimeLeft, "waiter %d", i)
		assert.LessOrEqual(t, w.TimeLeft, waiterTTL, "waiter %d", i)
	}

	// The hand-over: the hold is the first waiter's, granted to its Client.
	require.NoError(t, holder.Mutex(name).Unlock(hctx))
	first := await(t, waits[0], 5*time.Second)
	require.NoError(t, first.err)
	s, err = holder.Inspect(ctx, name)
	require.NoError(t, err)
	require.True(t, s.Held)
	require.Equal(t, "first", s.Owner)
	require.Equal(t, c1.ID(), s.Client)
	require.Equal(t, 1, s.Count)
	token, err := c1.Mutex(name).Token(first.ctx)
	require.NoError(t, err)
	require.Equal(t, token, s.Token)
	require.Len(t, s.Waiters, 2)
	require.Equal(t, []string{"second", "third"}, []string{s.Waiters[0].Owner, s.Waiters[1].Owner})
	require.Equal(t, []string{c2.ID(), c1.ID()}, []string{s.Waiters[0].Client, s.Waiters[1].Client})

	require.NoError(t, c1.Mutex(name).Unlock(first.ctx))
	r := await(t, waits[1], 5*time.Second)
	require.NoError(t, r.err)
	require.NoError(t, c2.Mutex(name).Unlock(r.ctx))
	r = await(t, waits[2], 5*time.Second)
	require.NoError(t, r.err)
	require.NoError(t, c1.Mutex(name).Unlock(r.ctx))
}

func TestInspectAndListRefuseBadNames(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := e.client()
	ctx := context.Background()
	for _, name := range []string{"", "a}b", string([]byte{0xff}), string(make([]byte, 1025))} {
		_, err := c.Inspect(ctx, name)
		assert.ErrorIs(t, err, fairlock.ErrInvalidName, "Inspect(%q)", name)
	}
	for _, pattern := range []string{"a}*", `a\`, `a\\\`, string([]byte{0xff})} {
		_, err := c.List(ctx, pattern)
		assert.ErrorIs(t, err, fairlock.ErrInvalidName, "List(%q)", pattern)
	}
	names, err := c.List(ctx, `a\\`) // an escaped backslash is a pattern
	require.NoError(t, err)
	require.Empty(t, names)
	//lint:ignore SA1012 a nil context is bad input this test feeds on purpose: refused, not a panic
	_, err = c.Inspect(nil, "x")
	require.Error(t, err)
	var nilClient *fairlock.Client
	_, err = nilClient.Inspect(ctx, "x")
	require.Error(t, err)
	require.NoError(t, c.Close())
	_, err = c.Inspect(ctx, "x")
	require.ErrorIs(t, err, fairlock.ErrClosed)
	_, err = c.List(ctx, "")
	require.ErrorIs(t, err, fairlock.ErrClosed)
}

// Inspect and List end at the caller's deadline while the server is
// stopped, and answer once it runs again.
func TestInspectAndListHonourTheirDeadlineWhileRedisIsStopped(t *testing.T) {
	t.Parallel()
	e := newPrivateEnv(t)
	c := e.client()
	ctx := context.Background()
	hctx, err := c.Mutex("stopped").Lock(ctx)
	require.NoError(t, err)

	resume := redistest.Pause(t, e.rdb.(*redis.Client))
	calls := map[string]func(ctx context.Context) error{
		"Inspect": func(ctx context.Context) error { _, err := c.Inspect(ctx, "stopped"); return err },
		"List":    func(ctx context.Context) error { _, err := c.List(ctx, ""); return err },
	}
	for name, call := range calls {
		dctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		start := time.Now()
		err := call(dctx)
		took := time.Since(start)
		cancel()
		assert.ErrorIs(t, err, context.DeadlineExceeded, name)
		assert.Less(t, took, time.Second, "%s returned %v after it was called", name, took)
	}
	resume()

	s, err := c.Inspect(ctx, "stopped")
	require.NoError(t, err)
	require.True(t, s.Held)
	names, err := c.List(ctx, "")
	require.NoError(t, err)
	require.Equal(t, []string{"stopped"}, names)
	require.NoError(t, c.Mutex("stopped").Unlock(hctx))
}

// waitedOnly leaves the lock name with waiters but no hold: it deletes the
// hold key under a waiter that polls only every 20 s, as a lost key
// would. It returns the waiter's outcome.
func waitedOnly(t *testing.T, e *env, c, waiter *fairlock.Client, name string) <-chan result {
	t.Helper()
	ctx := context.Background()
	hctx, err := c.Mutex(name).Lock(ctx)
	require.NoError(t, err)
	w := lockAsync(ctx, waiter.Mutex(name))
	e.waitQueued(name, 1)
	require.NoError(t, e.rdb.Del(ctx, e.keys(name).Lock).Err())
	t.Cleanup(func() { _ = c.Mutex(name).Unlock(hctx) })
	return w
}

func TestListFindsEveryHeldAndWaitedLockMatchingAPattern(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	c := e.client()
	waiter := e.client(fairlock.WithWaiterTTL(time.Minute))
	var held []string
	for i := range 150 {
		name := fmt.Sprintf("orders:%03d", i)
		if i%10 == 0 {
			name = fmt.Sprintf("orders:*[%d]?", i) // glob characters in a name
		}
		_, err := c.Mutex(name).Lock(ctx)
		require.NoError(t, err)
		held = append(held, name)
	}
	for _, name := range []string{"users:1", "users:2"} {
		_, err := c.Mutex(name).Lock(ctx)
		require.NoError(t, err)
	}
	for i := range 20 { // free locks: held once, then released
		m := c.Mutex(fmt.Sprintf("orders:free-%d", i))
		hctx, err := m.Lock(ctx)
		require.NoError(t, err)
		require.NoError(t, m.Unlock(hctx))
	}
	waitedOnly(t, e, c, waiter, "orders:waited")
	s, err := c.Inspect(ctx, "orders:waited")
	require.NoError(t, err)
	require.False(t, s.Held)
	require.Len(t, s.Waiters, 1)
	// Another prefix that starts like this one, and glob characters in a
	// prefix.
	other := e.client(fairlock.WithPrefix(e.prefix + "x"))
	_, err = other.Mutex("orders:999").Lock(ctx)
	require.NoError(t, err)
	globbed := e.client(fairlock.WithPrefix(e.prefix + "[q]*"))
	_, err = globbed.Mutex("orders:1").Lock(ctx)
	require.NoError(t, err)

	want := append(slices.Clone(held), "orders:waited")
	slices.Sort(want)
	got, err := c.List(ctx, "orders:*")
	require.NoError(t, err)
	require.Equal(t, want, got)

	all, err := c.List(ctx, "")
	require.NoError(t, err)
	want = append(want, "users:1", "users:2")
	slices.Sort(want)
	require.Equal(t, want, all)
	star, err := c.List(ctx, "*")
	require.NoError(t, err)
	require.Equal(t, all, star)

	got, err = c.List(ctx, `orders:\*\[*`) // glob characters escaped in the pattern
	require.NoError(t, err)
	require.Len(t, got, 15)
	got, err = c.List(ctx, "users:?")
	require.NoError(t, err)
	require.Equal(t, []string{"users:1", "users:2"}, got)

	got, err = globbed.List(ctx, "")
	require.NoError(t, err)
	require.Equal(t, []string{"orders:1"}, got)
	got, err = other.List(ctx, "")
	require.NoError(t, err)
	require.Equal(t, []string{"orders:999"}, got)
}

func TestListOnAClusterScansEveryMaster(t *testing.T) {
	redistest.Slow(t)
	t.Parallel()
	cluster := redistest.ClusterFor(t, 3, 0)
	ctx := context.Background()
	masters, err := cluster.Masters(ctx)
	require.NoError(t, err)
	require.Len(t, masters, 3)
	e := &env{t: t, rdb: cluster.Client(t), prefix: redistest.Prefix(t),
		dial: func(t testing.TB) redis.UniversalClient { return cluster.Client(t) }}
	c := e.client()
	waiter := e.client(fairlock.WithWaiterTTL(time.Minute))

	var want []string
	heldOn := map[string]int{}
	waitedOn := map[string]int{}
	for i := range 30 {
		name := fmt.Sprintf("job:%02d", i)
		master, err := cluster.MasterOf(ctx, e.keys(name).Lock)
		require.NoError(t, err)
		switch i % 3 {
		case 0: // held
			_, err := c.Mutex(name).Lock(ctx)
			require.NoError(t, err)
			heldOn[master]++
			want = append(want, name)
		case 1: // waited on, not held
			if waitedOn[master] > 0 {
				continue
			}
			waitedOnly(t, e, c, waiter, name)
			waitedOn[master]++
			want = append(want, name)
		case 2: // free
			hctx, err := c.Mutex(name).Lock(ctx)
			require.NoError(t, err)
			require.NoError(t, c.Mutex(name).Unlock(hctx))
		}
	}
	require.Len(t, heldOn, 3, "held locks on every master")
	require.GreaterOrEqual(t, len(waitedOn), 2, "waited-on locks on several masters")

	got, err := c.List(ctx, "job:*")
	require.NoError(t, err)
	require.Equal(t, want, got)
}

// aclInspect are the rules Inspect and List need on top of aclRules.
// docs/operations.md shows them.
const aclInspect = "+multi +exec +hgetall +zrange +scan"

// A user with the rules of the line and aclInspect may Inspect and List;
// without any one of aclInspect, Inspect or List fails with
// ErrNoPermission.
func TestInspectAndListNeedTheirACLRules(t *testing.T) {
	t.Parallel()
	srv, err := redistest.Start()
	require.NoError(t, err)
	t.Cleanup(srv.Stop)
	admin := srv.Client(t)
	ctx := context.Background()
	holder, err := fairlock.New(admin)
	require.NoError(t, err)
	t.Cleanup(func() { _ = holder.Close() })
	hctx, err := holder.Mutex("acl").Lock(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = holder.Mutex("acl").Unlock(hctx) })

	inspectAndList := func(line string) (inspectErr, listErr error) {
		rdb := newACLUser(t, srv.Addr, admin, line)
		t.Cleanup(func() { _ = rdb.Close() })
		c, err := fairlock.New(rdb)
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		s, inspectErr := c.Inspect(ctx, "acl")
		if inspectErr == nil {
			assert.True(t, s.Held)
			assert.Equal(t, holder.ID(), s.Client)
		}
		names, listErr := c.List(ctx, "")
		if listErr == nil {
			assert.Equal(t, []string{"acl"}, names)
		}
		return inspectErr, listErr
	}
	ierr, lerr := inspectAndList(aclRules + " " + aclInspect)
	require.NoError(t, ierr)
	require.NoError(t, lerr)
	for _, rule := range strings.Fields(aclInspect) {
		line := aclRules + " " + strings.Join(slices.DeleteFunc(strings.Fields(aclInspect), func(r string) bool { return r == rule }), " ")
		ierr, lerr := inspectAndList(line)
		if rule == "+scan" {
			require.NoError(t, ierr, "without %s", rule)
			require.ErrorIs(t, lerr, fairlock.ErrNoPermission, "without %s", rule)
		} else {
			require.ErrorIs(t, ierr, fairlock.ErrNoPermission, "without %s", rule)
			require.NoError(t, lerr, "without %s", rule)
		}
		t.Logf("without %s: %v %v", rule, ierr, lerr)
	}
}

func TestListOnARingScansEveryShard(t *testing.T) {
	redistest.Slow(t)
	t.Parallel()
	ring := newRing(t)
	ctx := context.Background()
	e := &env{t: t, rdb: ring, prefix: redistest.Prefix(t),
		dial: func(testing.TB) redis.UniversalClient { return ring }}
	c := e.client()
	var want []string
	shards := map[string]bool{}
	for i := range 20 {
		name := fmt.Sprintf("job:%02d", i)
		_, err := c.Mutex(name).Lock(ctx)
		require.NoError(t, err)
		shard, err := ring.GetShardClientForKey(e.keys(name).Lock)
		require.NoError(t, err)
		shards[shard.Options().Addr] = true
		want = append(want, name)
	}
	require.Len(t, shards, 2, "held locks on both shards")
	got, err := c.List(ctx, "job:*")
	require.NoError(t, err)
	require.Equal(t, want, got)
	s, err := c.Inspect(ctx, "job:07")
	require.NoError(t, err)
	require.True(t, s.Held)
	require.Equal(t, c.ID(), s.Client)
}

// TestInspectShowsTheNamesOfTheClients names two of three Clients: Inspect
// shows each name beside its Client's ID, for the holder and the waiters.
// A named Client keeps its name in one key while it is open, and Close
// deletes it.
func TestInspectShowsTheNamesOfTheClients(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	billing := e.client(fairlock.WithName("billing-worker-3"))
	reports := e.client(fairlock.WithName("reports / nightly"))
	plain := e.client()

	hctx, err := billing.Mutex("named").Lock(ctx)
	require.NoError(t, err)
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	w1 := lockAsync(wctx, reports.Mutex("named"))
	e.waitQueued("named", 1)
	w2 := lockAsync(wctx, plain.Mutex("named"))
	e.waitQueued("named", 2)

	st, err := plain.Inspect(ctx, "named")
	require.NoError(t, err)
	require.Equal(t, billing.ID(), st.Client)
	require.Equal(t, "billing-worker-3", st.ClientName)
	require.Len(t, st.Waiters, 2)
	require.Equal(t, reports.ID(), st.Waiters[0].Client)
	require.Equal(t, "reports / nightly", st.Waiters[0].ClientName)
	require.Equal(t, plain.ID(), st.Waiters[1].Client)
	require.Empty(t, st.Waiters[1].ClientName, "a Client without a name")

	key := e.prefix + ":client:" + billing.ID()
	ttl, err := e.rdb.PTTL(ctx, key).Result()
	require.NoError(t, err)
	require.Positive(t, ttl, "the name expires unless renewed")
	require.LessOrEqual(t, ttl, time.Minute)
	names, err := e.rdb.Keys(ctx, e.prefix+":client:*").Result()
	require.NoError(t, err)
	require.Len(t, names, 2, "one key per named Client that has locked")

	stop()
	require.ErrorIs(t, await(t, w1, 5*time.Second).err, context.Canceled)
	require.ErrorIs(t, await(t, w2, 5*time.Second).err, context.Canceled)
	require.NoError(t, billing.Mutex("named").Unlock(hctx))
	require.NoError(t, billing.Close())
	require.Zero(t, e.rdb.Exists(ctx, key).Val(), "Close deletes the name")

	for _, bad := range []string{"", strings.Repeat("x", 129), "tab\there", "\xff"} {
		_, err := fairlock.New(e.rdb, fairlock.WithName(bad))
		require.ErrorIs(t, err, fairlock.ErrInvalidOption, "%q", bad)
	}
}

// A Client that only reads (Inspect, IsLocked) follows a Cluster failover
// as one that takes locks does: a read that finds the master dead asks
// for a fresh map of the cluster, so reads reach the new master within
// seconds, not when go-redis reloads its map by itself (about a minute).
func TestReadsThroughAClusterFollowAFailover(t *testing.T) {
	redistest.Slow(t)
	t.Parallel()
	cluster := redistest.ClusterFor(t, 3, 1)
	e := clusterEnv(t, cluster)
	ctx := context.Background()
	const name = "read-only"
	holder := e.client(fairlock.WithLease(time.Minute)).Mutex(name)
	hctx, err := holder.Lock(ctx)
	require.NoError(t, err)
	reader := e.client()
	st, err := reader.Inspect(ctx, name)
	require.NoError(t, err)
	require.True(t, st.Held)
	key := e.keys(name).Lock
	master, err := cluster.MasterOf(ctx, key)
	require.NoError(t, err)
	replicated(t, cluster.Node(master).Client(t))

	require.NoError(t, cluster.Kill(master))
	_, err = cluster.WaitFailover(key, master, 30*time.Second)
	require.NoError(t, err)
	switched := time.Now()
	require.Eventually(t, func() bool {
		st, err := reader.Inspect(ctx, name)
		return err == nil && st.Held
	}, 20*time.Second, 50*time.Millisecond, "Inspect of the new master")
	t.Logf("Inspect read the new master %v after the switch", time.Since(switched))
	locked, err := reader.Mutex(name).IsLocked(ctx)
	require.NoError(t, err)
	require.True(t, locked)
	// The holder's Client has sent nothing since the failover: its release
	// may find the old master, and is then sent again until the new one
	// answers.
	if err := holder.Unlock(hctx); err != nil {
		t.Logf("unlock after the failover: %v", err)
	}
}
