package fairlock_test

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/internal/redistest"
)

// recorder is an Observer that keeps every event.
type recorder struct {
	mu     sync.Mutex
	events []fairlock.Event
	tags   []any // the requestTag value of each event's context
}

// requestTag is a context key the tests set on a Lock call's context.
type requestTag struct{}

func (r *recorder) Observe(ctx context.Context, e fairlock.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
	r.tags = append(r.tags, ctx.Value(requestTag{}))
}

// tagsOf returns the requestTag values of the events of one lock.
func (r *recorder) tagsOf(lock string) []any {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []any
	for i, e := range r.events {
		if e.Lock == lock {
			out = append(out, r.tags[i])
		}
	}
	return out
}

// of returns the events of one lock, in order.
func (r *recorder) of(lock string) []fairlock.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []fairlock.Event
	for _, e := range r.events {
		if e.Lock == lock {
			out = append(out, e)
		}
	}
	return out
}

// kinds returns the kinds of events, EventPolled left out (their number
// depends on timing).
func kinds(events []fairlock.Event) []fairlock.EventKind {
	var out []fairlock.EventKind
	for _, e := range events {
		if e.Kind != fairlock.EventPolled {
			out = append(out, e.Kind)
		}
	}
	return out
}

// awaitEvent waits until the recorder has an event of lock for which
// match is true, and returns it.
func (r *recorder) awaitEvent(t *testing.T, lock string, match func(fairlock.Event) bool) fairlock.Event {
	t.Helper()
	var found fairlock.Event
	require.Eventually(t, func() bool {
		for _, e := range r.of(lock) {
			if match(e) {
				found = e
				return true
			}
		}
		return false
	}, 10*time.Second, 5*time.Millisecond, "no such event of %s; got %v", lock, kinds(r.of(lock)))
	return found
}

func TestObserverSeesAFreshGrantAReentryAndTheUnlock(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rec := &recorder{}
	m := e.client(fairlock.WithObserver(rec)).Mutex("fresh")
	ctx := context.WithValue(context.Background(), requestTag{}, "request-1")
	hctx, err := m.Lock(ctx)
	require.NoError(t, err)
	inner, err := m.Lock(hctx)
	require.NoError(t, err)
	require.NoError(t, m.Unlock(inner))
	token, err := m.Token(hctx)
	require.NoError(t, err)
	require.NoError(t, m.Unlock(hctx))

	rec.awaitEvent(t, "fresh", func(e fairlock.Event) bool { return e.Kind == fairlock.EventHoldEnded })
	ev := rec.of("fresh")
	require.Equal(t, []fairlock.EventKind{fairlock.EventWaitStarted, fairlock.EventGranted, fairlock.EventWaitStarted, fairlock.EventGranted, fairlock.EventHoldEnded}, kinds(ev))
	start, grant, reStart, reGrant, end := ev[0], ev[1], ev[2], ev[3], ev[4]
	require.True(t, start.Wait)
	require.NotEmpty(t, start.Call)
	require.NotEmpty(t, start.Owner)
	require.Equal(t, fairlock.GrantFresh, grant.Grant)
	require.Equal(t, token, grant.Token)
	require.Equal(t, start.Call, grant.Call)
	require.Equal(t, start.Owner, grant.Owner)
	require.Positive(t, grant.Waited)
	require.Equal(t, start.Owner, reStart.Owner)
	require.Equal(t, fairlock.GrantReentry, reGrant.Grant)
	require.Equal(t, token, reGrant.Token)
	require.Equal(t, fairlock.EndUnlocked, end.End)
	require.NoError(t, end.Err)
	require.Equal(t, start.Call, end.Call)
	require.Equal(t, token, end.Token)
	require.Positive(t, end.Held)
	for _, tag := range rec.tagsOf("fresh") {
		require.Equal(t, "request-1", tag, "every event carries the values of the caller's context")
	}
}

