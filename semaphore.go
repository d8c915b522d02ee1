package fairlock

import (
	"context"
	"fmt"

	"github.com/fairlock/fairlock/lua"
	"github.com/fairlock/fairlock/queue"
)

// Semaphore is a handle on one named, weighted, fair semaphore: at most
// its capacity of permits are held at a time, across every Client, and
// callers are served in the order they asked, each for its own weight.
// Its methods are safe for concurrent use.
//
// The order is strict, as in golang.org/x/sync/semaphore.Weighted: a
// caller whose weight does not fit beside the permits held waits, and
// nobody who asked after it passes it, even one whose weight would fit.
// A release grants as many callers from the head of the line as now fit,
// at once, and each learns it by push.
//
// Each Acquire is a hold of its own, with a lease that the Client's
// watchdog renews (or a fixed lease, WithFixedLease), a fencing token
// drawn from the semaphore's one counter, and a context that ends with
// it. A crashed holder's permits come back when its lease runs out.
//
// The capacity lives in Redis with the semaphore's state, from the first
// grant that finds none until nothing holds or waits any more. A handle
// whose capacity is not the one stored fails with ErrPermits, until the
// capacity is changed deliberately with SetPermits.
type Semaphore struct {
	weighted
}

// MaxPermits is the largest capacity of a Semaphore, 2^53, and so the
// most permits one Acquire can ask for. The semaphore's scripts count
// permits in Lua's numbers, doubles, which hold every integer up to 2^53
// exactly and not every one above it: a larger capacity could not be
// counted to the permit.
const MaxPermits = 1 << 53

// Semaphore returns the handle of the semaphore name with permits as its
// capacity. WithFixedLease is the one option it takes, as for a Mutex.
// A capacity below 1 or above MaxPermits makes every method fail with
// ErrInvalidOption.
func (c *Client) Semaphore(name string, permits int64, opts ...HandleOption) *Semaphore {
	s := &Semaphore{newWeighted(c, name, queue.KindSemaphore, permits, opts, errNilSemaphore)}
	if s.err == nil {
		s.err = checkPermits(name, permits)
	}
	return s
}

// checkPermits returns the error of a capacity that the semaphore name
// cannot have: below 1, or above MaxPermits.
func checkPermits(name string, permits int64) error {
	if permits < 1 || permits > MaxPermits {
		return fmt.Errorf("%w: semaphore %q: permits %d, want 1 to %d (MaxPermits)", ErrInvalidOption, name, permits, int64(MaxPermits))
	}
	return nil
}

// Name returns the semaphore's name.
func (s *Semaphore) Name() string {
	if s == nil {
		return ""
	}
	return s.name
}

// Permits returns the capacity this handle believes in: the one it was
// made with, or the last one its SetPermits stored.
func (s *Semaphore) Permits() int64 {
	if s == nil || s.w == nil {
		return 0
	}
	return s.w.Capacity()
}

// usable is weighted's, for a handle that may be nil.
func (s *Semaphore) usable(ctx context.Context) error {
	if s == nil {
		return errNilSemaphore
	}
	return s.weighted.usable(ctx)
}

// Acquire waits until n permits are granted, in the order callers asked,
// or until ctx ends. It returns a context that carries the hold, as
// Mutex.Lock does: it keeps ctx's values, not its deadline, and is
// cancelled when the hold ends (Release; cause ErrLeaseLost when the
// lease was lost, ErrClosed at Close). n must be between 1 and the
// capacity, which is at most MaxPermits (ErrInvalidOption otherwise, at
// once).
//
// A Semaphore hold is not re-entrant: Acquire with a context that carries
// a live hold of this semaphore fails with ErrWouldDeadlock, because
// waiting for more permits while holding some can wait for ever (the
// holder's own permits may be what the line waits for). Release the hold
// and acquire the total instead. ContextWithOwner does not apply: every
// Acquire is a hold of its own.
//
// When ctx ends before the grant, Acquire returns ctx's error (joined with
// ErrUnavailable when Redis was not serving the call then) and leaves
// nothing in Redis; a grant that raced with the end is given back.
func (s *Semaphore) Acquire(ctx context.Context, n int64) (context.Context, error) {
	return s.acquire(ctx, n, true)
}

