package fairlock_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock"
)

// requireLocked asserts whether each lock name is held, as any Client
// sees it.
func (e *env) requireLocked(want bool, names ...string) {
	e.t.Helper()
	c := e.client()
	for _, name := range names {
		locked, err := c.Mutex(name).IsLocked(context.Background())
		require.NoError(e.t, err)
		require.Equal(e.t, want, locked, "is %s locked", name)
	}
}

// requireNoTickets asserts that no ticket of a MultiLock is left in Redis
// under the env's prefix.
func (e *env) requireNoTickets() {
	e.t.Helper()
	var left []string
	iter := e.rdb.Scan(context.Background(), 0, e.prefix+":ticket:*", 100).Iterator()
	for iter.Next(context.Background()) {
		left = append(left, iter.Val())
	}
	require.NoError(e.t, iter.Err())
	require.Empty(e.t, left, "tickets left behind")
}

func TestMultiLockHoldsEveryNameUntilUnlock(t *testing.T) {
	multiLockHoldsEveryNameUntilUnlock(t, newEnv(t), "acct")
}

func multiLockHoldsEveryNameUntilUnlock(t *testing.T, e *env, base string) {
	bg := context.Background()
	names := []string{base + "-c", base + "-a", base + "-b"}
	c := e.client()
	ml := c.MultiLock(names)
	mctx, err := ml.Lock(bg)
	require.NoError(t, err)
	e.requireLocked(true, names...)
	for _, name := range names {
		_, err := e.client().Mutex(name).TryLock(bg)
		require.ErrorIs(t, err, fairlock.ErrLocked, name)
		tok, err := ml.Token(mctx, name)
		require.NoError(t, err)
		require.Positive(t, tok)
		same, err := c.Mutex(name).Token(mctx)
		require.NoError(t, err)
		require.Equal(t, tok, same, "the context carries the hold of %s as a Mutex's", name)
	}
	require.NoError(t, mctx.Err())

	require.NoError(t, ml.Unlock(mctx))
	requireDone(t, mctx, time.Second)
	e.requireLocked(false, names...)
	for _, name := range names {
		e.requireClean(name)
	}
	require.ErrorIs(t, ml.Unlock(mctx), fairlock.ErrNotHeld)
}

func TestMultiLockNamesAreTakenOnceInKeyOrder(t *testing.T) {
	e := newEnv(t)
	ml := e.client().MultiLock([]string{"b", "a b", "a", "b", "a"})
	// Keys end "{a b}", "{a}", "{b}": ' ' sorts before '}'.
	require.Equal(t, []string{"a b", "a", "b"}, ml.Names())
	mctx, err := ml.Lock(context.Background())
	require.NoError(t, err)
	n, err := e.client().Mutex("b").HoldCount(mctx)
	require.NoError(t, err)
	require.Equal(t, 1, n, "a name given twice is taken once")
	require.NoError(t, ml.Unlock(mctx))
	e.requireLocked(false, "a", "b", "a b")
}