func TestObserverSeesAWaitInLineAndTheHandOver(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rec := &recorder{}
	holder := e.client().Mutex("line")
	waiter := e.client(fairlock.WithObserver(rec)).Mutex("line")
	ctx := context.Background()
	hctx, err := holder.Lock(ctx)
	require.NoError(t, err)

	before := time.Now()
	w := lockAsync(ctx, waiter)
	queued := rec.awaitEvent(t, "line", func(e fairlock.Event) bool { return e.Kind == fairlock.EventQueued })
	require.False(t, queued.Sent.Before(before))
	require.False(t, queued.Answered.Before(queued.Sent))
	require.Equal(t, 1, queued.Position, "first in line")
	// A second waiter, of another Client, joins behind it.
	second := e.client(fairlock.WithObserver(rec)).Mutex("line")
	sctx, stopSecond := context.WithCancel(ctx)
	w2 := lockAsync(sctx, second)
	behind := rec.awaitEvent(t, "line", func(e fairlock.Event) bool { return e.Kind == fairlock.EventQueued && e.Call != queued.Call })
	require.Equal(t, 2, behind.Position, "second in line")
	rec.awaitEvent(t, "line", func(e fairlock.Event) bool { return e.Kind == fairlock.EventPolled })
	require.NoError(t, holder.Unlock(hctx))
	r := await(t, w, 5*time.Second)
	require.NoError(t, r.err)

	grant := rec.awaitEvent(t, "line", func(e fairlock.Event) bool { return e.Kind == fairlock.EventGranted })
	require.Equal(t, fairlock.GrantHandOver, grant.Grant)
	require.Equal(t, queued.Call, grant.Call)
	token, err := waiter.Token(r.ctx)
	require.NoError(t, err)
	require.Equal(t, token, grant.Token)
	var first []fairlock.EventKind
	for _, ev := range rec.of("line") {
		if ev.Call == queued.Call && ev.Kind != fairlock.EventPolled {
			first = append(first, ev.Kind)
		}
	}
	require.Equal(t, []fairlock.EventKind{fairlock.EventWaitStarted, fairlock.EventQueued, fairlock.EventGranted}, first)
	stopSecond()
	require.ErrorIs(t, await(t, w2, 5*time.Second).err, context.Canceled)
	require.NoError(t, waiter.Unlock(r.ctx))
}

// A pushed hand-over reports how long the push took to arrive: here the
// waiter's Client reaches Redis through a proxy that delays every byte by
// 100ms each way, so the push arrives about 100ms after the release
// handed the lock over. A fresh grant reports none.
func TestObserverSeesTheLatencyOfAPushedHandOver(t *testing.T) {
	redistest.Slow(t)
	t.Parallel()
	e := newEnv(t)
	rec := &recorder{}
	holder := e.client(fairlock.WithObserver(rec)).Mutex("latency")
	c, p := e.proxied(&redis.Options{}, fairlock.WithObserver(rec))
	waiter := c.Mutex("latency")
	ctx := context.Background()
	hctx, err := holder.Lock(ctx)
	require.NoError(t, err)
	fresh := rec.awaitEvent(t, "latency", func(e fairlock.Event) bool { return e.Kind == fairlock.EventGranted })
	require.Equal(t, fairlock.GrantFresh, fresh.Grant)
	require.Zero(t, fresh.HandOver, "a fresh grant was not handed over")

	const oneWay = 100 * time.Millisecond
	p.SetLatency(oneWay)
	w := lockAsync(ctx, waiter)
	queued := rec.awaitEvent(t, "latency", func(e fairlock.Event) bool { return e.Kind == fairlock.EventQueued })
	require.NoError(t, holder.Unlock(hctx))
	r := await(t, w, 10*time.Second)
	require.NoError(t, r.err)
	grant := rec.awaitEvent(t, "latency", func(e fairlock.Event) bool { return e.Kind == fairlock.EventGranted && e.Call == queued.Call })
	require.Equal(t, fairlock.GrantHandOver, grant.Grant)
	require.GreaterOrEqual(t, grant.HandOver, oneWay/2, "the push spent about %v on its way", oneWay)
	require.Less(t, grant.HandOver, 2*oneWay+oneWay/2)
	require.Less(t, grant.HandOver, grant.Waited)
	p.SetLatency(0)
	require.NoError(t, waiter.Unlock(r.ctx))
}

