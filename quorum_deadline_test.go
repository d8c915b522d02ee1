package fairlock_test

import (
	"bytes"
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/internal/faultproxy"
	"github.com/fairlock/fairlock/internal/redistest"
)

// TestQuorumCallsHonourTheirDeadlineWhileAMajorityIsStopped stops two of
// three masters (SIGSTOP: they answer nothing, and their connections
// stay open) and makes every kind of call of a quorum Mutex at once, each
// with a 100ms deadline: each returns context.DeadlineExceeded within
// deadlineBound, as a Mutex's calls do on a hung server, not after the
// call timeout (10s). A waiter already in line when the masters stopped
// returns as soon as its context ends.
func TestQuorumCallsHonourTheirDeadlineWhileAMajorityIsStopped(t *testing.T) {
	redistest.Slow(t)
	t.Parallel()
	servers := redistest.Masters(t, 3)
	ctx := context.Background()
	holder := quorumOf(t, servers).Mutex("hung")
	held, err := holder.Lock(ctx)
	require.NoError(t, err)
	fresh := func(name string) *fairlock.Mutex { return quorumOf(t, servers).Mutex(name) }
	unlocked := fresh("unlocked")
	toUnlock, err := unlocked.Lock(ctx)
	require.NoError(t, err)
	// Counters that differ from master to master: the masters draw
	// different tokens for the hold, so that its Token needs a round.
	for i, s := range servers[:2] {
		require.NoError(t, s.Client(t).Set(ctx, quorumKeys(t, "token").Token, 1+10*i, 0).Err())
	}
	uncommitted := fresh("token")
	toCommit, err := uncommitted.Lock(ctx)
	require.NoError(t, err)
	reentered := fresh("reentered")
	toReenter, err := reentered.Lock(ctx)
	require.NoError(t, err)

	// A fast-path grant reaches the master its doorway did not ask a
	// moment after Lock returns: the waiter is started once the hold is on
	// every master, or its doorway could take that master first.
	for _, s := range servers {
		waitQuorumHeld(t, s.Client(t), quorumKeys(t, "hung"))
	}
	waiter := fresh("hung")
	wctx, stopWaiting := context.WithCancel(ctx)
	waited := make(chan error, 1)
	go func() {
		_, err := waiter.Lock(wctx)
		waited <- err
	}()
	queuedOn(t, servers[0].Client(t), quorumKeys(t, "hung"), 1)

	// Every call is made through a Client of its own, made before the
	// masters stop.
	lock, try, other, isLocked, ttl, holdCount, forced := fresh("hung"), fresh("hung"), fresh("hung"), fresh("hung"), fresh("hung"), fresh("hung"), fresh("forced")
	calls := map[string]func(ctx context.Context) error{
		"Lock":    func(ctx context.Context) error { _, err := lock.Lock(ctx); return err },
		"TryLock": func(ctx context.Context) error { _, err := try.TryLock(ctx); return err },
		"Lock re-entering another Client's hold": func(ctx context.Context) error {
			_, err := other.Lock(withValuesOf(ctx, held))
			return err
		},
		"Lock re-entering its own hold": func(ctx context.Context) error {
			_, err := reentered.Lock(withValuesOf(ctx, toReenter))
			return err
		},
		"IsLocked": func(ctx context.Context) error { _, err := isLocked.IsLocked(ctx); return err },
		"TTL":      func(ctx context.Context) error { _, err := ttl.TTL(ctx); return err },
		"HoldCount": func(ctx context.Context) error {
			_, err := holdCount.HoldCount(fairlock.ContextWithOwner(ctx, "someone"))
			return err
		},
		"ForceUnlock": func(ctx context.Context) error { _, err := forced.ForceUnlock(ctx); return err },
		"Token":       func(ctx context.Context) error { _, err := uncommitted.Token(withValuesOf(ctx, toCommit)); return err },
		"Unlock":      func(ctx context.Context) error { return unlocked.Unlock(withValuesOf(ctx, toUnlock)) },
	}
	for _, s := range servers[1:] {
		redistest.Pause(t, s.Client(t))
	}
	requireDeadlinesHonoured(t, calls)

	start := time.Now()
	stopWaiting()
	select {
	case err := <-waited:
		require.ErrorIs(t, err, context.Canceled)
		require.Less(t, time.Since(start), deadlineBound, "the waiter returns as its context ends")
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter in line did not return when its context ended")
	}
}

