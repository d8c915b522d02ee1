package fairlock

import (
	"context"
	"fmt"
	"time"

	"github.com/fairlock/fairlock/fair"
)

// An Observer receives the events of a Client's Lock calls and holds:
// when a call starts waiting, joins the line, is granted or gives up, and
// when a hold ends or its renewal fails. Set it with WithObserver; the
// otel module turns the events into OpenTelemetry metrics and traces.
//
// Observe is called off the lock path: the step that reports an event
// only puts it in the Client's queue (WithObserverQueue), and one
// goroutine of the Client, started at the first event, calls Observe
// with each event in turn, in the order the Client reported them. So a
// slow Observer does not slow a Lock, an Unlock or a renewal: it makes
// the queue fill, and once it is full events are dropped, whole calls at
// a time (Client.DroppedEvents counts them). An event may reach the
// Observer after the call it reports has returned: At says when it
// happened. One Client's calls to Observe never overlap; an Observer
// shared by several Clients is called by each concurrently. Close delivers what is
// queued, within its bound; once Close has returned, the Observer is not
// called again. WithObserverQueue(0) calls Observe on the goroutine of
// the step instead (concurrently, then, from the Client's concurrent
// calls), for an Observer that must see an event before the call
// returns.
//
// ctx carries the values of the Lock call's context (for the events of a
// hold, of the call that took it), so that an Observer can find the
// caller's span or request id in it. It is never cancelled after the
// event: Done and Err say whether the call's context had ended when the
// event happened (Err is then its error), so that an Observer can tell a
// caller that gave up. An Observer that panics does not break the
// Client: the panic is recovered and logged once, and later events are
// still delivered.
//
// New kinds of Event may be added, and new fields to Event: an Observer
// should ignore a Kind it does not know.
type Observer interface {
	Observe(ctx context.Context, e Event)
}

// ObserverFunc is an Observer that is a function.
type ObserverFunc func(ctx context.Context, e Event)

// Observe calls f.
func (f ObserverFunc) Observe(ctx context.Context, e Event) { f(ctx, e) }

// EventKind says what an Event reports.
type EventKind int

// The kinds of Event.
const (
	// EventWaitStarted: a Lock or TryLock call began (also one that re-enters
	// a hold).
	EventWaitStarted EventKind = EventKind(fair.EventWaitStarted)
	// EventQueued: a waiting Lock joined the line, at Position. Sent and
	// Answered bound when: the call that appended its entry was sent at
	// Sent and answered at Answered. Reported again if the waiter lost its place
	// (it could not reach Redis for a waiter TTL) and joined anew. A join
	// whose answer was lost (a connection cut, a server restarted on its
	// append-only file) is reported by the first poll that finds the
	// entry in line: Sent is then when the call's first poll was sent,
	// and Position is 0 (unknown).
	EventQueued EventKind = EventKind(fair.EventQueued)
	// EventPolled: a poll of a waiting Lock kept its place in line (the one
	// that joined, and each heartbeat after it), between Sent and
	// Answered.
	EventPolled EventKind = EventKind(fair.EventPolled)
	// EventGranted: the call took the lock, Waited after it began; Grant says
	// how, Token is the hold's fencing token.
	EventGranted EventKind = EventKind(fair.EventGranted)
	// EventWaitEnded: the call ended without the lock, Waited after it began,
	// with Err: the context's error, ErrClosed, ErrLocked (TryLock), or
	// another error.
	EventWaitEnded EventKind = EventKind(fair.EventWaitEnded)
	// EventHoldEnded: a hold ended, Held after its grant; End says why, and
	// Err is the cause (nil when it was unlocked).
	EventHoldEnded EventKind = EventKind(fair.EventHoldEnded)
	// EventRenewalFailed: a renewal of a hold failed with Err. The watchdog
	// tries again until the hold is declared lost (an EventHoldEnded with
	// EndLeaseLost follows then).
	EventRenewalFailed EventKind = EventKind(fair.EventRenewalFailed)
	// EventPrimaryMoved: the Client saw its primary move to another server (a
	// failover of a failover client, or of a cluster master's slots) and
	// followed it. Lock is empty.
	EventPrimaryMoved EventKind = EventKind(fair.EventPrimaryMoved)
	// EventReconnected: a pub/sub connection of the Client failed or went
	// quiet and was rebuilt once its channels were subscribed again. Wake
	// messages sent meanwhile may have been lost, so every waiter behind
	// it polled at once. Lock is empty.
	EventReconnected EventKind = EventKind(fair.EventReconnected)
)

// String returns the kind's name.
func (k EventKind) String() string {
	switch k {
	case EventWaitStarted:
		return "WaitStarted"
	case EventQueued:
		return "Queued"
	case EventPolled:
		return "Polled"
	case EventGranted:
		return "Granted"
	case EventWaitEnded:
		return "WaitEnded"
	case EventHoldEnded:
		return "HoldEnded"
	case EventRenewalFailed:
		return "RenewalFailed"
	case EventPrimaryMoved:
		return "PrimaryMoved"
	case EventReconnected:
		return "Reconnected"
	}
	return fmt.Sprintf("EventKind(%d)", int(k))
}

// GrantKind says how a Lock call was granted.
type GrantKind int

const (
	// GrantFresh: granted without waiting in line.
	GrantFresh GrantKind = GrantKind(fair.GrantFresh)
	// GrantHandOver: granted after waiting in line: a release handed the
	// lock over (by push, or found by a poll).
	GrantHandOver GrantKind = GrantKind(fair.GrantHandOver)
	// GrantReentry: one more level of a hold the context carried.
	GrantReentry GrantKind = GrantKind(fair.GrantReentry)
)

