package fairlock

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fairlock/fairlock/fair"
)

// defaultObserverQueue is the size of a Client's event queue without
// WithObserverQueue.
const defaultObserverQueue = 1024

// eventQueue hands a Client's events to its Observer. With a size above 0
// the step that reports an event only queues it, and one goroutine of the
// Client, started at the first event and stopped by Close, calls the
// Observer with each in turn; with size 0 the Observer is called on the
// step's goroutine. A panic in the Observer is recovered and logged once.
//
// The queue holds up to size events, the one the Observer is handling
// included. When it is full, a call's EventWaitStarted is dropped, and with it
// every later event of that call and of its holds; the events that end a
// call or a hold whose EventWaitStarted was queued (EventGranted, EventWaitEnded,
// EventHoldEnded) are queued all the same, so that the Observer sees every
// call and hold it saw begin come to an end. Any other event is dropped
// when the queue is full. So the queue outgrows size by at most the ends
// still to come of the calls and holds in progress when it filled.
type eventQueue struct {
	o    Observer
	log  *slog.Logger
	size int // 0: no queue, the Observer is called on the step's goroutine

	dropped   atomic.Uint64 // events not delivered: the queue was full, or the Client closed
	cut       atomic.Bool   // set when Close's bound has passed: what is left is dropped
	dropOnce  sync.Once     // the first drop is logged
	panicOnce sync.Once     // the first panic is logged

	mu sync.Mutex
	// cond is signalled when an event is queued, broadcast when Close
	// starts and when the last of calls returns; its L is &mu.
	cond sync.Cond
	// ring holds the events queued and not yet handed to the Observer,
	// n of them from head, oldest first; it grows as needed and is kept.
	// Guarded by mu.
	ring    []queued
	head, n int
	busy    bool // the Observer is handling an event; guarded by mu
	calls   int  // Observe calls under way on the steps' goroutines (size 0); guarded by mu
	// skipped are the calls whose EventWaitStarted was dropped, by Event.Call:
	// -1 until their grant, then the number of their holds still to end.
	// Guarded by mu.
	skipped map[string]int
	started bool          // the goroutine was started; guarded by mu
	closed  bool          // Close has started: no event is queued any more; guarded by mu
	done    chan struct{} // closed when the goroutine has returned, or at Close when it never started
}

// queued is one event waiting for the Observer, with the context it is
// delivered with.
type queued struct {
	ctx context.Context
	e   Event
}

// newEventQueue returns the event queue of a Client with Observer o, nil
// for none.
func newEventQueue(o Observer, size int, log *slog.Logger) *eventQueue {
	if o == nil {
		return nil
	}
	q := &eventQueue{o: o, log: log, size: size, done: make(chan struct{})}
	q.cond.L = &q.mu
	return q
}

// hook returns the engine's Observe function for q, nil for a Client
// without an Observer.
func (q *eventQueue) hook() func(context.Context, fair.Event) {
	if q == nil {
		return nil
	}
	return q.report
}

// report takes an event from the engine: it queues it, or with no queue
// delivers it at once.
func (q *eventQueue) report(ctx context.Context, fe fair.Event) {
	if q.size == 0 {
		q.inline(settled(ctx), eventOf(fe))
	} else {
		q.enqueue(settled(ctx), eventOf(fe))
	}
}

// enqueue queues e, or drops it, and starts the goroutine at the first
// event.
func (q *eventQueue) enqueue(ctx context.Context, e Event) {
	q.mu.Lock()
	if q.closed || !q.admit(&e) {
		q.mu.Unlock()
		q.drop(1)
		return
	}
	// Read under mu, so that At never goes back along the queue.
	e.At = time.Now()
	q.push(queued{ctx: ctx, e: e})
	if !q.started {
		q.started = true
		go q.run()
	}
	q.cond.Signal()
	q.mu.Unlock()
}

// inline delivers e on the goroutine of the step that reported it, unless
// Close has started.
func (q *eventQueue) inline(ctx context.Context, e Event) {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		q.drop(1)
		return
	}
	q.calls++
	q.mu.Unlock()
	e.At = time.Now()
	q.deliver(ctx, e)
	q.mu.Lock()
	if q.calls--; q.calls == 0 {
		q.cond.Broadcast()
	}
	q.mu.Unlock()
}

