package fairlock

import (
	"context"
	"time"

	"github.com/fairlock/fairlock/fair"
)

// ownerKey carries the owner id set by ContextWithOwner.
type ownerKey struct{}

// holdKey carries a hold of one lock, named by its hash key.
type holdKey struct{ lock string }

// ContextWithOwner returns a copy of ctx whose Lock calls take the lock as
// owner, instead of as a fresh random owner. Holds are re-entrant per
// owner: a Lock with an owner that already holds the lock, in this process
// or another, is granted at once and counts one more level, and the lock
// is released when every level has been unlocked. Use it to share one hold
// across processes; keep owner ids unique to the work they identify. The
// id must be non-empty, at most 256 bytes of valid UTF-8, with no spaces
// or control characters; Lock reports ErrInvalidOwner otherwise.
func ContextWithOwner(ctx context.Context, owner string) context.Context {
	if ctx == nil {
		ctx = context.Background()
	}
	return context.WithValue(ctx, ownerKey{}, owner)
}

func ownerFrom(ctx context.Context) (string, bool) {
	o, ok := ctx.Value(ownerKey{}).(string)
	return o, ok
}

func (m *Mutex) holdFrom(ctx context.Context) *fair.Hold {
	h, _ := ctx.Value(m.key).(*fair.Hold)
	return h
}

// heldContext is the context Lock returns: the values of the caller's
// context, the hold, and the hold's cancellation (no deadline).
type heldContext struct {
	context.Context // the caller's context without its cancellation: values only
	key             holdKey
	h               *fair.Hold
}

func withHold(ctx context.Context, key holdKey, h *fair.Hold) context.Context {
	return &heldContext{Context: context.WithoutCancel(ctx), key: key, h: h}
}

func (c *heldContext) Deadline() (time.Time, bool) { return time.Time{}, false }
func (c *heldContext) Done() <-chan struct{}       { return c.h.Context().Done() }
func (c *heldContext) Err() error                  { return c.h.Context().Err() }

// Value finds the hold, then the caller's values, then the values of the
// hold's own context. The last step is what lets context.Cause report the
// hold's cause and lets contexts derived from this one be cancelled with
// the hold without a goroutine: the standard library finds the hold's
// cancellation through Value.
func (c *heldContext) Value(key any) any {
	if key == any(c.key) {
		return c.h
	}
	if v := c.Context.Value(key); v != nil {
		return v
	}
	return c.h.Context().Value(key)
}

func (c *heldContext) String() string { return "fairlock.held(" + c.key.lock + ")" }
