package fairlock_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock"
)

// timedResult is what a background Lock call ended with, and when it
// returned.
type timedResult struct {
	result
	at time.Time
}

// lockTimed calls m.Lock(ctx) in a goroutine, and notes when it returned.
func lockTimed(ctx context.Context, m *fairlock.Mutex) <-chan timedResult {
	ch := make(chan timedResult, 1)
	go func() {
		lctx, err := m.Lock(ctx)
		ch <- timedResult{result{lctx, err}, time.Now()}
	}()
	return ch
}

// requireWholeCalls checks the events one Client delivered, in the order
// it delivered them: At never goes back, and each call's events come in
// the order a call meets them (EventWaitStarted, then EventQueued or EventPolled, then
// EventGranted or EventWaitEnded, then for a grant EventHoldEnded), none missing between
// the first and the last. It returns how many calls began.
func requireWholeCalls(t *testing.T, events []fairlock.Event) int {
	t.Helper()
	step := map[fairlock.EventKind]int{
		fairlock.EventWaitStarted: 0, fairlock.EventQueued: 1, fairlock.EventPolled: 1,
		fairlock.EventGranted: 2, fairlock.EventWaitEnded: 2, fairlock.EventHoldEnded: 3,
	}
	at := map[string]int{} // each call's step
	for i, e := range events {
		if i > 0 {
			require.False(t, e.At.Before(events[i-1].At), "event %d (%v) is older than the one before it", i, e.Kind)
		}
		if e.Call == "" {
			continue // a re-entry's
		}
		s, ok := step[e.Kind]
		require.True(t, ok, "event %d: unexpected %v", i, e.Kind)
		last, seen := at[e.Call]
		switch {
		case !seen:
			require.Equal(t, fairlock.EventWaitStarted, e.Kind, "event %d: the first event of call %s", i, e.Call)
		case e.Kind == fairlock.EventHoldEnded:
			require.Equal(t, 2, last, "event %d: a hold ends after its grant", i)
		default:
			require.GreaterOrEqual(t, s, last, "event %d: %v of call %s after step %d", i, e.Kind, e.Call, last)
			require.Less(t, last, 2, "event %d: %v of call %s after its end", i, e.Kind, e.Call)
		}
		at[e.Call] = s
	}
	for call, s := range at {
		require.GreaterOrEqual(t, s, 2, "call %s never ended", call)
	}
	return len(at)
}

// recorded is the events an Observer took, in order, and the value of
// the requestTag and Err of each one's context.
type recorded struct {
	mu     sync.Mutex
	events []fairlock.Event
	tags   []any
	errs   []error
}

func (r *recorded) add(ctx context.Context, e fairlock.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
	r.tags = append(r.tags, ctx.Value(requestTag{}))
	r.errs = append(r.errs, ctx.Err())
}

func (r *recorded) all() []fairlock.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

// An Observer that takes 50 ms per event does not slow the lock path:
// Lock returns as soon as a release hands it the lock, not after the
// Observer has seen the grant, and the events its queue cannot hold are
// dropped and counted, whole calls at a time.
func TestASlowObserverDoesNotSlowTheHandOver(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const slow = 50 * time.Millisecond
	var seen [2]recorded
	clients := make([]*fairlock.Client, 2)
	mutexes := make([]*fairlock.Mutex, 2)
	for i := range clients {
		o := fairlock.ObserverFunc(func(ctx context.Context, ev fairlock.Event) {
			time.Sleep(slow)
			seen[i].add(ctx, ev)
		})
		clients[i] = e.client(fairlock.WithObserver(o), fairlock.WithObserverQueue(8))
		mutexes[i] = clients[i].Mutex("slow")
	}
	ctx := context.Background()
	held, err := mutexes[0].Lock(ctx)
	require.NoError(t, err)

	// The two Clients hand the lock to each other: each round, one holds
	// and the other waits in line, then the holder unlocks.
	const rounds = 40
	took := make([]time.Duration, 0, rounds)
	for i := range rounds {
		holder, waiter := mutexes[i%2], mutexes[(i+1)%2]
		w := lockTimed(ctx, waiter)
		e.waitQueued("slow", 1)
		unlocked := time.Now()
		require.NoError(t, holder.Unlock(held))
		var r timedResult
		select {
		case r = <-w:
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: no grant within 10s", i)
		}
		require.NoError(t, r.err, "round %d", i)
		took = append(took, r.at.Sub(unlocked))
		held = r.ctx
	}
	require.NoError(t, mutexes[rounds%2].Unlock(held))

	// With Observe on the lock path, every Lock would return at least
	// 50 ms after its hand-over (the Observer sleeps in its EventGranted).
	slices.Sort(took)
	require.Less(t, took[rounds/2], slow, "the median time from Unlock to the next Lock returning; all: %v", took)

	// Each Client waited 20 times, each wait at least 4 events, and its
	// Observer handles 20 a second: its queue of 8 overflowed.
	for i, c := range clients {
		require.NoError(t, c.Close())
		events := seen[i].all()
		require.Positive(t, c.DroppedEvents(), "client %d: dropped", i)
		calls := requireWholeCalls(t, events)
		t.Logf("client %d: %d events delivered (%d calls), %d dropped", i, len(events), calls, c.DroppedEvents())
	}
}