func TestObserverSeesWaitsThatEndWithoutAGrant(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rec := &recorder{}
	holder := e.client().Mutex("busy")
	m := e.client(fairlock.WithObserver(rec)).Mutex("busy")
	ctx := context.Background()
	hctx, err := holder.Lock(ctx)
	require.NoError(t, err)

	_, err = m.TryLock(ctx)
	require.ErrorIs(t, err, fairlock.ErrLocked)
	dctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	_, err = m.Lock(dctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.NoError(t, holder.Unlock(hctx))

	var ended []fairlock.Event
	require.Eventually(t, func() bool {
		ended = nil
		for _, ev := range rec.of("busy") {
			if ev.Kind == fairlock.EventWaitEnded {
				ended = append(ended, ev)
			}
		}
		return len(ended) == 2
	}, 10*time.Second, 5*time.Millisecond, "two EventWaitEnded events; got %v", kinds(rec.of("busy")))
	require.False(t, ended[0].Wait, "TryLock")
	require.ErrorIs(t, ended[0].Err, fairlock.ErrLocked)
	require.True(t, ended[1].Wait, "Lock")
	require.ErrorIs(t, ended[1].Err, context.DeadlineExceeded)
	// The 200 ms deadline was set just before the call began.
	require.GreaterOrEqual(t, ended[1].Waited, 150*time.Millisecond)
}

func TestObserverSeesHoldsEndForEachCause(t *testing.T) {
	t.Parallel()
	e := newPrivateEnv(t)
	rec := &recorder{}
	c := e.client(fairlock.WithObserver(rec), fairlock.WithLease(300*time.Millisecond))
	other := e.client()
	ctx := context.Background()
	ended := func(lock string) fairlock.Event {
		return rec.awaitEvent(t, lock, func(e fairlock.Event) bool { return e.Kind == fairlock.EventHoldEnded })
	}

	// Lost: another Client removes the hold; the next renewal finds it gone.
	_, err := c.Mutex("lost").Lock(ctx)
	require.NoError(t, err)
	_, err = other.Mutex("lost").ForceUnlock(ctx)
	require.NoError(t, err)
	ev := ended("lost")
	require.Equal(t, fairlock.EndLeaseLost, ev.End)
	require.ErrorIs(t, ev.Err, fairlock.ErrLeaseLost)

	// Ran out: a fixed lease left unlocked.
	_, err = c.Mutex("fixed", fairlock.WithFixedLease(100*time.Millisecond)).Lock(ctx)
	require.NoError(t, err)
	ev = ended("fixed")
	require.Equal(t, fairlock.EndLeaseRanOut, ev.End)
	require.ErrorIs(t, ev.Err, fairlock.ErrLeaseLost)

	// Renewals fail while the server is stopped, until the lease is lost.
	_, err = c.Mutex("stopped").Lock(ctx)
	require.NoError(t, err)
	resume := redistest.Pause(t, e.rdb.(*redis.Client))
	failed := rec.awaitEvent(t, "stopped", func(e fairlock.Event) bool { return e.Kind == fairlock.EventRenewalFailed })
	require.Error(t, failed.Err)
	ev = ended("stopped")
	require.Equal(t, fairlock.EndLeaseLost, ev.End)
	resume()

	// Closed: a hold, and a Lock waiting behind another Client's hold.
	_, err = c.Mutex("closed").Lock(ctx)
	require.NoError(t, err)
	oh, err := other.Mutex("waited").Lock(ctx)
	require.NoError(t, err)
	w := lockAsync(ctx, c.Mutex("waited"))
	rec.awaitEvent(t, "waited", func(e fairlock.Event) bool { return e.Kind == fairlock.EventQueued })
	require.NoError(t, c.Close())
	require.ErrorIs(t, await(t, w, 5*time.Second).err, fairlock.ErrClosed)
	ev = ended("closed")
	require.Equal(t, fairlock.EndClosed, ev.End)
	require.ErrorIs(t, ev.Err, fairlock.ErrClosed)
	ev = rec.awaitEvent(t, "waited", func(e fairlock.Event) bool { return e.Kind == fairlock.EventWaitEnded })
	require.ErrorIs(t, ev.Err, fairlock.ErrClosed)
	require.NoError(t, other.Mutex("waited").Unlock(oh))
}

// TestAPanickingObserverBreaksNothing has the Observer panic at every
// event: every call still works, every event is still delivered (Close
// delivers those still queued), and the panic is logged once.
func TestAPanickingObserverBreaksNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	logs := &logRecorder{}
	calls := 0
	var mu sync.Mutex
	o := fairlock.ObserverFunc(func(context.Context, fairlock.Event) {
		mu.Lock()
		calls++
		mu.Unlock()
		panic("observer bug")
	})
	c := e.client(fairlock.WithObserver(o), fairlock.WithLogger(slog.New(logs)))
	m := c.Mutex("panics")
	ctx := context.Background()
	for range 3 {
		hctx, err := m.Lock(ctx)
		require.NoError(t, err)
		require.NoError(t, m.Unlock(hctx))
	}
	require.NoError(t, c.Close())
	require.Zero(t, c.DroppedEvents())
	mu.Lock()
	require.Equal(t, 9, calls, "every event was delivered: a start, a grant and an end per Lock")
	mu.Unlock()
	panics := slices.DeleteFunc(logs.all(), func(s string) bool {
		return !strings.Contains(s, "Observer panicked") || !strings.Contains(s, "observer bug")
	})
	require.Len(t, panics, 1, "logged once: %v", logs.all())
}