// admit reports whether e is queued, and keeps skipped (see eventQueue).
// Called under mu.
func (q *eventQueue) admit(e *Event) bool {
	if left, ok := q.skipped[e.Call]; ok {
		switch {
		case e.Kind == EventWaitEnded:
			delete(q.skipped, e.Call)
		case e.Kind == EventGranted:
			q.skipped[e.Call] = max(1, len(e.Locks))
		case e.Kind == EventHoldEnded && left > 0:
			if left == 1 {
				delete(q.skipped, e.Call)
			} else {
				q.skipped[e.Call] = left - 1
			}
		}
		return false
	}
	full := q.pending() >= q.size
	switch e.Kind {
	case EventGranted, EventWaitEnded, EventHoldEnded:
		return true
	case EventWaitStarted:
		if full && e.Call != "" {
			if q.skipped == nil {
				q.skipped = make(map[string]int)
			}
			q.skipped[e.Call] = -1
		}
	}
	return !full
}

// pending returns how many events are queued or being handled. Called
// under mu.
func (q *eventQueue) pending() int {
	if q.busy {
		return q.n + 1
	}
	return q.n
}

// push appends it to the ring, growing it when full. Called under mu.
func (q *eventQueue) push(it queued) {
	if q.n == len(q.ring) {
		grown := make([]queued, max(16, 2*len(q.ring)))
		for i := range q.n {
			grown[i] = q.ring[(q.head+i)%len(q.ring)]
		}
		q.ring, q.head = grown, 0
	}
	q.ring[(q.head+q.n)%len(q.ring)] = it
	q.n++
}

// run is the goroutine that hands the queued events to the Observer, in
// order, until Close has started and nothing is left.
func (q *eventQueue) run() {
	defer close(q.done)
	q.mu.Lock()
	defer q.mu.Unlock()
	for {
		q.busy = false
		for q.n == 0 && !q.closed {
			q.cond.Wait()
		}
		if q.n == 0 {
			return
		}
		it := q.ring[q.head]
		q.ring[q.head] = queued{} // keeps no context alive
		q.head = (q.head + 1) % len(q.ring)
		q.n--
		q.busy = true
		q.mu.Unlock()
		if q.cut.Load() {
			q.drop(1)
		} else {
			q.deliver(it.ctx, it.e)
		}
		q.mu.Lock()
	}
}

// deliver calls the Observer, recovering from its panic.
func (q *eventQueue) deliver(ctx context.Context, e Event) {
	defer func() {
		if r := recover(); r != nil {
			q.panicOnce.Do(func() {
				q.log.Error("fairlock: the Observer panicked; its events go on, and this is logged once",
					"panic", fmt.Sprint(r), "event", e.Kind.String())
			})
		}
	}()
	q.o.Observe(ctx, e)
}

// drop counts n events that are not delivered, and logs the first.
func (q *eventQueue) drop(n uint64) {
	q.dropped.Add(n)
	q.dropOnce.Do(func() {
		q.log.Warn("fairlock: events are dropped: the Observer does not keep up with them, or the Client is closed; Client.DroppedEvents counts them, and this is logged once",
			"queue", q.size)
	})
}

// close stops the queue: no event is queued any more, the goroutine
// delivers what is left until by, drops the rest after that, and has
// returned when close returns, as has every Observe call under way. It
// is idempotent, and safe on a nil queue.
func (q *eventQueue) close(by time.Time) {
	if q == nil {
		return
	}
	q.mu.Lock()
	if !q.closed {
		q.closed = true
		if !q.started {
			close(q.done)
		}
		q.cond.Broadcast()
	}
	for q.calls > 0 {
		q.cond.Wait()
	}
	q.mu.Unlock()
	bound := time.AfterFunc(time.Until(by), func() { q.cut.Store(true) })
	defer bound.Stop()
	<-q.done
}

// settled returns the context an event reported with ctx is delivered
// with, which may be once the call has returned: ctx's values, and never
// a cancellation after the event. A ctx that had ended by then still says
// so: Done is closed and Err is its error, so that an Observer can tell a
// caller that gave up.
func settled(ctx context.Context) context.Context {
	if ctx.Done() == nil {
		return ctx // nothing cancels it: Background, or a hold's values
	}
	if err := ctx.Err(); err != nil {
		return endedContext{Context: context.WithoutCancel(ctx), err: err}
	}
	return context.WithoutCancel(ctx)
}

// endedContext is the values of a context that had ended with err.
type endedContext struct {
	context.Context
	err error
}

// closedDone is the Done channel of every endedContext.
var closedDone = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

func (c endedContext) Done() <-chan struct{} { return closedDone }
func (c endedContext) Err() error            { return c.err }

// DroppedEvents returns how many events the Client did not deliver to
// its Observer since New: those its queue could not hold (see
// WithObserverQueue), those still queued when the bound of Close passed,
// and those reported after Close. 0 for a Client without an Observer. A
// count that grows says the Observer is too slow for the Client's
// events, and that the figures it keeps undercount.
func (c *Client) DroppedEvents() uint64 {
	if c == nil || c.events == nil {
		return 0
	}
	return c.events.dropped.Load()
}