// TestQuorumHoldOutlivesAStoppedMinority: with one of three masters
// stopped, the other two answer every renewal, and a hold with a short
// lease goes on for several leases: a renewal is decided by a majority's
// answers, not held up by the master that does not answer.
func TestQuorumHoldOutlivesAStoppedMinority(t *testing.T) {
	redistest.Slow(t)
	t.Parallel()
	const lease = 2 * time.Second
	servers := redistest.Masters(t, 3)
	m := quorumOf(t, servers, fairlock.WithLease(lease)).Mutex("renewed")
	other := quorumOf(t, servers).Mutex("renewed")
	held, err := m.Lock(context.Background())
	require.NoError(t, err)
	redistest.Pause(t, servers[2].Client(t))

	select {
	case <-held.Done():
		t.Fatalf("the hold ended while a majority answered: %v", context.Cause(held))
	case <-time.After(4 * lease):
	}
	ttl, err := m.TTL(held)
	require.NoError(t, err)
	require.Greater(t, ttl, lease/3, "the validity is renewed by the majority")

	// Reads are settled by the majority too: none waits for the stopped
	// master (the call timeout is 10s), through this Client or another.
	for _, mu := range []*fairlock.Mutex{m, other} {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		locked, err := mu.IsLocked(ctx)
		require.NoError(t, err)
		require.True(t, locked)
		n, err := mu.HoldCount(withValuesOf(ctx, held))
		require.NoError(t, err)
		require.Equal(t, 1, n)
		cancel()
	}
	ctx, cancel := context.WithTimeout(held, 3*time.Second)
	defer cancel()
	inner, err := other.Lock(ctx)
	require.NoError(t, err, "another Client re-enters the hold while a master is stopped")
	require.NoError(t, other.Unlock(inner))
	require.NoError(t, m.Unlock(held))

	// ForceUnlock too is decided by the majority.
	fctx, fcancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer fcancel()
	held, err = m.Lock(fctx)
	require.NoError(t, err)
	start := time.Now()
	removed, err := other.ForceUnlock(fctx)
	require.NoError(t, err)
	require.True(t, removed)
	require.Less(t, time.Since(start), 2*time.Second, "ForceUnlock waited for the stopped master")
	requireDone(t, held, 3*time.Second)
}

// TestNewQuorumCountsNoServerTwiceWhenAMasterIsDown: the duplicate check
// does not stop at a master that does not answer.
//   - [m0 down, m1, m1]: the two that answer are one server; NewQuorum
//     refuses them.
//   - [m0 down, m1, m0]: m0 is listed twice and answers nothing, so
//     NewQuorum cannot tell; it makes the Client, and once m0 is back the
//     second m0 never counts. A Client over {m0, m1, m2} that holds the
//     lock on m1 and m2 (taken while m0 was down) keeps it alone: the
//     other Client cannot make a majority of m0 twice.
func TestNewQuorumCountsNoServerTwiceWhenAMasterIsDown(t *testing.T) {
	redistest.Slow(t)
	t.Parallel()
	servers := redistest.Masters(t, 3)
	m0, m1, m2 := servers[0], servers[1], servers[2]
	client := func(s *redistest.Server) redis.UniversalClient {
		rdb := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
		t.Cleanup(func() { _ = rdb.Close() })
		return rdb
	}
	m0.Kill()

	_, err := fairlock.NewQuorum(context.Background(), []redis.UniversalClient{client(m0), client(m1), client(m1)})
	require.ErrorIs(t, err, fairlock.ErrInvalidOption)
	require.ErrorContains(t, err, "same server")

	prefix := redistest.Prefix(t)
	var logged bytes.Buffer
	var logMu sync.Mutex
	logger := slog.New(slog.NewTextHandler(&lockedWriter{w: &logged, mu: &logMu}, nil))
	twice, err := fairlock.NewQuorum(context.Background(), []redis.UniversalClient{client(m0), client(m1), client(m0)},
		fairlock.WithPrefix(prefix), fairlock.WithLogger(logger))
	require.NoError(t, err, "a master that does not answer cannot be told from another")
	right, err := fairlock.NewQuorum(context.Background(), []redis.UniversalClient{client(m0), client(m1), client(m2)}, fairlock.WithPrefix(prefix))
	require.NoError(t, err)
	t.Cleanup(func() { _ = twice.Close(); _ = right.Close() })

	held, err := right.Mutex("once").Lock(context.Background())
	require.NoError(t, err, "m1 and m2 make a majority")
	require.NoError(t, m0.Restart())

	for range 5 {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		got, err := twice.Mutex("once").TryLock(ctx)
		cancel()
		require.Error(t, err, "granted while another Client holds the lock: m0 was counted twice")
		require.Nil(t, got)
	}
	logMu.Lock()
	require.Contains(t, logged.String(), "same server")
	logMu.Unlock()
	requireLive(t, held)
	require.NoError(t, right.Mutex("once").Unlock(held))
}