// String returns the kind's name.
func (k GrantKind) String() string {
	switch k {
	case GrantFresh:
		return "fresh"
	case GrantHandOver:
		return "hand-over"
	case GrantReentry:
		return "re-entry"
	}
	return fmt.Sprintf("GrantKind(%d)", int(k))
}

// EndKind says why a hold ended.
type EndKind int

const (
	// EndUnlocked: its last level was unlocked.
	EndUnlocked EndKind = EndKind(fair.EndUnlocked)
	// EndLeaseLost: the lease was lost (ErrLeaseLost): renewals failed,
	// or found the hold gone.
	EndLeaseLost EndKind = EndKind(fair.EndLeaseLost)
	// EndLeaseRanOut: a fixed lease (WithFixedLease) ran out before
	// Unlock (ErrLeaseLost).
	EndLeaseRanOut EndKind = EndKind(fair.EndLeaseRanOut)
	// EndClosed: the Client was closed (ErrClosed).
	EndClosed EndKind = EndKind(fair.EndClosed)
)

// String returns the kind's name.
func (k EndKind) String() string {
	switch k {
	case EndUnlocked:
		return "unlocked"
	case EndLeaseLost:
		return "lease lost"
	case EndLeaseRanOut:
		return "lease ran out"
	case EndClosed:
		return "closed"
	}
	return fmt.Sprintf("EndKind(%d)", int(k))
}

// Event is one step of a Lock call or of a hold. Which fields are set
// depends on Kind; the others are zero.
type Event struct {
	Kind EventKind
	// At is when the Client reported the step, just after it happened:
	// Observe may run later, so an Observer that times events reads At,
	// not its clock. Along the events of one Client's queue it never
	// goes back.
	At   time.Time
	Lock string // the lock's name
	// Locks are, for the EventWaitStarted, EventQueued, EventPolled, EventGranted and
	// EventWaitEnded events of a MultiLock that waits in the lines of several
	// locks at once (on one server), their names in key order; Lock then
	// joins them with commas. nil for a Mutex, and for the holds a
	// MultiLock takes: each hold's events name its own lock.
	Locks []string
	Owner string // owner id of the call or hold
	// Call identifies one Lock or TryLock call and the hold it took, the
	// same in each of their events; "" for a re-entry.
	Call string
	// Wait is true for Lock, false for TryLock.
	Wait bool

	Grant GrantKind // EventGranted
	Token int64     // EventGranted, EventHoldEnded, EventRenewalFailed: the fencing token

	Sent, Answered time.Time // EventQueued, EventPolled
	// Position is, for EventQueued, the place in line the call joined at: 1
	// for the head, counting the waiters ahead (a waiter that died ahead
	// counts until it reaches the head and is dropped).
	Position int

	Waited time.Duration // EventGranted, EventWaitEnded: since the call began
	// HandOver is, for EventGranted by a hand-over that reached the Client by
	// push, the time from the hand-over in Redis (the release that gave
	// the lock to this call) to the push arriving: how long the lock sat
	// granted before its new holder heard of it. It is estimated on this
	// Client's clock, from the server's time that the push carries and
	// that the call's last poll answered, and is off by at most half that
	// poll's round trip; never below a µs. It is 0 when not known: the
	// grant was found by a poll, or pushed by a client of an older version
	// (whose push carries no time).
	HandOver time.Duration
	Held     time.Duration // EventHoldEnded: since the grant
	End      EndKind       // EventHoldEnded
	Err      error         // EventWaitEnded, EventRenewalFailed; EventHoldEnded: the cause, nil when unlocked
}

// WithObserver sets the Observer of a Client's events. Default none, and
// then no event is built: a Client without an Observer pays nothing for
// them. A nil Observer is the default.
func WithObserver(o Observer) Option {
	return clientOption(func(c *config) { c.observer = o })
}

// WithObserverQueue sets how many events a Client keeps for its Observer,
// the one it is handling included. Default 1024. When the queue is full,
// a Lock call whose EventWaitStarted finds it so is dropped whole (every event
// of the call and of its holds), and so is any other event, except the
// end (EventGranted, EventWaitEnded, EventHoldEnded) of a call or hold whose start was
// queued: that is queued all the same, so that an Observer sees every
// call and hold it saw begin come to an end, and the queue outgrows its
// size by at most those ends. Client.DroppedEvents counts the events
// dropped. The queue's memory grows with the events it holds, and is
// kept for reuse.
//
// Size 0 makes no queue: Observe is called on the goroutine of the step
// it reports (the Lock call's, or a renewal's), before the step goes on,
// and its time adds to every Lock and Unlock. That is for an Observer
// that must see an event before the call returns, such as a test
// harness, and that is as quick as a channel send. A size below 0 makes
// New (and NewQuorum) fail with ErrInvalidOption.
func WithObserverQueue(size int) Option {
	return clientOption(func(c *config) {
		if size < 0 {
			c.invalid("WithObserverQueue(%d): want 0 (no queue) or more", size)
			return
		}
		c.observerQueue = size
	})
}

// eventOf converts an engine's event.
func eventOf(e fair.Event) Event {
	return Event{
		Kind:     EventKind(e.Kind),
		Lock:     e.Lock,
		Locks:    e.Locks,
		Owner:    e.Owner,
		Call:     e.Call,
		Wait:     e.Wait,
		Grant:    GrantKind(e.Grant),
		Token:    e.Token,
		Sent:     e.Sent,
		Answered: e.Answered,
		Position: e.Position,
		Waited:   e.Waited,
		HandOver: e.HandOver,
		Held:     e.Held,
		End:      EndKind(e.End),
		Err:      e.Err,
	}
}
