//go:build unix

package fairlock_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/internal/faultproxy"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/fairlock/fairlock/queue"
)

// WithReplicas: every grant, re-entry and release counts only once the
// replicas acknowledged it. Checked on a primary with one replica under a
// sentinel, reading the replica directly, with the replica stopped
// (SIGSTOP) to see what a missing acknowledgement does; and on a cluster,
// on every master.

func TestWithReplicasRejectsInvalidValues(t *testing.T) {
	plain := func(o *redis.Options) redis.UniversalClient {
		o.Addr = "127.0.0.1:1" // New opens no connection
		rdb := redis.NewClient(o)
		t.Cleanup(func() { _ = rdb.Close() })
		return rdb
	}
	type wrapped struct{ *redis.Client }
	cases := []struct {
		name  string
		rdb   redis.UniversalClient
		opts  []fairlock.Option
		valid bool
	}{
		{"no replica", plain(&redis.Options{}), []fairlock.Option{fairlock.WithReplicas(0, time.Second)}, false},
		{"negative replicas", plain(&redis.Options{}), []fairlock.Option{fairlock.WithReplicas(-1, time.Second)}, false},
		{"no timeout", plain(&redis.Options{}), []fairlock.Option{fairlock.WithReplicas(1, 0)}, false},
		{"timeout below MinDuration", plain(&redis.Options{}), []fairlock.Option{fairlock.WithReplicas(1, time.Millisecond)}, false},
		{"MinDuration", plain(&redis.Options{}), []fairlock.Option{fairlock.WithReplicas(1, fairlock.MinDuration)}, true},
		{"half the default ReadTimeout", plain(&redis.Options{}), []fairlock.Option{fairlock.WithReplicas(2, 2500*time.Millisecond)}, true},
		{"over half the default ReadTimeout", plain(&redis.Options{}), []fairlock.Option{fairlock.WithReplicas(1, 3*time.Second)}, false},
		{"over half a short ReadTimeout", plain(&redis.Options{ReadTimeout: time.Second}), []fairlock.Option{fairlock.WithReplicas(1, 600*time.Millisecond)}, false},
		{"no ReadTimeout", plain(&redis.Options{ReadTimeout: -1}), []fairlock.Option{fairlock.WithReplicas(1, 3*time.Second)}, true},
		{"over a third of the waiter TTL", plain(&redis.Options{}),
			[]fairlock.Option{fairlock.WithReplicas(1, 500*time.Millisecond), fairlock.WithWaiterTTL(time.Second)}, false},
		{"over a third of the lease, set after it", plain(&redis.Options{}),
			[]fairlock.Option{fairlock.WithReplicas(1, 500*time.Millisecond), fairlock.WithLease(time.Second)}, false},
		{"a client of unknown kind", wrapped{plain(&redis.Options{}).(*redis.Client)}, []fairlock.Option{fairlock.WithReplicas(1, time.Second)}, false},
		{"the same client without the option", wrapped{plain(&redis.Options{}).(*redis.Client)}, nil, true},
		{"a cluster client", redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}}),
			[]fairlock.Option{fairlock.WithReplicas(1, time.Second)}, true},
		{"a ring", redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}}),
			[]fairlock.Option{fairlock.WithReplicas(1, time.Second)}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Cleanup(func() { _ = c.rdb.Close() })
			lc, err := fairlock.New(c.rdb, c.opts...)
			if c.valid {
				require.NoError(t, err)
				require.NoError(t, lc.Close())
				return
			}
			require.ErrorIs(t, err, fairlock.ErrInvalidOption)
			require.Nil(t, lc)
		})
	}
}

// replicaSet is a primary with one replica under a sentinel, and plain
// clients of each to read them directly.
type replicaSet struct {
	set              *redistest.SentinelSet
	primary, replica *redis.Client
	replicaAddr      string
}

func startReplicaSet(t *testing.T) *replicaSet {
	t.Helper()
	set := redistest.SentinelFor(t, 1, 1)
	addrs := set.Addrs() // the primary first, then the replica
	require.Len(t, addrs, 2)
	rs := &replicaSet{set: set, replicaAddr: addrs[1]}
	rs.primary = redis.NewClient(&redis.Options{Addr: addrs[0]})
	rs.replica = redis.NewClient(&redis.Options{Addr: addrs[1]})
	t.Cleanup(func() {
		_ = rs.primary.Close()
		_ = rs.replica.Close()
	})
	return rs
}

