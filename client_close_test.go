package fairlock_test

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/internal/faultproxy"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/fairlock/fairlock/queue"
)

// Close releases every hold of its Client before the hold's lease can
// lapse, however many there are: the releases go out together, and each
// hold is renewed until its release is answered. The Client under test
// reaches Redis through fault proxies that add a round trip's latency and
// through a pool of two connections per server, so that releases sent
// one round trip each could not all be sent before the leases ran out
// (releases × round trip ÷ connections: about 9 s on one server, 4.5 s
// on a Ring of two shards, 3 s on a Cluster of three masters, against a
// lease of 1.5 s). Every server
// reports each key it expires (keyspace
// notifications): no hold key may expire, and none may be left once
// Close returns. A waiter of another Client on some of the locks is
// handed each lock by its release, at once.
const (
	closeLease   = 1500 * time.Millisecond
	closeLatency = 20 * time.Millisecond // each way: a round trip takes 40 ms more
	closePool    = 2
)

func TestCloseReleasesEveryHoldBeforeItsLeaseCanLapse(t *testing.T) {
	redistest.Slow(t)
	t.Parallel()
	t.Run("Server", func(t *testing.T) {
		t.Parallel()
		srv, err := redistest.Start()
		require.NoError(t, err)
		t.Cleanup(srv.Stop)
		p := faultproxy.New(t, srv.Addr)
		rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), PoolSize: closePool})
		t.Cleanup(func() { _ = rdb.Close() })
		closeReleasesEveryHold(t, rdb, srv.Client(t), []string{srv.Addr}, []*faultproxy.Proxy{p})
	})
	t.Run("Cluster", func(t *testing.T) {
		t.Parallel()
		cluster := redistest.ClusterFor(t, 3, 0)
		masters, err := cluster.Masters(context.Background())
		require.NoError(t, err)
		proxies := map[string]*faultproxy.Proxy{}
		var ps []*faultproxy.Proxy
		for _, addr := range cluster.Addrs() {
			proxies[addr] = faultproxy.New(t, addr)
			ps = append(ps, proxies[addr])
		}
		rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs(), PoolSize: closePool,
			Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
				var d net.Dialer
				if p := proxies[addr]; p != nil {
					addr = p.Addr()
				}
				return d.DialContext(ctx, network, addr)
			}})
		t.Cleanup(func() { _ = rdb.Close() })
		closeReleasesEveryHold(t, rdb, cluster.Client(t), masters, ps)
	})
	t.Run("Ring", func(t *testing.T) {
		t.Parallel()
		proxied, direct := map[string]string{}, map[string]string{}
		var (
			addrs []string
			ps    []*faultproxy.Proxy
		)
		for _, name := range []string{"a", "b"} {
			srv, err := redistest.Start()
			require.NoError(t, err)
			t.Cleanup(srv.Stop)
			p := faultproxy.New(t, srv.Addr)
			proxied[name], direct[name] = p.Addr(), srv.Addr
			addrs, ps = append(addrs, srv.Addr), append(ps, p)
		}
		rdb := redis.NewRing(&redis.RingOptions{Addrs: proxied, PoolSize: closePool})
		t.Cleanup(func() { _ = rdb.Close() })
		plain := redis.NewRing(&redis.RingOptions{Addrs: direct})
		t.Cleanup(func() { _ = plain.Close() })
		closeReleasesEveryHold(t, rdb, plain, addrs, ps)
	})
}

