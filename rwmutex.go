package fairlock

import (
	"context"
	"fmt"

	"github.com/fairlock/fairlock/fair"
	"github.com/fairlock/fairlock/lua"
	"github.com/fairlock/fairlock/queue"
)

// RWMutex is a handle on one named, fair readers-writer lock: many readers
// or one writer hold it at a time, across every Client. Its methods are
// safe for concurrent use.
//
// Callers are served in the order they asked, with readers batched: the
// readers at the head of the line are granted together; a writer waits
// for the readers that hold; a reader that asks after a waiting writer
// waits behind it. So neither a writer nor a reader starves: each is
// served once everyone who asked before it has been.
//
// Each hold has a lease that the Client's watchdog renews (or a fixed
// lease, WithFixedLease), a fencing token drawn from the lock's one
// counter (readers granted together have tokens of their own), and a
// context that ends with it, as a Mutex's does.
//
// Holds are re-entrant through their contexts, granted at once and never
// queued behind a waiter: RLock with a context that holds the read lock,
// and RLock or Lock with a context that holds the write lock. A write
// hold is downgraded by taking the read lock under it and then unlocking
// the write lock: the read hold goes on, and the readers waiting at the
// head of the line are granted beside it. A read hold is never upgraded:
// Lock with a context that holds only the read lock fails with
// ErrWouldDeadlock, as two readers upgrading would wait for each other.
// ContextWithOwner does not apply: every fresh hold has an owner of its
// own.
type RWMutex struct {
	weighted
}

// RWMutex returns the handle of the readers-writer lock name.
// WithFixedLease is the one option it takes, as for a Mutex.
func (c *Client) RWMutex(name string, opts ...HandleOption) *RWMutex {
	return &RWMutex{newWeighted(c, name, queue.KindRWMutex, 0, opts, errNilRWMutex)}
}

// The two levels of a RWMutex's holds, as its scripts weigh them.
var (
	readLevel  = lua.Level{Weight: 1}
	writeLevel = lua.Level{Weight: queue.RWCapacity, Excl: true}
)

// Name returns the lock's name.
func (rw *RWMutex) Name() string {
	if rw == nil {
		return ""
	}
	return rw.name
}

// usable is weighted's, for a handle that may be nil.
func (rw *RWMutex) usable(ctx context.Context) error {
	if rw == nil {
		return errNilRWMutex
	}
	return rw.weighted.usable(ctx)
}

// RLock waits until the read lock is granted, in the order callers asked
// (see RWMutex), or until ctx ends, and returns the context of the read
// hold, as Mutex.Lock does. With a context that holds the read or the
// write lock it re-enters at once.
func (rw *RWMutex) RLock(ctx context.Context) (context.Context, error) {
	return rw.lock(ctx, false, true)
}

// TryRLock takes the read lock only if that needs no waiting: it fails
// with ErrLocked when a writer holds it or anyone waits.
func (rw *RWMutex) TryRLock(ctx context.Context) (context.Context, error) {
	return rw.lock(ctx, false, false)
}

// Lock waits until the write lock is granted, in the order callers asked,
// or until ctx ends, and returns the context of the write hold. With a
// context that holds the write lock it re-enters at once; with one that
// holds only the read lock it fails with ErrWouldDeadlock.
func (rw *RWMutex) Lock(ctx context.Context) (context.Context, error) {
	return rw.lock(ctx, true, true)
}

// TryLock takes the write lock only if that needs no waiting: it fails
// with ErrLocked when anyone holds it or waits.
func (rw *RWMutex) TryLock(ctx context.Context) (context.Context, error) {
	return rw.lock(ctx, true, false)
}

func (rw *RWMutex) lock(ctx context.Context, write, wait bool) (context.Context, error) {
	if err := rw.usable(ctx); err != nil {
		return nil, err
	}
	if ctx.Err() != nil {
		return nil, ctxErr(ctx)
	}
	level := readLevel
	if write {
		level = writeLevel
	}
	reading, err := rw.newest(ctx, func(h fair.Held) bool { return alive(h) && readHold(h) })
	if err != nil {
		return nil, err
	}
	writing, err := rw.newest(ctx, func(h fair.Held) bool { return alive(h) && writeHold(h) })
	if err != nil {
		return nil, err
	}
	switch {
	case write && writing != nil || !write && reading != nil:
		// One more level of the hold of that kind.
		h := writing
		if !write {
			h = reading
		}
		if err := h.Enter(ctx); err == nil {
			return withHoldOf(ctx, rw.key, h), nil
		} else if !errorsIsNotHeld(err) {
			return nil, err
		}
	case !write && writing != nil:
		// A read level under the write hold: a hold of its own, of the
		// same owner and token, granted at once. The owner id is shared
		// with the write hold and with every other read level taken under
		// it, so the last release of this one must not take the read
		// levels Redis still counts for them.
		l := rw.c.engine.Weighted(rw.keys, rw.w, level)
		h, err := l.Join(ctx, fair.Request{Owner: writing.Owner(), Lease: rw.lease.d, Fixed: rw.lease.fixed, Shared: true})
		if err != nil {
			return nil, err
		}
		return withHoldOf(ctx, rw.key, h), nil
	case write && reading != nil:
		return nil, fmt.Errorf("%w: RWMutex %q: the context holds the read lock; unlock it first", ErrWouldDeadlock, rw.name)
	}
	return rw.take(ctx, level, wait)
}

// RUnlock gives up one level of the read hold ctx carries. At its last
// level the hold ends (its context is cancelled), and when it was the
// last reader the lock goes to the next waiter. ErrNotHeld when ctx
// carries no read hold of this lock. Its deadline bounds it as
// Mutex.Unlock's does.
func (rw *RWMutex) RUnlock(ctx context.Context) error {
	return rw.unlock(ctx, false)
}

// Unlock gives up one level of the write hold ctx carries. At its last
// level the write hold ends and the lock goes to the waiters at the head
// of the line (a writer, or every reader before the next writer); a read
// level taken under it goes on (a downgrade). ErrNotHeld when ctx
// carries no write hold of this lock.
func (rw *RWMutex) Unlock(ctx context.Context) error {
	return rw.unlock(ctx, true)
}

func (rw *RWMutex) unlock(ctx context.Context, write bool) error {
	if rw == nil {
		return errNilRWMutex
	}
	if write {
		return rw.weighted.unlock(ctx, writeHold)
	}
	return rw.weighted.unlock(ctx, readHold)
}

// Token returns the fencing token of the newest hold ctx carries, read or
// write: tokens strictly increase with every fresh grant, across every
// Client; a re-entry, and a read level taken under a write hold, keep
// the hold's token. ErrNotHeld when ctx carries no live hold.
func (rw *RWMutex) Token(ctx context.Context) (int64, error) {
	if rw == nil {
		return 0, errNilRWMutex
	}
	return rw.token(ctx)
}

// ForceRelease removes the hold of the holder owner, a reader's or the
// writer's, every level of it, whoever holds it, and grants the waiters
// that now fit. owner is a holder's owner id as Inspect shows it
// (LockState.Holders). It reports whether a hold was removed, and tells
// the former holder's Client as Semaphore.ForceRelease does.
func (rw *RWMutex) ForceRelease(ctx context.Context, owner string) (bool, error) {
	return rw.forceRelease(ctx, owner)
}