// lockedWriter is an io.Writer that writes to w under mu.
type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// TestQuorumEventsOfACallThatGivesUpCarryItsID: every event of a quorum
// Lock call carries the call's id, the EventWaitEnded of one that gives up
// too.
func TestQuorumEventsOfACallThatGivesUpCarryItsID(t *testing.T) {
	redistest.Slow(t)
	t.Parallel()
	servers := redistest.Masters(t, 3)
	var (
		mu     sync.Mutex
		events []fairlock.Event
	)
	c := quorumOf(t, servers, fairlock.WithObserver(fairlock.ObserverFunc(func(ctx context.Context, e fairlock.Event) {
		mu.Lock()
		events = append(events, e)
		mu.Unlock()
	})))
	other := quorumOf(t, servers)
	busy, err := other.Mutex("given-up").Lock(context.Background())
	require.NoError(t, err)
	_, err = c.Mutex("given-up").TryLock(context.Background())
	require.ErrorIs(t, err, fairlock.ErrLocked)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err = c.Mutex("given-up").Lock(ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.NoError(t, other.Mutex("given-up").Unlock(busy))
	require.NoError(t, c.Close()) // delivers every event still queued

	mu.Lock()
	defer mu.Unlock()
	ended := 0
	calls := map[string]bool{}
	for _, e := range events {
		require.NotEmpty(t, e.Call, "%v event without its call's id", e.Kind)
		if e.Kind == fairlock.EventWaitStarted {
			calls[e.Call] = true
		}
		if e.Kind == fairlock.EventWaitEnded {
			ended++
			require.True(t, calls[e.Call], "an EventWaitEnded of a call that never started: %q", e.Call)
		}
	}
	require.Equal(t, 2, ended, "the TryLock and the Lock each end once: %v", events)
}

// TestQuorumCloseReturnsWithinOneCallTimeoutWhenMastersHang: a quorum
// Client's Close has the bound an Engine's has. With every master frozen
// behind a fault proxy (calls hang until their context's deadline),
// Close ends the holds and the waiter and returns within about one call
// timeout.
func TestQuorumCloseReturnsWithinOneCallTimeoutWhenMastersHang(t *testing.T) {
	redistest.Slow(t)
	t.Parallel()
	const callTimeout = 1500 * time.Millisecond
	servers := redistest.Masters(t, 3)
	var proxies []*faultproxy.Proxy
	masters := make([]redis.UniversalClient, len(servers))
	for i, s := range servers {
		p := faultproxy.New(t, s.Addr)
		proxies = append(proxies, p)
		rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true, ReadTimeout: time.Minute})
		t.Cleanup(func() { _ = rdb.Close() })
		masters[i] = rdb
	}
	prefix, _ := quorumPrefixes.LoadOrStore(t.Name(), redistest.Prefix(t))
	c, err := fairlock.NewQuorum(context.Background(), masters, fairlock.WithPrefix(prefix.(string)), fairlock.WithCallTimeout(callTimeout))
	require.NoError(t, err)
	ctx := context.Background()
	for _, name := range []string{"held-1", "held-2"} {
		_, err := c.Mutex(name).Lock(ctx)
		require.NoError(t, err)
	}
	other := quorumOf(t, servers).Mutex("busy")
	octx, err := other.Lock(ctx)
	require.NoError(t, err)
	for _, s := range servers { // the hold on every master first (see above)
		waitQuorumHeld(t, s.Client(t), quorumKeys(t, "busy"))
	}
	waiting := lockAsync(ctx, c.Mutex("busy"))
	for _, s := range servers {
		queuedOn(t, s.Client(t), quorumKeys(t, "busy"), 1)
	}

	for _, p := range proxies {
		p.FreezeAll()
	}
	start := time.Now()
	require.NoError(t, c.Close())
	took := time.Since(start)
	require.Less(t, took, callTimeout+time.Second, "Close took %v", took)
	r := await(t, waiting, time.Second)
	require.ErrorIs(t, r.err, fairlock.ErrClosed)
	require.NoError(t, other.Unlock(octx))
}
