package fair

import (
	"context"
	"time"
)

// Observer watches the steps of the Lock calls made with a context from
// WithObserver. It exists for the tests and for the stress command, which
// check the order of grants against the order of joins. Its functions are
// called on the waiting goroutine and must not block.
type Observer struct {
	// Joined is called when a wait-mode call appended the caller's entry to
	// the queue: the call was sent at sent and answered at answered, so
	// the entry joined the line in between. It is called again if the
	// waiter lost its place (its deadline passed) and joined anew.
	Joined func(sent, answered time.Time)
	// Polled is called after every wait-mode call that left the caller in
	// line (the one that joined, and every heartbeat after it): the call
	// moved the waiter's deadline to WaiterTTL after it ran, between sent
	// and answered.
	Polled func(sent, answered time.Time)
}

type observerKey struct{}

// WithObserver returns a copy of ctx whose Lock calls report to o.
func WithObserver(ctx context.Context, o *Observer) context.Context {
	return context.WithValue(ctx, observerKey{}, o)
}

func observe(ctx context.Context) *Observer {
	o, _ := ctx.Value(observerKey{}).(*Observer)
	return o
}

func (o *Observer) joined(sent, answered time.Time) {
	if o != nil && o.Joined != nil {
		o.Joined(sent, answered)
	}
}

func (o *Observer) polled(sent, answered time.Time) {
	if o != nil && o.Polled != nil {
		o.Polled(sent, answered)
	}
}