// closeReleasesEveryHold takes many holds of every kind through a Client
// over rdb (whose servers' traffic goes through proxies), closes it once
// the proxies add their latency, and checks on the servers at addrs (over
// direct, another Client's waiters among them) that Close released every
// hold before its lease lapsed.
func closeReleasesEveryHold(t *testing.T, rdb, direct redis.UniversalClient, addrs []string, proxies []*faultproxy.Proxy) {
	prefix := redistest.Prefix(t)
	bg := context.Background()
	expired := watchExpiries(t, addrs)
	c, err := fairlock.New(rdb, fairlock.WithPrefix(prefix), fairlock.WithLease(closeLease),
		fairlock.WithCallTimeout(5*time.Second))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	waiting, err := fairlock.New(direct, fairlock.WithPrefix(prefix))
	require.NoError(t, err)
	t.Cleanup(func() { _ = waiting.Close() })

	var (
		held     []context.Context
		holdKeys []string
	)
	keys := func(name, kind string) queue.Keys {
		k, err := queue.For(prefix, name)
		if kind != "" {
			k, err = queue.Weighted(prefix, name, kind)
		}
		require.NoError(t, err)
		return k
	}
	took := func(hctx context.Context, err error, ks ...string) {
		t.Helper()
		require.NoError(t, err)
		held = append(held, hctx)
		holdKeys = append(holdKeys, ks...)
	}
	for i := range 200 { // Mutexes, every tenth entered twice
		m := c.Mutex(fmt.Sprintf("m-%d", i))
		hctx, err := m.Lock(bg)
		took(hctx, err, keys(m.Name(), "").Lock)
		if i%10 == 0 {
			_, err := m.Lock(hctx)
			require.NoError(t, err)
		}
	}
	for i := range 50 { // MultiLocks of two names
		a, b := fmt.Sprintf("ml-%d-a", i), fmt.Sprintf("ml-%d-b", i)
		hctx, err := c.MultiLock([]string{a, b}).Lock(bg)
		took(hctx, err, keys(a, "").Lock, keys(b, "").Lock)
	}
	for i := range 50 { // Semaphores of two permits, held by two holders
		s := c.Semaphore(fmt.Sprintf("s-%d", i), 2)
		k := keys(s.Name(), queue.KindSemaphore)
		for range 2 {
			hctx, err := s.Acquire(bg, 1)
			took(hctx, err, k.Lock, k.Holders)
		}
	}
	for i := range 50 { // RWMutexes: read by two readers, or written
		rw := c.RWMutex(fmt.Sprintf("rw-%d", i))
		k := keys(rw.Name(), queue.KindRWMutex)
		if i%2 == 0 {
			hctx, err := rw.Lock(bg)
			took(hctx, err, k.Lock, k.Holders)
			continue
		}
		for range 2 {
			hctx, err := rw.RLock(bg)
			took(hctx, err, k.Lock, k.Holders)
		}
	}
	// Another Client waits for some of the locks: each release hands it
	// the lock.
	var (
		waiters []<-chan grantTime
		awaited []queue.Keys
	)
	for i := range 5 {
		m := waiting.Mutex(fmt.Sprintf("m-%d", i*7))
		waiters = append(waiters, grantOf(func() error { _, err := m.Lock(bg); return err }))
		awaited = append(awaited, keys(m.Name(), ""))
	}
	sem := waiting.Semaphore("s-3", 2)
	waiters = append(waiters, grantOf(func() error { _, err := sem.Acquire(bg, 2); return err }))
	awaited = append(awaited, keys(sem.Name(), queue.KindSemaphore))
	require.Eventually(t, func() bool {
		for _, k := range awaited {
			if n, err := direct.LLen(bg, k.Queue).Result(); err != nil || n == 0 {
				return false
			}
		}
		return true
	}, 10*time.Second, 5*time.Millisecond, "the waiters queued")
	slices.Sort(holdKeys)
	holdKeys = slices.Compact(holdKeys)

	for _, p := range proxies {
		p.SetLatency(closeLatency)
	}
	start := time.Now()
	require.NoError(t, c.Close())
	closed := time.Now()
	t.Logf("%d holds (%d keys) released by Close in %v", len(held), len(holdKeys), closed.Sub(start))
	for i, hctx := range held {
		require.ErrorIs(t, context.Cause(hctx), fairlock.ErrClosed, "hold %d", i)
	}
	for _, k := range holdKeys {
		if slices.ContainsFunc(awaited, func(a queue.Keys) bool { return k == a.Lock || k == a.Holders }) {
			continue // the waiter's now
		}
		n, err := direct.Exists(bg, k).Result()
		require.NoError(t, err)
		require.Zero(t, n, "%s is left once Close returned", k)
	}
	expired.requireNone(t, holdKeys)
	requireHandedAtOnce(t, waiters, closed)
}

// A quorum Client's Close releases every hold on every master within its
// bound, however many: as above, the releases to each master go out
// together, through proxies that add a round trip's latency and a pool
// of two connections per master, where releases sent one round trip each
// would take about 3 s against a bound of 1 s. (The holds keep the
// default lease, 30 s: a quorum Client renews each hold with calls of its
// own, which would take the connections that the releases need. Its
// renewals during Close are checked in package fair, by
// TestQuorumCloseRenewsEachHoldUntilItsReleaseIsAnswered.)
func TestQuorumCloseReleasesEveryHoldWithinItsBound(t *testing.T) {
	redistest.Slow(t)
	t.Parallel()
	bg := context.Background()
	servers := redistest.Masters(t, 3)
	prefix := redistest.Prefix(t)
	var (
		masters, direct []redis.UniversalClient
		proxies         []*faultproxy.Proxy
	)
	for _, s := range servers {
		p := faultproxy.New(t, s.Addr)
		rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), PoolSize: closePool})
		t.Cleanup(func() { _ = rdb.Close() })
		masters, direct = append(masters, rdb), append(direct, s.Client(t))
		proxies = append(proxies, p)
	}
	c, err := fairlock.NewQuorum(bg, masters, fairlock.WithPrefix(prefix), fairlock.WithCallTimeout(time.Second))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	waiting, err := fairlock.NewQuorum(bg, direct, fairlock.WithPrefix(prefix))
	require.NoError(t, err)
	t.Cleanup(func() { _ = waiting.Close() })

	keys := func(name string) queue.Keys {
		k, err := queue.Quorum(prefix, name)
		require.NoError(t, err)
		return k
	}
	var (
		held     []context.Context
		holdKeys []string
	)
	for i := range 150 { // every tenth entered twice
		m := c.Mutex(fmt.Sprintf("q-%d", i))
		hctx, err := m.Lock(bg)
		require.NoError(t, err)
		if i%10 == 0 {
			_, err := m.Lock(hctx)
			require.NoError(t, err)
		}
		held, holdKeys = append(held, hctx), append(holdKeys, keys(m.Name()).Lock)
	}
	var (
		waiters []<-chan grantTime
		handed  []queue.Keys
	)
	for i := range 3 {
		m := waiting.Mutex(fmt.Sprintf("q-%d", i*11))
		waiters = append(waiters, grantOf(func() error { _, err := m.Lock(bg); return err }))
		handed = append(handed, keys(m.Name()))
	}
	require.Eventually(t, func() bool {
		for _, k := range handed {
			for _, rdb := range direct {
				if n, err := rdb.ZCard(bg, k.Queue).Result(); err != nil || n == 0 {
					return false
				}
			}
		}
		return true
	}, 10*time.Second, 5*time.Millisecond, "the waiters queued on every master")

	for _, p := range proxies {
		p.SetLatency(closeLatency)
	}
	start := time.Now()
	require.NoError(t, c.Close())
	closed := time.Now()
	t.Logf("%d quorum holds released by Close in %v", len(held), closed.Sub(start))
	for i, hctx := range held {
		require.ErrorIs(t, context.Cause(hctx), fairlock.ErrClosed, "hold %d", i)
	}
	for i, rdb := range direct {
		for _, k := range holdKeys {
			if slices.ContainsFunc(handed, func(h queue.Keys) bool { return h.Lock == k }) {
				continue // the waiter's now
			}
			n, err := rdb.Exists(bg, k).Result()
			require.NoError(t, err)
			require.Zero(t, n, "%s is left on master %d once Close returned", k, i)
		}
	}
	requireHandedAtOnce(t, waiters, closed)
}