// A full queue drops a new call's events whole, and keeps those of the
// calls it queued the start of: here the Observer is stuck on the first
// event until the test lets it go, so a queue of 4 takes the first two
// calls (their ends are queued beyond 4) and drops the other eight, three
// events each. Once the Observer catches up, calls are queued again.
func TestAFullObserverQueueDropsWholeCallsAndCountsThem(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	gate := make(chan struct{})
	var seen recorded
	o := fairlock.ObserverFunc(func(ctx context.Context, ev fairlock.Event) {
		<-gate
		seen.add(ctx, ev)
	})
	c := e.client(fairlock.WithObserver(o), fairlock.WithObserverQueue(4))
	m := c.Mutex("full")
	ctx := context.Background()
	cycle := func() {
		hctx, err := m.Lock(ctx)
		require.NoError(t, err)
		require.NoError(t, m.Unlock(hctx))
	}
	const calls = 10
	for range calls {
		cycle()
	}
	require.Equal(t, uint64(3*(calls-2)), c.DroppedEvents(), "eight calls of three events each")

	close(gate)
	whole := []fairlock.EventKind{fairlock.EventWaitStarted, fairlock.EventGranted, fairlock.EventHoldEnded}
	require.Eventually(t, func() bool { return len(seen.all()) == 2*len(whole) }, 10*time.Second, time.Millisecond)
	cycle()
	require.NoError(t, c.Close())
	require.Equal(t, uint64(3*(calls-2)), c.DroppedEvents(), "nothing dropped once the Observer caught up")
	events := seen.all()
	require.Equal(t, 3, requireWholeCalls(t, events))
	require.Equal(t, slices.Concat(whole, whole, whole), kinds(events))
}

// Events reach the Observer in the order the Client reported them, from
// many goroutines at once: each call's in the order it met them, the
// grants of a lock in the order of their fencing tokens, and At never
// going back. The Observer is slowed a little so that a backlog forms.
func TestObserverEventsArriveInOrder(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var seen recorded
	o := fairlock.ObserverFunc(func(ctx context.Context, ev fairlock.Event) {
		time.Sleep(50 * time.Microsecond)
		seen.add(ctx, ev)
	})
	c := e.client(fairlock.WithObserver(o), fairlock.WithObserverQueue(1<<16))
	names := []string{"order-a", "order-b"}
	const goroutines, each = 6, 15
	var wg sync.WaitGroup
	for g := range goroutines {
		m := c.Mutex(names[g%len(names)])
		wg.Go(func() {
			for i := range each {
				ctx := context.WithValue(context.Background(), requestTag{}, fmt.Sprint(g, "/", i))
				hctx, err := m.Lock(ctx)
				if !assertNoError(t, err) {
					return
				}
				if inner, err := m.Lock(hctx); assertNoError(t, err) { // a re-entry
					assertNoError(t, m.Unlock(inner))
				}
				assertNoError(t, m.Unlock(hctx))
			}
		})
	}
	wg.Wait()
	require.NoError(t, c.Close())
	require.Zero(t, c.DroppedEvents())

	events := seen.all()
	require.Equal(t, goroutines*each, requireWholeCalls(t, events))
	tokens := map[string]int64{}
	tags := map[string]any{} // each call's
	for i, ev := range events {
		if ev.Kind == fairlock.EventGranted && ev.Grant != fairlock.GrantReentry {
			require.Greater(t, ev.Token, tokens[ev.Lock], "event %d: the grants of %s in token order", i, ev.Lock)
			tokens[ev.Lock] = ev.Token
		}
		require.NotNil(t, seen.tags[i], "event %d (%v) carries the values of its call's context", i, ev.Kind)
		if ev.Call != "" {
			if tag, ok := tags[ev.Call]; ok {
				require.Equal(t, tag, seen.tags[i], "event %d: every event of a call carries its values", i)
			}
			tags[ev.Call] = seen.tags[i]
		}
	}
}

