package fairlock_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/queue"
)

// The scenarios of the weighted locks' ACL tests (weighted_acl_test.go):
// every entry point of a Semaphore and of a RWMutex, run as a user of an
// ACL line, with each call's error recorded.

// aclCalls records, for an ACL scenario, the errors of the calls that did
// not answer as they should, and of the renewals that failed: a test
// that drops a rule asks which error came first.
type aclCalls struct {
	t    require.TestingT
	mu   sync.Mutex
	errs []error // guarded by mu
}

func (a *aclCalls) record(err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.errs = append(a.errs, err)
}

// first returns the first error recorded, or nil.
func (a *aclCalls) first() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.errs) == 0 {
		return nil
	}
	return a.errs[0]
}

// ok requires that a call returned no error.
func (a *aclCalls) ok(err error, what string) {
	if err != nil {
		a.record(err)
	}
	require.NoError(a.t, err, what)
}

// is requires that a call returned target, and nothing refused.
func (a *aclCalls) is(err, target error, what string) {
	switch {
	case err == nil:
		a.record(fmt.Errorf("%s: no error, want %w", what, target))
	case !errors.Is(err, target) || errors.Is(err, fairlock.ErrNoPermission):
		a.record(err)
	}
	require.ErrorIs(a.t, err, target, what)
	require.NotErrorIs(a.t, err, fairlock.ErrNoPermission, what)
}

// Observe records the error of every failed renewal: a refused renewal
// is an error no call returns.
func (a *aclCalls) Observe(_ context.Context, ev fairlock.Event) {
	if ev.Kind == fairlock.EventRenewalFailed {
		a.record(ev.Err)
	}
}

// aclDeployment is a deployment with a user made by an ACL SETUSER line.
type aclDeployment struct {
	// admin has every permission: the scenarios look at the keys with it.
	admin redis.UniversalClient
	// user returns a new client that logs in as the line's user.
	user func() redis.UniversalClient
	// subscribed returns how many wake channels have subscribers.
	subscribed func() int
}

// aclServer creates the user of line on the server at addr, through
// admin.
func aclServer(t require.TestingT, addr string, admin *redis.Client, line string) aclDeployment {
	return aclDeployment{
		admin: admin,
		user:  func() redis.UniversalClient { return newACLUser(t, addr, admin, line) },
		subscribed: func() int {
			return len(admin.PubSubChannels(context.Background(), "fairlock:*").Val())
		},
	}
}

// aclWorld is what both weighted scenarios run with: Clients of the
// user, the admin client that looks at the keys, and the records.
type aclWorld struct {
	a      *aclCalls
	d      aclDeployment
	admin  redis.UniversalClient
	logs   *logRecorder
	c1, c2 *fairlock.Client // c2 polls every 20s: it is woken by push
	c3     *fairlock.Client // leases of 600ms, renewed every 200ms
}

// newACLWorld makes the Clients of a scenario on d; close closes them.
func newACLWorld(a *aclCalls, d aclDeployment) (w *aclWorld, close func()) {
	w = &aclWorld{a: a, d: d, admin: d.admin, logs: &logRecorder{}}
	rdb1, rdb2 := d.user(), d.user()
	opts := func(extra ...fairlock.Option) []fairlock.Option {
		return append([]fairlock.Option{fairlock.WithLogger(slog.New(w.logs)), fairlock.WithObserver(a)}, extra...)
	}
	var err error
	w.c1, err = fairlock.New(rdb1, opts()...)
	require.NoError(a.t, err)
	w.c2, err = fairlock.New(rdb2, opts(fairlock.WithWaiterTTL(time.Minute))...)
	require.NoError(a.t, err)
	w.c3, err = fairlock.New(rdb1, opts(fairlock.WithLease(600*time.Millisecond))...)
	require.NoError(a.t, err)
	return w, func() {
		_ = w.c1.Close()
		_ = w.c2.Close()
		_ = w.c3.Close()
		_ = rdb1.Close()
		_ = rdb2.Close()
	}
}

func (w *aclWorld) keys(name, kind string) queue.Keys {
	k, err := queue.Weighted("fairlock", name, kind)
	require.NoError(w.a.t, err)
	return k
}