// requireHandedAtOnce checks that each waiter got its lock from the
// release Close sent, not from the lease's expiry: within half a second
// of Close's return, when the leases had a second left or more.
func requireHandedAtOnce(t *testing.T, waiters []<-chan grantTime, closed time.Time) {
	t.Helper()
	for _, w := range waiters {
		select {
		case g := <-w:
			require.NoError(t, g.err)
			require.Less(t, g.at.Sub(closed), 500*time.Millisecond, "a waiter was handed its lock late")
		case <-time.After(10 * time.Second):
			t.Fatal("a waiter was not handed its lock")
		}
	}
}

// grantTime is when a background Lock call returned, and its error.
type grantTime struct {
	at  time.Time
	err error
}

// grantOf runs lock in a goroutine, and sends when it returned.
func grantOf(lock func() error) <-chan grantTime {
	ch := make(chan grantTime, 1)
	go func() {
		err := lock()
		ch <- grantTime{time.Now(), err}
	}()
	return ch
}

// expiries records the keys the servers expire, from keyspace
// notifications that watchExpiries turns on.
type expiries struct {
	admins []*redis.Client // one per server
	mu     sync.Mutex
	seen   []string // guarded by mu: "channel payload" of every message
}

// watchExpiries turns on the notifications of expired keys on every
// server at addrs and records them until the test ends.
func watchExpiries(t *testing.T, addrs []string) *expiries {
	x := &expiries{}
	ctx := context.Background()
	for _, addr := range addrs {
		admin := redis.NewClient(&redis.Options{Addr: addr})
		t.Cleanup(func() { _ = admin.Close() })
		x.admins = append(x.admins, admin)
		require.NoError(t, admin.ConfigSet(ctx, "notify-keyspace-events", "Ex").Err())
		sub := admin.Subscribe(ctx, "__keyevent@0__:expired", "expiries:sync")
		_, err := sub.Receive(ctx) // subscribed
		require.NoError(t, err)
		ch := sub.Channel()
		done := make(chan struct{})
		go func() {
			defer close(done)
			for m := range ch {
				x.mu.Lock()
				x.seen = append(x.seen, m.Channel+" "+m.Payload)
				x.mu.Unlock()
			}
		}()
		t.Cleanup(func() {
			_ = sub.Close()
			<-done
		})
	}
	return x
}

// requireNone checks that the servers expired none of keys so far. It
// has every server publish a marker after the notifications it sent, and
// waits for each marker first.
func (x *expiries) requireNone(t *testing.T, keys []string) {
	t.Helper()
	ctx := context.Background()
	for i, admin := range x.admins {
		marker := fmt.Sprintf("expiries:sync %d-%d", i, time.Now().UnixNano())
		require.NoError(t, admin.Publish(ctx, "expiries:sync", strings.TrimPrefix(marker, "expiries:sync ")).Err())
		require.Eventually(t, func() bool {
			x.mu.Lock()
			defer x.mu.Unlock()
			return slices.Contains(x.seen, marker)
		}, 10*time.Second, time.Millisecond, "the notifications of server %d", i)
	}
	var lapsed []string
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, m := range x.seen {
		key, ok := strings.CutPrefix(m, "__keyevent@0__:expired ")
		if ok && slices.Contains(keys, key) {
			lapsed = append(lapsed, key)
		}
	}
	require.Empty(t, lapsed[:min(len(lapsed), 5)], "%d of %d hold keys expired: their holds were not released before their leases lapsed",
		len(lapsed), len(keys))
}