// The context an event is delivered with keeps the values of the call's,
// and says whether that had ended when the event happened, whatever
// became of it after: here the Observer is held back until the calls
// have returned and their contexts are cancelled.
func TestTheObserversContextIsTheCallsAsItWasAtTheEvent(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	gate := make(chan struct{})
	var seen recorded
	o := fairlock.ObserverFunc(func(ctx context.Context, ev fairlock.Event) {
		<-gate
		seen.add(ctx, ev)
	})
	holder := e.client().Mutex("ctx")
	m := e.client(fairlock.WithObserver(o)).Mutex("ctx")

	// A grant, to a call whose context is cancelled once it returned.
	granted, cancel := context.WithCancel(context.WithValue(context.Background(), requestTag{}, "granted"))
	hctx, err := m.Lock(granted)
	require.NoError(t, err)
	cancel()
	require.NoError(t, m.Unlock(hctx))
	// A call that gives up at its deadline.
	hctx, err = holder.Lock(context.Background())
	require.NoError(t, err)
	gaveUp, stop := context.WithTimeout(context.WithValue(context.Background(), requestTag{}, "gave up"), 500*time.Millisecond)
	defer stop()
	_, err = m.Lock(gaveUp)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.NoError(t, holder.Unlock(hctx))

	close(gate)
	var ended int
	require.Eventually(t, func() bool {
		ended = 0
		for _, ev := range seen.all() {
			if ev.Kind == fairlock.EventWaitEnded {
				ended++
			}
		}
		return ended == 1
	}, 10*time.Second, time.Millisecond)
	seen.mu.Lock()
	defer seen.mu.Unlock()
	for i, ev := range seen.events {
		switch {
		case ev.Kind == fairlock.EventWaitEnded:
			require.Equal(t, "gave up", seen.tags[i])
			require.ErrorIs(t, seen.errs[i], context.DeadlineExceeded, "the call's context had ended")
		case seen.tags[i] == "granted":
			require.NoError(t, seen.errs[i], "%v: the call's context was live at the event, cancelled only after", ev.Kind)
		default:
			require.Equal(t, "gave up", seen.tags[i], "%v", ev.Kind)
			if ev.Kind == fairlock.EventWaitStarted {
				require.NoError(t, seen.errs[i], "the call began well before its deadline")
			}
		}
	}
}

// Close delivers what is queued until its bound (one call timeout, here
// 300ms) and drops the rest, counted: every event is either delivered or
// counted, and Close returns about the bound later, not after the slow
// Observer has seen everything.
func TestCloseDeliversWhatItCanWithinItsBoundAndCountsTheRest(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const slow = 50 * time.Millisecond
	var seen recorded
	o := fairlock.ObserverFunc(func(ctx context.Context, ev fairlock.Event) {
		time.Sleep(slow)
		seen.add(ctx, ev)
	})
	c := e.client(fairlock.WithObserver(o), fairlock.WithCallTimeout(300*time.Millisecond))
	m := c.Mutex("close")
	const calls = 40 // 120 events: 6 s of the Observer's time
	for range calls {
		hctx, err := m.Lock(context.Background())
		require.NoError(t, err)
		require.NoError(t, m.Unlock(hctx))
	}
	start := time.Now()
	require.NoError(t, c.Close())
	closing := time.Since(start)
	delivered := len(seen.all())
	require.Equal(t, uint64(3*calls), uint64(delivered)+c.DroppedEvents(), "every event delivered or counted")
	require.Positive(t, c.DroppedEvents())
	require.Less(t, closing, 3*time.Second, "Close waits for its bound and one Observe call, not for every event")

	// Nothing reaches the Observer once Close has returned.
	_, err := m.Lock(context.Background())
	require.ErrorIs(t, err, fairlock.ErrClosed)
	require.Equal(t, delivered, len(seen.all()))
}

// With no queue (size 0) the Observer is called on the goroutine of the
// step it reports, as a test harness may need: every event of a call has
// reached it when the call returns.
func TestAnObserverWithoutAQueueSeesEachEventBeforeTheCallReturns(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var seen recorded
	c := e.client(fairlock.WithObserver(fairlock.ObserverFunc(seen.add)), fairlock.WithObserverQueue(0))
	m := c.Mutex("inline")
	hctx, err := m.Lock(context.Background())
	require.NoError(t, err)
	require.Equal(t, []fairlock.EventKind{fairlock.EventWaitStarted, fairlock.EventGranted}, kinds(seen.all()))
	require.NoError(t, m.Unlock(hctx))
	require.Equal(t, []fairlock.EventKind{fairlock.EventWaitStarted, fairlock.EventGranted, fairlock.EventHoldEnded}, kinds(seen.all()))
	require.NoError(t, c.Close())
	require.Zero(t, c.DroppedEvents())
}