// waitQueued waits until n callers are in the line of the lock, and
// fails at once if a call that should wait returned.
func (w *aclWorld) waitQueued(name, kind string, n int64, waiters ...<-chan result) {
	deadline := time.Now().Add(aclLockWithin)
	for w.admin.LLen(context.Background(), w.keys(name, kind).Queue).Val() != n {
		for _, ch := range waiters {
			if len(ch) > 0 {
				r := <-ch
				w.a.ok(r.err, "a call that should wait returned")
				require.FailNow(w.a.t, name+": a call that should wait was granted")
			}
		}
		if time.Now().After(deadline) {
			require.FailNow(w.a.t, fmt.Sprintf("%d callers of %s not in line within %v", n, name, aclLockWithin))
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// granted waits for the call that reports on ch, by push (within
// aclLockWithin, far below c2's polls).
func (w *aclWorld) granted(ch <-chan result, what string) context.Context {
	r := awaitResult(w.a.t, ch)
	w.a.ok(r.err, what)
	return r.ctx
}

// requireGone waits until Redis keeps nothing of the lock but its fencing
// counter.
func (w *aclWorld) requireGone(name, kind string) {
	k := w.keys(name, kind)
	require.Eventually(w.a.t, func() bool {
		return w.admin.Exists(context.Background(), k.Lock, k.Holders, k.Queue, k.Deadline).Val() == 0
	}, aclLockWithin, 5*time.Millisecond, "keys of %s left behind", name)
}

// lineHead returns the entry at the head of the lock's line.
func (w *aclWorld) lineHead(name, kind string) string {
	entry, err := w.admin.LIndex(context.Background(), w.keys(name, kind).Queue, 0).Result()
	require.NoError(w.a.t, err)
	return entry
}

// requireLeft waits for the outcome of the leave of entry, a waiter of
// the lock that gave up. The call reports it only when the leave was
// answered within the cleanup grace that the call waits for it; a leave
// answered later goes on in the background and logs its failure. So
// this waits for either: the entry out of the line, or a failure
// logged, which is recorded as the error of the give-up.
func (w *aclWorld) requireLeft(name, kind, entry string) {
	ctx := context.Background()
	line := w.keys(name, kind).Queue
	deadline := time.Now().Add(aclLockWithin)
	for {
		w.a.ok(w.logs.errorOf("could not leave the queue"), "the waiter that gave up leaves the line of "+name)
		err := w.admin.LPos(ctx, line, entry, redis.LPosArgs{}).Err()
		if errors.Is(err, redis.Nil) {
			return
		}
		require.NoError(w.a.t, err)
		if time.Now().After(deadline) {
			require.FailNow(w.a.t, fmt.Sprintf("the waiter that gave up is still in the line of %s after %v", name, aclLockWithin))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// requireRenewed waits until the watchdog has moved the lease of the
// lock's one holder on.
func (w *aclWorld) requireRenewed(name, kind string) {
	ctx := context.Background()
	k := w.keys(name, kind)
	first := w.admin.ZRangeWithScores(ctx, k.Holders, 0, -1).Val()
	require.Len(w.a.t, first, 1)
	deadline := time.Now().Add(aclLockWithin)
	for {
		now := w.admin.ZRangeWithScores(ctx, k.Holders, 0, -1).Val()
		if len(now) == 1 && now[0].Score > first[0].Score {
			return
		}
		// A refused renewal fails the scenario at once.
		w.a.ok(w.a.first(), "the lease of "+name+" is renewed")
		if time.Now().After(deadline) {
			require.FailNow(w.a.t, fmt.Sprintf("the lease of %s is not renewed within %v", name, aclLockWithin))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// requireUnsubscribed waits until no Client is subscribed to a wake
// channel: a Client unsubscribes a second after its last waiter of a
// lock stopped.
func (w *aclWorld) requireUnsubscribed() {
	require.Eventually(w.a.t, func() bool { return w.d.subscribed() == 0 },
		aclLockWithin, 10*time.Millisecond, "the Clients unsubscribe")
}

// requireNoRefusal asserts that no Client logged a refused command other
// than the server check's INFO.
func (w *aclWorld) requireNoRefusal() {
	var refused []string
	for _, l := range w.logs.all() {
		if (strings.Contains(l, "NOPERM") || strings.Contains(l, "lacks a permission")) && !strings.Contains(l, "'info'") {
			refused = append(refused, l)
		}
	}
	require.Empty(w.a.t, refused, "commands refused to the user")
}

// runSemaphoreAsACLUser runs every entry point of a Semaphore as the user
// of d: uncontended and contended, a grant of several by push, a
// renewed lease, a waiter that gives up, a fixed lease that runs out,
// SetPermits, Close.
func runSemaphoreAsACLUser(a *aclCalls, d aclDeployment) {
	w, closeAll := newACLWorld(a, d)
	defer closeAll()
	ctx := context.Background()
	kind := queue.KindSemaphore

	// Uncontended; a try on a full semaphore.
	s1, s2 := w.c1.Semaphore("sem", 3), w.c2.Semaphore("sem", 3)
	h, err := s1.Acquire(ctx, 3)
	a.ok(err, "uncontended Acquire")
	first, err := s1.Token(h)
	a.ok(err, "Token")
	_, err = s2.TryAcquire(ctx, 1)
	a.is(err, fairlock.ErrLocked, "TryAcquire of a full semaphore")
	a.ok(s1.Release(h), "Release")
	w.requireGone("sem", kind)

	// Two waiters of another Client granted together by one release.
	h, err = s1.Acquire(ctx, 3)
	a.ok(err, "Acquire")
	two := lockAsync(ctx, permitsOf{s2, 2})
	w.waitQueued("sem", kind, 1, two)
	one := lockAsync(ctx, permitsOf{s2, 1})
	w.waitQueued("sem", kind, 2, two, one)
	a.ok(s1.Release(h), "Release that grants two")
	for _, g := range []context.Context{w.granted(two, "Acquire of 2 by push"), w.granted(one, "Acquire of 1 by push")} {
		tok, err := s2.Token(g)
		a.ok(err, "Token")
		require.Greater(a.t, tok, first)
		a.ok(s2.Release(g), "Release")
	}
	w.requireGone("sem", kind)

	// The watchdog renews a hold.
	renewed := w.c3.Semaphore("renew", 1)
	rctx, err := renewed.Acquire(ctx, 1)
	a.ok(err, "Acquire")
	w.requireRenewed("renew", kind)
	a.ok(rctx.Err(), "the hold is live")
	a.ok(renewed.Release(rctx), "Release")

	// A waiter that gives up leaves nothing.
	blocker, err := s1.Acquire(ctx, 3)
	a.ok(err, "Acquire")
	wctx, cancel := context.WithCancel(ctx)
	gaveUp := lockAsync(wctx, permitsOf{s2, 1})
	w.waitQueued("sem", kind, 1, gaveUp)
	entry := w.lineHead("sem", kind)
	cancel()
	r := awaitResult(a.t, gaveUp)
	a.is(r.err, context.Canceled, "Acquire that gives up")
	w.requireLeft("sem", kind, entry)
	a.ok(s1.Release(blocker), "Release")
	w.requireGone("sem", kind)

	// A fixed lease runs out.
	fixed := w.c1.Semaphore("fixed", 1, fairlock.WithFixedLease(500*time.Millisecond))
	fctx, err := fixed.Acquire(ctx, 1)
	a.ok(err, "Acquire with a fixed lease")
	awaitDone(a.t, fctx)
	a.is(context.Cause(fctx), fairlock.ErrLeaseLost, "a fixed lease's end")
	w.requireGone("fixed", kind)

	// SetPermits grants a waiter that now fits.
	small := w.c1.Semaphore("resize", 2)
	held, err := small.Acquire(ctx, 2)
	a.ok(err, "Acquire")
	waiter := lockAsync(ctx, permitsOf{w.c2.Semaphore("resize", 2), 1})
	w.waitQueued("resize", kind, 1, waiter)
	a.ok(small.SetPermits(ctx, 3), "SetPermits")
	got := w.granted(waiter, "Acquire granted by SetPermits, by push")
	a.ok(w.c2.Semaphore("resize", 3).Release(got), "Release")
	a.ok(small.Release(held), "Release")
	w.requireGone("resize", kind)

	w.requireUnsubscribed()

	// Close: a waiting Acquire returns ErrClosed, a live hold is released.
	live, err := s2.Acquire(ctx, 1)
	a.ok(err, "Acquire")
	blocker, err = s1.Acquire(ctx, 2)
	a.ok(err, "Acquire")
	closing := lockAsync(ctx, permitsOf{s2, 1})
	w.waitQueued("sem", kind, 1, closing)
	a.ok(w.c2.Close(), "Close")
	a.is(awaitResult(a.t, closing).err, fairlock.ErrClosed, "Acquire at Close")
	awaitDone(a.t, live)
	a.is(context.Cause(live), fairlock.ErrClosed, "a hold at Close")
	a.ok(s1.Release(blocker), "Release")
	w.requireGone("sem", kind)
	w.requireNoRefusal()
}

// runRWMutexAsACLUser runs every entry point of a RWMutex as the user of
// d: a writer, readers together, readers granted together by push
// behind a writer, re-entry, a downgrade, a renewed lease, a waiter that
// gives up, a fixed lease that runs out, Close.
func runRWMutexAsACLUser(a *aclCalls, d aclDeployment) {
	w, closeAll := newACLWorld(a, d)
	defer closeAll()
	ctx := context.Background()
	kind := queue.KindRWMutex

	rw1, rw2 := w.c1.RWMutex("rw"), w.c2.RWMutex("rw")
	wctx, err := rw1.Lock(ctx)
	a.ok(err, "uncontended Lock")
	first, err := rw1.Token(wctx)
	a.ok(err, "Token")
	_, err = rw2.TryRLock(ctx)
	a.is(err, fairlock.ErrLocked, "TryRLock while a writer holds")
	// Two readers of another Client wait, and the Unlock grants both.
	r1 := lockAsync(ctx, readerOf{rw2})
	w.waitQueued("rw", kind, 1, r1)
	r2 := lockAsync(ctx, readerOf{rw2})
	w.waitQueued("rw", kind, 2, r1, r2)
	a.ok(rw1.Unlock(wctx), "Unlock that grants two readers")
	g1, g2 := w.granted(r1, "RLock by push"), w.granted(r2, "RLock by push")
	tok, err := rw2.Token(g1)
	a.ok(err, "Token")
	require.Greater(a.t, tok, first)
	_, err = rw1.TryLock(ctx)
	a.is(err, fairlock.ErrLocked, "TryLock while readers hold")
	// A writer waits for both readers.
	writer := lockAsync(ctx, rw2)
	w.waitQueued("rw", kind, 1, writer)
	a.ok(rw2.RUnlock(g1), "RUnlock")
	a.ok(rw2.RUnlock(g2), "RUnlock that grants the writer")
	wctx = w.granted(writer, "Lock by push")

	// Re-entry, a read level under the write hold, and a downgrade.
	inner, err := rw2.Lock(wctx)
	a.ok(err, "Lock re-entered")
	rctx, err := rw2.RLock(inner)
	a.ok(err, "RLock under the write hold")
	a.ok(rw2.Unlock(inner), "Unlock of the inner level")
	a.ok(rw2.Unlock(rctx), "Unlock of the last write level: a downgrade")
	a.ok(rctx.Err(), "the read hold goes on")
	_, err = rw2.Lock(rctx)
	a.is(err, fairlock.ErrWouldDeadlock, "Lock under a read hold")
	a.ok(rw2.RUnlock(rctx), "RUnlock")
	w.requireGone("rw", kind)

	// The watchdog renews a hold.
	renewed := w.c3.RWMutex("renew")
	hctx, err := renewed.Lock(ctx)
	a.ok(err, "Lock")
	w.requireRenewed("renew", kind)
	a.ok(hctx.Err(), "the hold is live")
	a.ok(renewed.Unlock(hctx), "Unlock")

	// A waiter that gives up leaves nothing.
	blocker, err := rw1.Lock(ctx)
	a.ok(err, "Lock")
	gctx, cancel := context.WithCancel(ctx)
	gaveUp := lockAsync(gctx, readerOf{rw2})
	w.waitQueued("rw", kind, 1, gaveUp)
	entry := w.lineHead("rw", kind)
	cancel()
	a.is(awaitResult(a.t, gaveUp).err, context.Canceled, "RLock that gives up")
	w.requireLeft("rw", kind, entry)
	a.ok(rw1.Unlock(blocker), "Unlock")
	w.requireGone("rw", kind)

	// A fixed lease runs out.
	fixed := w.c1.RWMutex("fixed", fairlock.WithFixedLease(500*time.Millisecond))
	fctx, err := fixed.Lock(ctx)
	a.ok(err, "Lock with a fixed lease")
	awaitDone(a.t, fctx)
	a.is(context.Cause(fctx), fairlock.ErrLeaseLost, "a fixed lease's end")
	w.requireGone("fixed", kind)

	w.requireUnsubscribed()

	// Close: a waiting Lock returns ErrClosed, a live hold is released.
	live, err := rw2.RLock(ctx)
	a.ok(err, "RLock")
	closing := lockAsync(ctx, rw2)
	w.waitQueued("rw", kind, 1, closing)
	a.ok(w.c2.Close(), "Close")
	a.is(awaitResult(a.t, closing).err, fairlock.ErrClosed, "Lock at Close")
	awaitDone(a.t, live)
	a.is(context.Cause(live), fairlock.ErrClosed, "a hold at Close")
	w.requireGone("rw", kind)
	w.requireNoRefusal()
}

// weightedScenarios are the scenarios of the weighted locks' ACL tests.
var weightedScenarios = []struct {
	name string
	run  func(a *aclCalls, d aclDeployment)
}{
	{"Semaphore", runSemaphoreAsACLUser},
	{"RWMutex", runRWMutexAsACLUser},
}