func TestMultiLockBadInput(t *testing.T) {
	e := newEnv(t)
	c := e.client()
	bg := context.Background()
	for _, names := range [][]string{nil, {}, {"ok", ""}, {"ok", "x}"}, {string([]byte{0xff})}} {
		ml := c.MultiLock(names)
		_, err := ml.Lock(bg)
		require.ErrorIs(t, err, fairlock.ErrInvalidName, "%q", names)
		_, err = ml.TryLock(bg)
		require.ErrorIs(t, err, fairlock.ErrInvalidName, "%q", names)
		require.ErrorIs(t, ml.Unlock(bg), fairlock.ErrInvalidName, "%q", names)
	}
	many := make([]string, fairlock.MaxMultiNames+1)
	for i := range many {
		many[i] = fmt.Sprintf("n%d", i)
	}
	_, err := c.MultiLock(many).Lock(bg)
	require.ErrorIs(t, err, fairlock.ErrTooManyNames)
	require.Contains(t, err.Error(), fmt.Sprint(fairlock.MaxMultiNames))
	ml := c.MultiLock(append(many[:fairlock.MaxMultiNames:fairlock.MaxMultiNames], many[0]))
	require.Len(t, ml.Names(), fairlock.MaxMultiNames, "duplicates do not count towards the limit")
	mctx, err := ml.TryLock(bg)
	require.NoError(t, err)
	require.NoError(t, ml.Unlock(mctx))

	ml = c.MultiLock([]string{"a", "b"})
	var nilCtx context.Context // the bad input
	_, err = ml.Lock(nilCtx)
	require.Error(t, err)
	_, err = ml.Token(bg, "c")
	require.ErrorIs(t, err, fairlock.ErrInvalidName)
	require.ErrorIs(t, ml.Unlock(bg), fairlock.ErrNotHeld)
	_, err = ml.Lock(fairlock.ContextWithOwner(bg, "has space"))
	require.ErrorIs(t, err, fairlock.ErrInvalidOwner)
	var nilML *fairlock.MultiLock
	_, err = nilML.Lock(bg)
	require.Error(t, err)
	require.Nil(t, nilML.Names())
	var nilClient *fairlock.Client
	_, err = nilClient.MultiLock([]string{"a"}).Lock(bg)
	require.Error(t, err)
}

func TestMultiLockTryLockIsAllOrNone(t *testing.T) {
	multiLockTryLockIsAllOrNone(t, newEnv(t), "stock")
}

func multiLockTryLockIsAllOrNone(t *testing.T, e *env, base string) {
	bg := context.Background()
	a, b := base+"-a", base+"-b"
	holder := e.client().Mutex(b)
	hctx, err := holder.Lock(bg)
	require.NoError(t, err)

	ml := e.client().MultiLock([]string{a, b})
	_, err = ml.TryLock(bg)
	require.ErrorIs(t, err, fairlock.ErrLocked)
	require.Contains(t, err.Error(), fmt.Sprintf("%q", b), "the error names the lock")
	e.requireLocked(false, a)
	require.Empty(t, e.queued(a))
	require.Empty(t, e.queued(b), "TryLock never queues")

	require.NoError(t, holder.Unlock(hctx))
	mctx, err := ml.TryLock(bg)
	require.NoError(t, err)
	e.requireLocked(true, a, b)
	require.NoError(t, ml.Unlock(mctx))
}

func TestMultiLockThatGivesUpHoldsNothing(t *testing.T) {
	multiLockThatGivesUpHoldsNothing(t, newEnv(t), "order")
}

