package fair

import (
	"context"
	"errors"
	"time"

	"github.com/fairlock/fairlock/internal/errs"
	"github.com/fairlock/fairlock/queue"
)

// EventKind says what an Event reports.
type EventKind int

// The kinds of Event, in the order a Lock call and its hold meet them.
const (
	// EventWaitStarted: a Lock or TryLock call (or a re-entry) began.
	EventWaitStarted EventKind = iota + 1
	// EventQueued: a poll of a waiting Lock appended its entry to the
	// line, between Sent and Answered. Again if it lost its place and
	// joined anew. When the poll that joined was answered to nobody (its
	// reply lost) and a later one found the entry in line, that one
	// reports it: Sent is then the first poll's send time, and Position 0.
	EventQueued
	// EventPolled: a poll of a waiting Lock left it in line, its deadline
	// moved to a waiter TTL after it ran, between Sent and Answered.
	EventPolled
	// EventGranted: the call took the lock (Grant says how), Wait after
	// it began.
	EventGranted
	// EventWaitEnded: the call ended without the lock, Wait after it
	// began, with Err.
	EventWaitEnded
	// EventHoldEnded: a hold ended, Held after its grant, for End.
	EventHoldEnded
	// EventRenewalFailed: a renewal of a hold failed with Err; it is
	// tried again until the hold is declared lost.
	EventRenewalFailed
	// EventPrimaryMoved: the Client's pub/sub followed its primary to
	// another server (a failover).
	EventPrimaryMoved
	// EventReconnected: a pub/sub connection of the Client failed or went
	// quiet and was rebuilt; wake messages sent meanwhile may be lost,
	// and every waiter behind it polls at once.
	EventReconnected
)

// GrantKind says how a call was granted the lock.
type GrantKind int

const (
	// GrantFresh: granted without waiting in line.
	GrantFresh GrantKind = iota + 1
	// GrantHandOver: granted after waiting in line, handed over by a
	// release (pushed, or found by a poll).
	GrantHandOver
	// GrantReentry: one more level of a hold the caller had.
	GrantReentry
)

// EndKind says why a hold ended.
type EndKind int

const (
	// EndUnlocked: the last level was unlocked.
	EndUnlocked EndKind = iota + 1
	// EndLeaseLost: the lease was lost (renewals failed or found the hold
	// gone).
	EndLeaseLost
	// EndLeaseRanOut: a fixed lease ran out before Unlock.
	EndLeaseRanOut
	// EndClosed: the Client was closed.
	EndClosed
)

// Event is one step of a Lock call or of a hold, reported to the
// engine's Config.Observe. Which fields are set depends on Kind.
type Event struct {
	Kind EventKind
	Lock string // the lock's name; for a ticket, its locks' names joined with commas
	// Locks are, for the wait events of a Ticket, its locks' names in key
	// order; nil for a Mutex.
	Locks []string
	Owner string // owner id of the call or hold
	Call  string // the waiter id of the Lock call, unique to it; "" for a re-entry
	Wait  bool   // the call waits in line when it must (Lock); false for TryLock

	Grant GrantKind // EventGranted
	Token int64     // EventGranted, EventHoldEnded

	Sent, Answered time.Time // EventQueued, EventPolled
	Position       int       // EventQueued: the place in line it joined at, 1 for the head

	Waited time.Duration // EventGranted, EventWaitEnded: since the call began
	// HandOver, for EventGranted by a hand-over that was pushed with its
	// time, is the estimated time from the hand-over in Redis to the push
	// reaching this Client (see serverClock.latency), at least a µs;
	// else 0.
	HandOver time.Duration
	Held     time.Duration // EventHoldEnded: since the grant
	End      EndKind       // EventHoldEnded
	Err      error         // EventWaitEnded, EventRenewalFailed; EventHoldEnded: the cause, nil when unlocked
}

// observedHold is what the observer is told of a hold: when it was
// granted, and the values of the call that took it, for its events.
type observedHold struct {
	took time.Time
	ctx  context.Context
}

// observe reports e for a call made with ctx, when the engine has an
// observer. Building an Event costs nothing when it has none.
func (e *Engine) observe(ctx context.Context, ev Event) {
	if e.cfg.Observe != nil {
		e.cfg.Observe(ctx, ev)
	}
}

// observing reports whether the engine has an observer.
func (e *Engine) observing() bool { return e.cfg.Observe != nil }

// endKind maps the cause a hold ended with to its EndKind.
func endKind(cause error, ranOut bool) EndKind {
	switch {
	case cause == nil:
		return EndUnlocked
	case ranOut:
		return EndLeaseRanOut
	case errors.Is(cause, errs.ErrClosed):
		return EndClosed
	}
	return EndLeaseLost
}

// observeEnd reports the end of a Lock call that began at start: a grant
// of h, or err.
func (l *Mutex) observeEnd(ctx context.Context, req Request, entry string, start time.Time, h *Hold, err error) {
	observeEnd(l, ctx, req, entry, start, h, err)
}

// observeEnd reports the end of a Lock call in ln that began at start: a
// grant whose (first) hold is h, or err.
func observeEnd[G any](ln line[G], ctx context.Context, req Request, entry string, start time.Time, h *Hold, err error) {
	e := ln.engine()
	if !e.observing() {
		return
	}
	ev := Event{Lock: ln.name(), Locks: ln.names(), Owner: req.Owner, Call: queue.WaiterIDOf(entry), Wait: req.Wait, Waited: time.Since(start)}
	if err != nil {
		ev.Kind, ev.Err = EventWaitEnded, err
	} else {
		ev.Kind, ev.Grant, ev.Token = EventGranted, GrantFresh, h.token
		if h.waited {
			ev.Grant, ev.HandOver = GrantHandOver, h.handOver
		}
	}
	e.observe(ctx, ev)
}

// reentered runs enter, a re-entry of owner's hold of lock, between the
// two events an observer is told of it: WaitStarted, then Granted with
// GrantReentry and the hold's token, or WaitEnded with enter's error. A
// Hold's and a QHold's re-entries are reported alike through it.
func reentered(ctx context.Context, observe func(context.Context, Event), lock, owner string, token func() int64, enter func(context.Context) error) error {
	ev := Event{Kind: EventWaitStarted, Lock: lock, Owner: owner, Wait: true}
	start := time.Now()
	observe(ctx, ev)
	err := enter(ctx)
	ev.Waited = time.Since(start)
	if err != nil {
		ev.Kind, ev.Err = EventWaitEnded, err
	} else {
		ev.Kind, ev.Grant, ev.Token = EventGranted, GrantReentry, token()
	}
	observe(ctx, ev)
	return err
}