// client returns a fairlock Client over a failover client of its own, as a
// separate process would have.
func (rs *replicaSet) client(t *testing.T, prefix string, opts ...fairlock.Option) *fairlock.Client {
	t.Helper()
	c, err := fairlock.New(rs.set.Client(t), append([]fairlock.Option{fairlock.WithPrefix(prefix)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// holdOn returns the token and count of the hold a server has of a lock,
// or zeros when it has none.
func holdOn(t *testing.T, rdb *redis.Client, k queue.Keys) (token int64, count int) {
	t.Helper()
	v, err := rdb.HMGet(context.Background(), k.Lock, "token", "count").Result()
	require.NoError(t, err)
	if v[0] == nil {
		return 0, 0
	}
	token, err = strconv.ParseInt(v[0].(string), 10, 64)
	require.NoError(t, err)
	count, err = strconv.Atoi(v[1].(string))
	require.NoError(t, err)
	return token, count
}

// requireOnReplica asserts that the replica has the hold of hctx with
// count levels, as soon as the call that made it returned.
func (rs *replicaSet) requireOnReplica(t *testing.T, m *fairlock.Mutex, hctx context.Context, k queue.Keys, count int) {
	t.Helper()
	want, err := m.Token(hctx)
	require.NoError(t, err)
	token, n := holdOn(t, rs.replica, k)
	require.Equal(t, want, token, "the replica has the hold's token")
	require.Equal(t, count, n, "the replica has the hold's count")
}

// nothingLeft reports what the primary keeps of a lock (a hold, waiters),
// empty when nothing.
func nothingLeft(rdb *redis.Client, k queue.Keys) string {
	ctx := context.Background()
	n, err := rdb.Exists(ctx, k.Lock, k.Queue, k.Deadline).Result()
	switch {
	case err != nil:
		return err.Error()
	case n > 0:
		return fmt.Sprintf("%d of the hold, queue and deadline keys exist", n)
	}
	return ""
}

func TestReplicatedGrantsOnSentinel(t *testing.T) {
	redistest.Slow(t)
	t.Parallel()
	rs := startReplicaSet(t)
	bg := context.Background()

	// The subtests run one after another: some stop the replica.
	t.Run("GrantsReEntriesAndReleasesReachTheReplica", func(t *testing.T) {
		prefix, k := freshLock(t)
		m := rs.client(t, prefix, fairlock.WithReplicas(1, time.Second)).Mutex("lock")

		hctx, err := m.Lock(bg)
		require.NoError(t, err)
		rs.requireOnReplica(t, m, hctx, k, 1)
		rctx, err := m.Lock(hctx)
		require.NoError(t, err)
		rs.requireOnReplica(t, m, hctx, k, 2)
		require.NoError(t, m.Unlock(rctx))
		rs.requireOnReplica(t, m, hctx, k, 1)

		// A hand-over: the waiter's grant counts once the replica has it.
		w := rs.client(t, prefix, fairlock.WithReplicas(1, time.Second)).Mutex("lock")
		waiter := lockAsync(bg, w)
		require.Eventually(t, func() bool { return rs.primary.LLen(bg, k.Queue).Val() == 1 },
			10*time.Second, 5*time.Millisecond, "the waiter joins the line")
		require.NoError(t, m.Unlock(hctx))
		requireDone(t, hctx, time.Second)
		r := await(t, waiter, 10*time.Second)
		require.NoError(t, r.err)
		rs.requireOnReplica(t, w, r.ctx, k, 1)

		// TryLock of a free lock, after the last release.
		require.NoError(t, w.Unlock(r.ctx))
		token, _ := holdOn(t, rs.replica, k)
		require.Zero(t, token, "the replica has the release")
		tctx, err := m.TryLock(bg)
		require.NoError(t, err)
		rs.requireOnReplica(t, m, tctx, k, 1)
		require.NoError(t, m.Unlock(tctx))
		require.Empty(t, nothingLeft(rs.primary, k))
	})

	t.Run("UnacknowledgedLockGivesBackAndLeavesNothing", func(t *testing.T) {
		prefix, k := freshLock(t)
		// The replica is stopped: still connected, it acknowledges no
		// grant. (Two replicas asked for, with one connected, would fail
		// at once: see TestPrimaryWithoutReplicasFailsAtOnce.)
		m := rs.client(t, prefix, fairlock.WithReplicas(1, 100*time.Millisecond)).Mutex("lock")
		resume := redistest.Pause(t, rs.replica)
		defer resume()

		ctx, cancel := context.WithTimeout(bg, time.Second)
		defer cancel()
		start := time.Now()
		_, err := m.Lock(ctx)
		require.ErrorIs(t, err, fairlock.ErrNotReplicated)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.Less(t, time.Since(start), 5*time.Second, "Lock honours its deadline")
		require.Eventually(t, func() bool { return nothingLeft(rs.primary, k) == "" },
			5*time.Second, 5*time.Millisecond, "the grant is given back and the line left")

		_, err = m.TryLock(bg)
		require.ErrorIs(t, err, fairlock.ErrNotReplicated)
		require.NotErrorIs(t, err, fairlock.ErrLocked)
		require.Eventually(t, func() bool { return nothingLeft(rs.primary, k) == "" },
			5*time.Second, 5*time.Millisecond, "TryLock gives its grant back")

		// A Lock whose grant is a hand-over: still not counted, still
		// given back, and the lock goes on to the next in line.
		holder := rs.client(t, prefix).Mutex("lock")
		hctx, err := holder.Lock(bg)
		require.NoError(t, err)
		ctx2, cancel2 := context.WithTimeout(bg, 1500*time.Millisecond)
		defer cancel2()
		waiter := lockAsync(ctx2, m)
		require.Eventually(t, func() bool { return rs.primary.LLen(bg, k.Queue).Val() == 1 },
			10*time.Second, 5*time.Millisecond, "the waiter joins the line")
		other := rs.client(t, prefix).Mutex("lock")
		next := lockAsync(bg, other)
		require.Eventually(t, func() bool { return rs.primary.LLen(bg, k.Queue).Val() == 2 },
			10*time.Second, 5*time.Millisecond, "the second waiter joins the line")
		require.NoError(t, holder.Unlock(hctx))
		r := await(t, waiter, 10*time.Second)
		require.ErrorIs(t, r.err, fairlock.ErrNotReplicated)
		require.ErrorIs(t, r.err, context.DeadlineExceeded)
		n := await(t, next, 10*time.Second)
		require.NoError(t, n.err, "the next waiter is granted once the first gave up")
		require.NoError(t, other.Unlock(n.ctx))
		require.Eventually(t, func() bool { return nothingLeft(rs.primary, k) == "" },
			5*time.Second, 5*time.Millisecond)
	})

	t.Run("UnacknowledgedReEntryGivesItsLevelBack", func(t *testing.T) {
		prefix, k := freshLock(t)
		m := rs.client(t, prefix, fairlock.WithReplicas(1, 100*time.Millisecond)).Mutex("lock")
		hctx, err := m.Lock(bg)
		require.NoError(t, err)

		resume := redistest.Pause(t, rs.replica)
		_, err = m.Lock(hctx)
		require.ErrorIs(t, err, fairlock.ErrNotReplicated)
		require.NoError(t, hctx.Err(), "the hold lives on")
		require.Eventually(t, func() bool { _, count := holdOn(t, rs.primary, k); return count == 1 },
			5*time.Second, 5*time.Millisecond, "the level was given back")
		n, err := m.HoldCount(hctx)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		resume()

		rctx, err := m.Lock(hctx)
		require.NoError(t, err, "acknowledged again once the replica runs")
		rs.requireOnReplica(t, m, hctx, k, 2)
		require.NoError(t, m.Unlock(rctx))
		require.NoError(t, m.Unlock(hctx))
		require.Empty(t, nothingLeft(rs.primary, k))
	})

	t.Run("UnacknowledgedUnlockIsSentAgainUntilAcknowledged", func(t *testing.T) {
		prefix, k := freshLock(t)
		m := rs.client(t, prefix, fairlock.WithReplicas(1, 100*time.Millisecond)).Mutex("lock")
		hctx, err := m.Lock(bg)
		require.NoError(t, err)
		w := rs.client(t, prefix, fairlock.WithReplicas(1, 100*time.Millisecond)).Mutex("lock")
		wctx, cancel := context.WithTimeout(bg, time.Minute)
		defer cancel()
		waiter := lockAsync(wctx, w)
		require.Eventually(t, func() bool { return rs.primary.LLen(bg, k.Queue).Val() == 1 },
			10*time.Second, 5*time.Millisecond, "the waiter joins the line")

		resume := redistest.Pause(t, rs.replica)
		err = m.Unlock(hctx)
		require.ErrorIs(t, err, fairlock.ErrNotReplicated)
		require.ErrorContains(t, err, "sent again")
		requireDone(t, hctx, time.Second)
		require.ErrorIs(t, context.Cause(hctx), context.Canceled, "unlocked, not lost")
		token, _ := holdOn(t, rs.primary, k)
		require.NotZero(t, token, "the primary handed the lock to the waiter")

		// The waiter's grant is not acknowledged while the replica is
		// stopped: it keeps claiming it.
		select {
		case r := <-waiter:
			t.Fatalf("granted while no replica acknowledges: %v", r.err)
		case <-time.After(500 * time.Millisecond):
		}
		resume()
		r := await(t, waiter, 10*time.Second)
		require.NoError(t, r.err)
		rs.requireOnReplica(t, w, r.ctx, k, 1)
		require.NoError(t, w.Unlock(r.ctx))
		token, _ = holdOn(t, rs.replica, k)
		require.Zero(t, token)
		require.Empty(t, nothingLeft(rs.primary, k))
	})

	// go-redis sends a pipeline again when its reply is lost. The script
	// then finds its receipt and writes nothing. Redis 7.0 moves a
	// connection's replication offset with every command, so its WAIT
	// still waits for the first run; later servers move it only with
	// writes, and a WAIT after a script that wrote nothing would count a
	// replica that never saw the grant. The refresh of the receipt in the
	// same pipeline is the write that makes it wait on every server.
	t.Run("AResentGrantCountsOnlyWhenTheReplicasHaveIt", func(t *testing.T) {
		prefix, k := freshLock(t)
		p := faultproxy.New(t, rs.set.Addrs()[0])
		rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), ReadTimeout: 300 * time.Millisecond})
		t.Cleanup(func() { _ = rdb.Close() })
		c, err := fairlock.New(rdb, fairlock.WithPrefix(prefix), fairlock.WithReplicas(1, 100*time.Millisecond))
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		m := c.Mutex("lock")
		warm, err := m.Lock(bg) // loads the scripts and checks the server
		require.NoError(t, err)
		require.NoError(t, m.Unlock(warm))

		resume := redistest.Pause(t, rs.replica)
		p.LoseNextReply()
		ctx, cancel := context.WithTimeout(bg, 1500*time.Millisecond)
		defer cancel()
		_, err = m.Lock(ctx)
		require.Equal(t, 1, p.Lost(), "the grant's reply was lost")
		require.ErrorIs(t, err, fairlock.ErrNotReplicated)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		resume()
		require.Eventually(t, func() bool { return nothingLeft(rs.primary, k) == "" },
			5*time.Second, 5*time.Millisecond, "the grant is given back")
	})
}

func TestReplicatedGrantsOnEveryClusterMaster(t *testing.T) {
	redistest.Slow(t)
	t.Parallel()
	cluster := redistest.ClusterFor(t, 3, 1)
	ctx := context.Background()
	masters, err := cluster.Masters(ctx)
	require.NoError(t, err)
	require.Len(t, masters, 3)

	// The replica of each master, read with READONLY.
	replicaOf := map[string]*redis.Client{}
	replicas, err := cluster.Replicas(ctx)
	require.NoError(t, err)
	for _, addr := range replicas {
		rdb := redis.NewClient(&redis.Options{Addr: addr, OnConnect: func(ctx context.Context, cn *redis.Conn) error {
			return cn.ReadOnly(ctx).Err()
		}})
		t.Cleanup(func() { _ = rdb.Close() })
		info, err := rdb.Info(ctx, "replication").Result()
		require.NoError(t, err)
		var host, port string
		for line := range strings.Lines(info) {
			line = strings.TrimSpace(line)
			if v, ok := strings.CutPrefix(line, "master_host:"); ok {
				host = v
			}
			if v, ok := strings.CutPrefix(line, "master_port:"); ok {
				port = v
			}
		}
		replicaOf[host+":"+port] = rdb
	}

	prefix := redistest.Prefix(t)
	newClient := func() *fairlock.Client {
		c, err := fairlock.New(cluster.Client(t), fairlock.WithPrefix(prefix), fairlock.WithReplicas(1, time.Second))
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	holder, waiter := newClient(), newClient()
	inspect := cluster.Client(t)
	done := map[string]bool{}
	for i := 0; len(done) < len(masters); i++ {
		require.Less(t, i, 1000, "no names on every master")
		name := fmt.Sprintf("lock-%d", i)
		master, err := cluster.MasterOf(ctx, "{"+name+"}")
		require.NoError(t, err)
		if done[master] {
			continue
		}
		done[master] = true
		replica := replicaOf[master]
		require.NotNil(t, replica, "a replica of %s", master)
		k, err := queue.For(prefix, name)
		require.NoError(t, err)
		onReplica := func(m *fairlock.Mutex, hctx context.Context, count int) {
			t.Helper()
			want, err := m.Token(hctx)
			require.NoError(t, err)
			token, n := holdOn(t, replica, k)
			require.Equal(t, want, token, "%s: the replica of %s has the hold", name, master)
			require.Equal(t, count, n, "%s: the replica of %s has the count", name, master)
		}

		m := holder.Mutex(name)
		hctx, err := m.Lock(ctx)
		require.NoError(t, err)
		onReplica(m, hctx, 1)
		rctx, err := m.Lock(hctx)
		require.NoError(t, err)
		onReplica(m, hctx, 2)
		require.NoError(t, m.Unlock(rctx))
		onReplica(m, hctx, 1)

		w := waiter.Mutex(name)
		next := lockAsync(ctx, w)
		require.Eventually(t, func() bool {
			n, err := inspect.LLen(ctx, k.Queue).Result()
			return err == nil && n == 1
		}, 10*time.Second, 5*time.Millisecond, "%s: the waiter joins the line", name)
		require.NoError(t, m.Unlock(hctx))
		r := await(t, next, 10*time.Second)
		require.NoError(t, r.err)
		onReplica(w, r.ctx, 1)
		require.NoError(t, w.Unlock(r.ctx))
		token, _ := holdOn(t, replica, k)
		require.Zero(t, token, "%s: the replica of %s has the release", name, master)
	}
}

// freshLock returns a key prefix of the test's own and the keys of the
// lock "lock" under it.
func freshLock(t *testing.T) (string, queue.Keys) {
	t.Helper()
	prefix := redistest.Prefix(t)
	k, err := queue.For(prefix, "lock")
	require.NoError(t, err)
	return prefix, k
}

// A MultiLock that waits for replicas: its ticket's grant, whether it
// came at once or after a wait, reaches the replica before Lock returns,
// for every name, and so does its release.
func TestReplicatedMultiLockOnSentinel(t *testing.T) {
	redistest.Slow(t)
	t.Parallel()
	rs := startReplicaSet(t)
	bg := context.Background()
	prefix, _ := freshLock(t)
	c := rs.client(t, prefix, fairlock.WithReplicas(1, time.Second))
	ml := c.MultiLock([]string{"a", "b"})
	keys := func(name string) queue.Keys {
		k, err := queue.For(prefix, name)
		require.NoError(t, err)
		return k
	}
	requireReplicated := func(held context.Context) {
		t.Helper()
		for _, name := range []string{"a", "b"} {
			want, err := ml.Token(held, name)
			require.NoError(t, err)
			token, n := holdOn(t, rs.replica, keys(name))
			require.Equal(t, want, token, "the replica has the hold of %s", name)
			require.Equal(t, 1, n)
		}
	}

	held, err := ml.Lock(bg)
	require.NoError(t, err)
	requireReplicated(held)
	require.NoError(t, ml.Unlock(held))
	for _, name := range []string{"a", "b"} {
		token, _ := holdOn(t, rs.replica, keys(name))
		require.Zero(t, token, "the release of %s reached the replica", name)
	}

	// Granted after a wait in line: the grant is claimed by a poll, which
	// waits for the replica too.
	holder := rs.client(t, prefix).Mutex("b")
	hctx, err := holder.Lock(bg)
	require.NoError(t, err)
	multi := lockAsync(bg, ml)
	require.Eventually(t, func() bool {
		n, err := rs.primary.LLen(bg, keys("b").Queue).Result()
		return err == nil && n == 1
	}, 10*time.Second, 5*time.Millisecond)
	require.NoError(t, holder.Unlock(hctx))
	r := await(t, multi, 10*time.Second)
	require.NoError(t, r.err)
	requireReplicated(r.ctx)
	require.NoError(t, ml.Unlock(r.ctx))

	// The replica stopped: a grant of both names is not acknowledged, so
	// Lock and TryLock fail with ErrNotReplicated and give both back.
	short := rs.client(t, prefix, fairlock.WithReplicas(1, 100*time.Millisecond)).MultiLock([]string{"a", "b"})
	resume := redistest.Pause(t, rs.replica)
	defer resume()
	ctx, cancel := context.WithTimeout(bg, time.Second)
	defer cancel()
	_, err = short.Lock(ctx)
	require.ErrorIs(t, err, fairlock.ErrNotReplicated)
	_, err = short.TryLock(bg)
	require.ErrorIs(t, err, fairlock.ErrNotReplicated)
	for _, name := range []string{"a", "b"} {
		require.Eventually(t, func() bool { return nothingLeft(rs.primary, keys(name)) == "" },
			5*time.Second, 5*time.Millisecond, "the grant of %s is given back and its line left", name)
	}
}