func multiLockThatGivesUpHoldsNothing(t *testing.T, e *env, base string) {
	bg := context.Background()
	names := []string{base + "-1", base + "-2", base + "-3"}
	last := e.client().MultiLock(names).Names()[2]
	holder := e.client().Mutex(last)
	hctx, err := holder.Lock(bg)
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(bg, 300*time.Millisecond)
	defer cancel()
	mctx, err := e.client().MultiLock(names).Lock(ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Nil(t, mctx)
	e.requireLocked(false, names[:2]...)
	for _, name := range names {
		e.requireClean(name)
	}
	e.requireNoTickets()
	require.NoError(t, holder.Unlock(hctx))
	e.requireLocked(false, names...)
}

// A MultiLock waits in each name's line: a holder of one name makes it
// wait, and callers behind it on a name are served after it. On one
// server it holds nothing while it waits.
func TestMultiLockWaitsInLineAndIsServedInOrder(t *testing.T) {
	multiLockWaitsInLineAndIsServedInOrder(t, newEnv(t), false)
}

// multiLockWaitsInLineAndIsServedInOrder: ordered says whether the
// MultiLock takes its names one after another (a Cluster, a Ring), and so
// holds a while it waits for b.
func multiLockWaitsInLineAndIsServedInOrder(t *testing.T, e *env, ordered bool) {
	bg := context.Background()
	holder := e.client().Mutex("b")
	hctx, err := holder.Lock(bg)
	require.NoError(t, err)

	ml := e.client().MultiLock([]string{"a", "b"})
	multi := lockAsync(bg, ml)
	e.waitQueued("b", 1)
	e.requireLocked(ordered, "a")
	single := lockAsync(bg, e.client().Mutex("a"))
	e.waitQueued("a", map[bool]int{true: 1, false: 2}[ordered])
	e.requireLocked(ordered, "a") // nobody passes the MultiLock

	require.NoError(t, holder.Unlock(hctx))
	r := await(t, multi, 10*time.Second)
	require.NoError(t, r.err)
	select {
	case s := <-single:
		t.Fatalf("the caller behind the MultiLock on a was served first: %v", s.err)
	case <-time.After(100 * time.Millisecond):
	}
	require.NoError(t, ml.Unlock(r.ctx))
	s := await(t, single, 10*time.Second)
	require.NoError(t, s.err)
	require.NoError(t, e.client().Mutex("a").Unlock(s.ctx))
}

// The oldest waiter is never passed: a younger MultiLock whose names are
// free waits behind an older one that shares a name with it.
func TestMultiLockTheOldestIsNeverPassed(t *testing.T) {
	e := newEnv(t)
	bg := context.Background()
	holder := e.client().Mutex("b")
	hctx, err := holder.Lock(bg)
	require.NoError(t, err)
	older := e.client().MultiLock([]string{"a", "b"})
	first := lockAsync(bg, older)
	e.waitQueued("b", 1)
	younger := e.client().MultiLock([]string{"a", "c"})
	second := lockAsync(bg, younger)
	e.waitQueued("a", 2)
	e.requireLocked(false, "a", "c")

	require.NoError(t, holder.Unlock(hctx))
	r := await(t, first, 10*time.Second)
	require.NoError(t, r.err)
	e.requireLocked(false, "c")
	require.NoError(t, older.Unlock(r.ctx))
	r = await(t, second, 10*time.Second)
	require.NoError(t, r.err)
	require.NoError(t, younger.Unlock(r.ctx))
}

// Callers whose sets overlap, given in any order, and single-name callers
// of the same names, all finish: nobody deadlocks, and no name is ever
// held by two of them at once.
func TestMultiLockOverlappingSetsNeverDeadlock(t *testing.T) {
	multiLockOverlappingSetsNeverDeadlock(t, newEnv(t), "n")
}

func multiLockOverlappingSetsNeverDeadlock(t *testing.T, e *env, base string) {
	const (
		clients    = 3
		goroutines = 4 // per Client
		rounds     = 15
		nameCount  = 6
	)
	names := make([]string, nameCount)
	for i := range names {
		names[i] = fmt.Sprintf("%s-%d", base, i)
	}
	var inside [nameCount]atomic.Int32
	var overlaps atomic.Int32
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, clients*goroutines)
	for range clients {
		c := e.client()
		for g := range goroutines {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(g), uint64(time.Now().UnixNano())))
				for range rounds {
					picked := rng.Perm(nameCount)[:1+rng.IntN(4)]
					set := make([]string, len(picked))
					for i, p := range picked {
						set[i] = names[p]
					}
					var lctx context.Context
					var err error
					var unlock func(context.Context) error
					if len(set) == 1 && g%2 == 0 {
						m := c.Mutex(set[0])
						lctx, err = m.Lock(ctx)
						unlock = m.Unlock
					} else {
						ml := c.MultiLock(set)
						lctx, err = ml.Lock(ctx)
						unlock = ml.Unlock
					}
					if err != nil {
						errs <- fmt.Errorf("lock %v: %w", set, err)
						return
					}
					for _, p := range picked {
						if inside[p].Add(1) != 1 {
							overlaps.Add(1)
						}
					}
					time.Sleep(time.Duration(rng.IntN(500)) * time.Microsecond)
					for _, p := range picked {
						inside[p].Add(-1)
					}
					if err := unlock(lctx); err != nil {
						errs <- fmt.Errorf("unlock %v: %w", set, err)
						return
					}
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	require.Zero(t, overlaps.Load(), "a name was held by two callers at once")
	for _, name := range names {
		e.requireClean(name)
	}
}

func TestMultiLockReentersTheNamesItsContextHolds(t *testing.T) {
	e := newEnv(t)
	bg := context.Background()
	c := e.client()
	a := c.Mutex("a")
	actx, err := a.Lock(bg)
	require.NoError(t, err)

	ml := c.MultiLock([]string{"a", "b"})
	mctx, err := ml.Lock(actx)
	require.NoError(t, err)
	n, err := a.HoldCount(mctx)
	require.NoError(t, err)
	require.Equal(t, 2, n, "a is re-entered")
	atok, err := a.Token(actx)
	require.NoError(t, err)
	mtok, err := ml.Token(mctx, "a")
	require.NoError(t, err)
	require.Equal(t, atok, mtok, "a re-entry keeps its hold's token")

	// A second Lock with the MultiLock's context re-enters both.
	inner, err := ml.Lock(mctx)
	require.NoError(t, err)
	n, err = c.Mutex("b").HoldCount(inner)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	require.NoError(t, ml.Unlock(inner))
	require.NoError(t, mctx.Err(), "an inner level's Unlock ends no hold")

	require.NoError(t, ml.Unlock(mctx))
	requireDone(t, mctx, time.Second)
	e.requireLocked(false, "b")
	n, err = a.HoldCount(actx)
	require.NoError(t, err)
	require.Equal(t, 1, n, "the hold taken before is kept")
	require.NoError(t, actx.Err())
	require.NoError(t, a.Unlock(actx))
	e.requireLocked(false, "a")
}

func TestMultiLockContextEndsWhenALeaseIsLost(t *testing.T) {
	e := newEnv(t)
	bg := context.Background()
	ml := e.client(fairlock.WithLease(300 * time.Millisecond)).MultiLock([]string{"a", "b"})
	mctx, err := ml.Lock(bg)
	require.NoError(t, err)
	derived, cancel := context.WithCancel(mctx)
	defer cancel()

	removed, err := e.client().Mutex("b").ForceUnlock(bg)
	require.NoError(t, err)
	require.True(t, removed)
	requireDone(t, mctx, 5*time.Second)
	requireDone(t, derived, time.Second)
	cause := context.Cause(mctx)
	require.ErrorIs(t, cause, fairlock.ErrLeaseLost)
	require.Contains(t, cause.Error(), `"b"`, "the cause names the lock")
	require.ErrorIs(t, context.Cause(derived), fairlock.ErrLeaseLost)

	err = ml.Unlock(mctx)
	require.ErrorIs(t, err, fairlock.ErrLeaseLost)
	e.requireLocked(false, "a", "b")
}

// A MultiLock that takes its names one after another (on a Cluster, a
// Ring) and loses a name it took while it waits for a later one gives
// up: it returns ErrLeaseLost naming that lock, and holds nothing.
func multiLockGivesUpWhenANameItTookIsLost(t *testing.T, e *env) {
	bg := context.Background()
	holder := e.client().Mutex("b")
	hctx, err := holder.Lock(bg)
	require.NoError(t, err)

	multi := lockAsync(bg, e.client(fairlock.WithLease(300*time.Millisecond)).MultiLock([]string{"a", "b"}))
	e.waitQueued("b", 1)
	removed, err := e.client().Mutex("a").ForceUnlock(bg)
	require.NoError(t, err)
	require.True(t, removed)
	r := await(t, multi, 5*time.Second)
	require.ErrorIs(t, r.err, fairlock.ErrLeaseLost)
	require.Contains(t, r.err.Error(), `"a"`)
	e.requireClean("b")
	require.NoError(t, holder.Unlock(hctx))
	e.requireLocked(false, "a", "b")
}

func TestMultiLockWaiterGetsErrClosedAndHoldsNothing(t *testing.T) {
	e := newEnv(t)
	bg := context.Background()
	holder := e.client().Mutex("b")
	hctx, err := holder.Lock(bg)
	require.NoError(t, err)

	c := e.client()
	multi := lockAsync(bg, c.MultiLock([]string{"a", "b"}))
	e.waitQueued("b", 1)
	require.NoError(t, c.Close())
	r := await(t, multi, 15*time.Second)
	require.ErrorIs(t, r.err, fairlock.ErrClosed)
	e.requireClean("b")
	e.requireLocked(false, "a")
	require.NoError(t, holder.Unlock(hctx))
}

func TestMultiLockUnlockOfAPartlyHeldContext(t *testing.T) {
	e := newEnv(t)
	bg := context.Background()
	c := e.client()
	ml := c.MultiLock([]string{"a", "b"})
	mctx, err := ml.Lock(bg)
	require.NoError(t, err)
	require.NoError(t, c.Mutex("a").Unlock(mctx))
	requireDone(t, mctx, time.Second) // one of its holds ended
	require.ErrorIs(t, context.Cause(mctx), context.Canceled, "an Unlock is no loss")

	err = ml.Unlock(mctx)
	require.ErrorIs(t, err, fairlock.ErrNotHeld)
	require.Contains(t, err.Error(), `"a"`, "the error names the lock not held")
	e.requireLocked(false, "a", "b")
}

// On one server a waiting MultiLock is woken by a push, not by its polls:
// with polls 10 s apart, a grant within a few seconds of the release was
// pushed. Its EventQueued event says where it stands in its longest line.
func TestMultiLockOnOneServerIsWokenByPush(t *testing.T) {
	e := newEnv(t)
	bg := context.Background()
	holder := e.client().Mutex("b")
	hctx, err := holder.Lock(bg)
	require.NoError(t, err)
	var queued atomic.Int32
	var mu sync.Mutex
	var waitLocks [][]string // the Locks of each wait event
	c := e.client(fairlock.WithWaiterTTL(30*time.Second), fairlock.WithObserver(fairlock.ObserverFunc(func(_ context.Context, ev fairlock.Event) {
		switch ev.Kind {
		case fairlock.EventQueued:
			queued.Store(int32(ev.Position))
			fallthrough
		case fairlock.EventWaitStarted, fairlock.EventGranted:
			mu.Lock()
			waitLocks = append(waitLocks, ev.Locks)
			mu.Unlock()
			if ev.Lock != "a,b" {
				t.Errorf("%v names lock %q", ev.Kind, ev.Lock)
			}
		}
	})))
	ml := c.MultiLock([]string{"a", "b"})
	multi := lockAsync(bg, ml)
	e.waitQueued("b", 1)
	require.Eventually(t, func() bool { return queued.Load() == 1 }, 5*time.Second, time.Millisecond)
	time.Sleep(50 * time.Millisecond) // past the first poll
	require.NoError(t, holder.Unlock(hctx))
	r := await(t, multi, 3*time.Second)
	require.NoError(t, r.err)
	for _, name := range []string{"a", "b"} {
		tok, err := ml.Token(r.ctx, name)
		require.NoError(t, err)
		require.Positive(t, tok)
	}
	require.NoError(t, ml.Unlock(r.ctx))
	e.requireNoTickets()
	require.NoError(t, c.Close()) // delivers every event still queued
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, waitLocks, 3, "WaitStarted, EventQueued, Granted")
	for _, locks := range waitLocks {
		require.Equal(t, []string{"a", "b"}, locks)
	}
}