// TryAcquire takes n permits only if that needs no waiting: it fails with
// ErrLocked when they do not fit beside the permits held, or when anyone
// waits (nobody passes the line).
func (s *Semaphore) TryAcquire(ctx context.Context, n int64) (context.Context, error) {
	return s.acquire(ctx, n, false)
}

func (s *Semaphore) acquire(ctx context.Context, n int64, wait bool) (context.Context, error) {
	if err := s.usable(ctx); err != nil {
		return nil, err
	}
	if capacity := s.w.Capacity(); n < 1 || n > capacity {
		return nil, fmt.Errorf("%w: semaphore %q: acquire of %d permits, want 1 to %d", ErrInvalidOption, s.name, n, capacity)
	}
	if ctx.Err() != nil {
		return nil, ctxErr(ctx)
	}
	switch held, err := s.newest(ctx, alive); {
	case err != nil:
		return nil, err
	case held != nil:
		return nil, fmt.Errorf("%w: semaphore %q: the context holds some of its permits already", ErrWouldDeadlock, s.name)
	}
	return s.take(ctx, lua.Level{Weight: n}, wait)
}

// Release gives back the permits of the hold ctx carries (the context
// Acquire returned, or one derived from it), which grants the callers
// from the head of the line that now fit, and cancels the hold's context.
// It fails with ErrNotHeld when ctx carries no live hold of this
// semaphore (ErrLeaseLost wrapped when its lease was lost). Its deadline
// bounds it as Mutex.Unlock's does.
func (s *Semaphore) Release(ctx context.Context) error {
	if s == nil {
		return errNilSemaphore
	}
	return s.unlock(ctx, anyHold)
}

// Token returns the fencing token of the hold ctx carries: tokens of a
// semaphore strictly increase with every grant, across every Client.
// ErrNotHeld when ctx carries no live hold.
func (s *Semaphore) Token(ctx context.Context) (int64, error) {
	if s == nil {
		return 0, errNilSemaphore
	}
	return s.token(ctx)
}

// SetPermits changes the semaphore's capacity in Redis, and this handle's,
// to permits (1 to MaxPermits; ErrInvalidOption otherwise). Callers
// waiting at the head of the line that now fit are granted at once.
// Holders above a lowered capacity keep their permits until they release
// them, and nobody new is granted until the permits held fit under it;
// a waiter asking for more than the new capacity, in any Client, is told
// by push and its Acquire fails with ErrInvalidOption at once. Other
// handles that still believe in the old capacity fail with ErrPermits at
// their next Acquire, until they are made with the new one. When nothing
// holds or waits, nothing is stored, and the next grant stores its own
// handle's capacity. When ctx ends before Redis answers, SetPermits
// returns ctx's error at once, and the change may still be made once
// Redis answers.
func (s *Semaphore) SetPermits(ctx context.Context, permits int64) error {
	if err := s.usable(ctx); err != nil {
		return err
	}
	if err := checkPermits(s.name, permits); err != nil {
		return err
	}
	l := s.c.engine.Weighted(s.keys, s.w, lua.Level{})
	_, err := l.Resize(ctx, permits)
	return err
}

// ForceRelease removes the hold of the holder owner, every permit of it,
// whoever holds it, and grants the waiters that now fit. owner is a
// holder's owner id as Inspect shows it (LockState.Holders). It reports
// whether a hold was removed: false when owner holds nothing, or its
// lease has ended. The former holder's Client is told at once: the
// hold's context is cancelled with ErrLeaseLost within a push's latency,
// or, for a hold forced within a second of its grant on a lock nobody
// else of its Client waited for, about a second after the grant; and in
// any case at its next renewal, should the push be lost. Until then the
// holder may still act: fence what it writes with its token. Use it to
// recover from an operator's decision (a process stuck but still
// renewing), not as part of a protocol. A bad owner id fails with
// ErrInvalidOwner. When ctx ends before Redis answers, ForceRelease
// returns ctx's error at once, and the hold may still be removed once
// Redis answers: look with Inspect.
func (s *Semaphore) ForceRelease(ctx context.Context, owner string) (bool, error) {
	return s.forceRelease(ctx, owner)
}