// TestObserverSeesThePubSubConnectionRebuilt cuts the Client's pub/sub
// connection while one of its Lock calls waits: the Client rebuilds it
// and reports EventReconnected.
func TestObserverSeesThePubSubConnectionRebuilt(t *testing.T) {
	t.Parallel()
	e := newPrivateEnv(t)
	rec := &recorder{}
	holder := e.client().Mutex("cut")
	waiter := e.client(fairlock.WithObserver(rec)).Mutex("cut")
	ctx := context.Background()
	hctx, err := holder.Lock(ctx)
	require.NoError(t, err)
	w := lockAsync(ctx, waiter)
	rec.awaitEvent(t, "cut", func(e fairlock.Event) bool { return e.Kind == fairlock.EventQueued })

	n, err := e.rdb.ClientKillByFilter(ctx, "TYPE", "pubsub").Result()
	require.NoError(t, err)
	require.GreaterOrEqual(t, n, int64(1), "the waiting Client's pub/sub connection (and the holder's, once its hold listens for a revocation)")
	rec.awaitEvent(t, "", func(e fairlock.Event) bool { return e.Kind == fairlock.EventReconnected })

	require.NoError(t, holder.Unlock(hctx))
	r := await(t, w, 5*time.Second)
	require.NoError(t, r.err)
	require.NoError(t, waiter.Unlock(r.ctx))
}

// A join whose answer is lost (the connection cut after Redis appended the
// entry) is reported all the same, by the poll that finds the entry in
// line: EventQueued, with Position 0 and Sent the first poll's send time.
func TestObserverReportsAJoinWhoseAnswerWasLost(t *testing.T) {
	t.Parallel()
	e := newPrivateEnv(t)
	ctx := context.Background()
	holder := e.client().Mutex("lost-join")
	hctx, err := holder.Lock(ctx)
	require.NoError(t, err)

	rec := &recorder{}
	c, p := e.proxied(&redis.Options{ReadTimeout: 300 * time.Millisecond}, fairlock.WithObserver(rec))
	m := c.Mutex("lost-join")
	// A first waiter keeps the Client's wake channel of the lock
	// subscribed: the next Lock's first call is then a poll that joins.
	first := lockAsync(ctx, m)
	rec.awaitEvent(t, "lost-join", func(ev fairlock.Event) bool { return ev.Kind == fairlock.EventQueued && ev.Position == 1 })

	p.LoseNextReply()
	sent := time.Now()
	second := lockAsync(ctx, m)
	e.waitQueued("lost-join", 2)
	joined := rec.awaitEvent(t, "lost-join", func(ev fairlock.Event) bool {
		return ev.Kind == fairlock.EventQueued && ev.Position == 0
	})
	require.Equal(t, 1, p.Lost(), "the join's answer was lost")
	require.False(t, joined.Sent.Before(sent), "Sent %v is the first poll's, after %v", joined.Sent, sent)
	require.True(t, joined.Answered.After(joined.Sent))

	require.NoError(t, holder.Unlock(hctx))
	for _, w := range []<-chan result{first, second} {
		r := await(t, w, 10*time.Second)
		require.NoError(t, r.err)
		require.NoError(t, m.Unlock(r.ctx))
	}
	require.NoError(t, c.Close()) // delivers every event still queued
	queued := 0
	for _, ev := range rec.of("lost-join") {
		if ev.Kind == fairlock.EventQueued {
			queued++
		}
	}
	require.Equal(t, 2, queued, "each waiter's join reported once")
}