// A pushed grant of a waiting MultiLock carries every name's token, so
// its Client holds them all at once: from its place in line to its grant
// it runs no script (a claim would be one), and each name's token is the
// one Redis gave it.
func TestAPushedMultiLockGrantIsHeldWithoutAPoll(t *testing.T) {
	t.Parallel()
	e, holder, hctx, c, scripts := countedBehindAHolder(t, "b")
	ml := c.MultiLock([]string{"a", "b", "c"})
	multi := lockAsync(context.Background(), ml)
	e.waitQueued("b", 1)
	queued := scripts.all()
	require.NoError(t, holder.Unlock(hctx))
	r := await(t, multi, 2*time.Second) // polls are 20s apart: pushed
	require.NoError(t, r.err)
	require.Equal(t, queued, scripts.all(), "no claim between the push and the grant")
	for _, name := range []string{"a", "b", "c"} {
		tok, err := ml.Token(r.ctx, name)
		require.NoError(t, err)
		held, err := e.rdb.HGet(context.Background(), e.keys(name).Lock, "token").Int64()
		require.NoError(t, err)
		require.Equal(t, held, tok, "the token of %q", name)
	}
	require.NoError(t, ml.Unlock(r.ctx))
	e.requireLocked(false, "a", "b", "c")
}

// An owner shared by several Clients (ContextWithOwner) that holds some
// of the names already re-enters them, as Lock would, and never waits for
// itself.
func TestMultiLockOfASharedOwnerReentersWhatItHoldsElsewhere(t *testing.T) {
	e := newEnv(t)
	bg := fairlock.ContextWithOwner(context.Background(), "job-7")
	a := e.client().Mutex("a")
	actx, err := a.Lock(bg)
	require.NoError(t, err)

	ml := e.client().MultiLock([]string{"a", "b", "c"})
	r := await(t, lockAsync(bg, ml), 5*time.Second)
	require.NoError(t, r.err)
	n, err := a.HoldCount(r.ctx)
	require.NoError(t, err)
	require.Equal(t, 2, n, "a is re-entered, not waited for")
	require.NoError(t, ml.Unlock(r.ctx))
	e.requireLocked(false, "b", "c")
	e.requireLocked(true, "a")
	require.NoError(t, a.Unlock(actx))
	e.requireLocked(false, "a")
}

