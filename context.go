package fairlock

import (
	"context"
	"fmt"
	"time"

	"github.com/fairlock/fairlock/fair"
)

// ownerKey carries the owner id set by ContextWithOwner.
type ownerKey struct{}

// holdKey carries the holds of locks whose hash key is lock.
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

// carried is one hold a context carries, and the holds of locks with the
// same key that the contexts it was derived from carry. Locks of one key
// name can still be different locks: the same name and prefix on another
// Redis deployment, or in another DB of one server.
type carried struct {
	h    fair.Held
	next *carried // an older hold of the same key, or nil
}

// carriedFrom returns the holds of m's key carried by ctx, newest first.
func (m *Mutex) carriedFrom(ctx context.Context) *carried { return carriedOf(ctx, m.key) }

// carriedOf returns the holds of key carried by ctx, newest first.
func carriedOf(ctx context.Context, key holdKey) *carried {
	c, _ := ctx.Value(key).(*carried)
	return c
}

// holdFrom returns the hold of m's lock that ctx carries, or nil.
func (m *Mutex) holdFrom(ctx context.Context) (fair.Held, error) {
	return heldOf(ctx, m.key, m.lock, anyHold)
}

// heldOf returns the newest hold of the lock l (whose holds contexts
// carry under key) that ctx carries and for which keep is true, or nil.
// A hold taken through l's Client is that lock for certain. A hold of the
// same key taken through another Client is the same lock only if l's
// Redis has it (Holds: for one deployment, the same owner under the same
// fencing token; for a quorum, the same owner on a majority); otherwise
// it is another lock that happens to have the same key.
//
// The reads keep ctx's deadline but not its cancellation: the context an
// Unlock is given is often that of a hold that has just ended (the last
// name of a MultiLock released), which must not stop the next question.
func heldOf(ctx context.Context, key holdKey, l fair.Locker, keep func(fair.Held) bool) (fair.Held, error) {
	var others []fair.Held
	for c := carriedOf(ctx, key); c != nil; c = c.next {
		if !keep(c.h) {
			continue
		}
		if l.Took(c.h) {
			return c.h, nil
		}
		others = append(others, c.h)
	}
	if len(others) == 0 {
		return nil, nil
	}
	rctx, cancel := uncancelled(ctx)
	defer cancel()
	for _, h := range others {
		same, err := l.Holds(rctx, h)
		if err != nil {
			return nil, fmt.Errorf("fairlock: is the hold the context carries one of this lock? %w", err)
		}
		if same {
			return h, nil
		}
	}
	return nil, nil
}

// uncancelled returns ctx's values and deadline, without its cancellation.
func uncancelled(ctx context.Context) (context.Context, context.CancelFunc) {
	c := context.WithoutCancel(ctx)
	if d, ok := ctx.Deadline(); ok {
		return context.WithDeadline(c, d)
	}
	return c, func() {}
}

// What heldOf may keep: every hold, or a RWMutex's write holds or read
// holds.
func anyHold(fair.Held) bool { return true }
func writeHold(h fair.Held) bool {
	x, ok := h.(*fair.Hold)
	return ok && x.Exclusive()
}
func readHold(h fair.Held) bool {
	x, ok := h.(*fair.Hold)
	return ok && !x.Exclusive()
}

// heldContext is the context Lock returns: the values of the caller's
// context, the hold, and the hold's cancellation (no deadline).
type heldContext struct {
	context.Context // the caller's context without its cancellation: values only
	key             holdKey
	holds           *carried // holds[0] is this context's hold
}

// withHoldOf returns the context of the hold h of the lock of key, which
// carries the holds ctx carries too.
func withHoldOf(ctx context.Context, key holdKey, h fair.Held) context.Context {
	prev := carriedOf(ctx, key)
	holds := prev
	if prev == nil || prev.h != h {
		holds = &carried{h: h, next: prev}
	}
	return &heldContext{Context: context.WithoutCancel(ctx), key: key, holds: holds}
}

func (c *heldContext) Deadline() (time.Time, bool) { return time.Time{}, false }
func (c *heldContext) Done() <-chan struct{}       { return c.holds.h.Context().Done() }
func (c *heldContext) Err() error                  { return c.holds.h.Context().Err() }

// Value finds the holds, then the caller's values, then the values of the
// hold's own context. The last step is what lets context.Cause report the
// hold's cause and lets contexts derived from this one be cancelled with
// the hold without a goroutine: the standard library finds the hold's
// cancellation through Value.
func (c *heldContext) Value(key any) any {
	if key == any(c.key) {
		return c.holds
	}
	if v := c.Context.Value(key); v != nil {
		return v
	}
	return c.holds.h.Context().Value(key)
}

func (c *heldContext) String() string { return "fairlock.held(" + c.key.lock + ")" }

// ctxErr returns ctx's error, with its cause when the cause says more (a
// hold's context ends with context.Canceled and cause ErrLeaseLost or
// ErrClosed), so that errors.Is finds both.
func ctxErr(ctx context.Context) error {
	err := ctx.Err()
	if cause := context.Cause(ctx); err != nil && cause != nil && cause != err {
		return fmt.Errorf("%w: %w", err, cause)
	}
	return err
}