// On one server a MultiLock's Unlock releases every name with one script
// call, which ends every hold before it hands any name over: a ticket
// that waits for two of the names is granted both by that one call, and
// a Mutex waiting for a third is handed it. With a deadline the Unlock
// runs its call on the Client's goroutine, still one call.
func TestMultiLockUnlockReleasesEveryNameInOneCall(t *testing.T) {
	for _, bounded := range []bool{false, true} {
		t.Run(fmt.Sprintf("deadline=%v", bounded), func(t *testing.T) {
			e, holder, hctx, c, scripts := countedBehindAHolder(t, "x")
			require.NoError(t, holder.Unlock(hctx))
			bg := context.Background()
			ml := c.MultiLock([]string{"a", "b", "c"})
			mctx, err := ml.Lock(bg)
			require.NoError(t, err)

			other := e.client(fairlock.WithWaiterTTL(time.Minute))
			ticket := lockAsync(bg, other.MultiLock([]string{"a", "b"}))
			single := lockAsync(bg, other.Mutex("c"))
			e.waitQueued("a", 1)
			e.waitQueued("b", 1)
			e.waitQueued("c", 1)

			before := scripts.all()
			uctx := mctx
			if bounded {
				var cancel context.CancelFunc
				uctx, cancel = context.WithTimeout(mctx, 10*time.Second)
				defer cancel()
			}
			require.NoError(t, ml.Unlock(uctx))
			require.Equal(t, before+1, scripts.all(), "one script call releases the three names")
			requireDone(t, mctx, time.Second)

			r := await(t, ticket, 2*time.Second)
			require.NoError(t, r.err)
			s := await(t, single, 2*time.Second)
			require.NoError(t, s.err)
			e.requireLocked(true, "a", "b", "c")
			require.NoError(t, other.MultiLock([]string{"a", "b"}).Unlock(r.ctx))
			require.NoError(t, other.Mutex("c").Unlock(s.ctx))
			e.requireLocked(false, "a", "b", "c")
			e.requireNoTickets()
		})
	}
}
