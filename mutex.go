package fairlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/fairlock/fairlock/fair"
	"github.com/fairlock/fairlock/queue"
)

// Mutex is a handle on one named lock. Its methods are safe for concurrent
// use. The owner of a hold is carried by a context, not by the handle or
// the goroutine: see Lock.
type Mutex struct {
	c     *Client
	name  string
	lock  fair.Locker // the engine's lock (one deployment's or a quorum's); nil when err != nil
	keys  queue.Keys  // the lock's keys, when err == nil
	key   holdKey
	lease time.Duration
	fixed bool
	err   error // invalid name or option: returned by every method
}

// Name returns the lock's name.
func (m *Mutex) Name() string {
	if m == nil {
		return ""
	}
	return m.name
}

// usable returns the error that stops any call: a bad handle, a nil
// context, a closed Client.
func (m *Mutex) usable(ctx context.Context) error {
	switch {
	case m == nil:
		return errNilMutex
	case m.err != nil:
		return m.err
	case m.c == nil:
		return errNilMutex
	case ctx == nil:
		return errNilContext
	case m.c.closed():
		return ErrClosed
	}
	return nil
}

// Lock waits until the lock is granted, in the order callers joined the
// line, or until ctx ends. It returns a context that carries the hold:
//   - it keeps ctx's values but not its deadline or cancellation: ctx
//     bounds only the wait;
//   - it is cancelled when the hold ends: after the last Unlock, or when
//     the lease is lost (context.Cause is then ErrLeaseLost), or at Close
//     (cause ErrClosed). Pass it to the work done under the lock.
//
// Lock with a context that already carries a live hold of this lock
// re-enters it: the count goes up in Redis, and the lock is released when
// Unlock has been called as many times as Lock. Only a hold of this very
// lock is re-entered: one taken through this Client, or through another
// Client whose hold this Client's Redis has (the same owner and token);
// the same name in another DB or deployment is another lock. A context
// whose hold of this lock was lost makes Lock fail with ErrLeaseLost. Two
// calls with unrelated contexts exclude each other, even in one goroutine.
// A context that carries holds of other locks keeps them: the returned
// context carries them all.
//
// When ctx ends before the grant, Lock returns ctx's error (joined with
// ErrUnavailable when Redis was not serving the call then) and leaves
// nothing in Redis; a grant that raced with the end is given back. It
// returns as soon as ctx ends, even while Redis does not answer, except
// on a go-redis client built with ContextTimeoutEnabled: there a ctx with
// a deadline bounds each call itself, which runs on the caller's
// goroutine, and a cancellation before the deadline is heard once Redis
// answers the call in flight.
func (m *Mutex) Lock(ctx context.Context) (context.Context, error) {
	return m.acquire(ctx, true)
}

// TryLock takes the lock only if that needs no waiting: it never joins the
// line, and fails with ErrLocked when another owner holds the lock or
// anyone is waiting for it (no barging). A context that carries a live
// hold re-enters it, as with Lock. While Redis does not answer (a restart,
// a failover under way), its attempt is sent again until Redis answers or
// the call timeout or ctx's deadline passes.
func (m *Mutex) TryLock(ctx context.Context) (context.Context, error) {
	return m.acquire(ctx, false)
}

func (m *Mutex) acquire(ctx context.Context, wait bool) (context.Context, error) {
	if err := m.usable(ctx); err != nil {
		return nil, err
	}
	owner, explicit, err := lockOwner(ctx)
	if err != nil {
		return nil, err
	}
	h, err := m.take(ctx, owner, explicit, wait)
	if err != nil {
		return nil, err
	}
	return withHoldOf(ctx, m.key, h), nil
}

// lockOwner returns the owner a Lock call with ctx takes a fresh hold
// for: the one ContextWithOwner named (shared), or else a new random one;
// or the error that stops the call (ctx ended, an invalid owner).
func lockOwner(ctx context.Context) (owner string, shared bool, err error) {
	if ctx.Err() != nil {
		return "", false, ctxErr(ctx)
	}
	owner, shared = ownerFrom(ctx)
	if !shared {
		return uuid.NewString(), false, nil
	}
	if err := queue.ValidateOwner(owner); err != nil {
		return "", false, err
	}
	return owner, true, nil
}

// take re-enters the live hold of this lock that ctx carries, or else
// takes a fresh hold for owner (shared: the owner came from
// ContextWithOwner), waiting in line when wait is set. A carried hold is
// re-entered only by its own owner when ctx names one.
func (m *Mutex) take(ctx context.Context, owner string, shared, wait bool) (fair.Held, error) {
	h, entered, err := m.reenter(ctx, owner, shared)
	if err != nil || entered {
		return h, err
	}
	return m.lock.Take(ctx, fair.Request{Owner: owner, Lease: m.lease, Fixed: m.fixed, Wait: wait, Shared: shared})
}

// reenter re-enters the live hold of this lock that ctx carries, if any:
// it reports whether it did. A carried hold is re-entered only by its own
// owner when ctx names one (shared); one that was unlocked is no hold to
// re-enter, and one that was lost fails the call: a re-entry is never a
// fresh grant.
func (m *Mutex) reenter(ctx context.Context, owner string, shared bool) (fair.Held, bool, error) {
	h, err := m.holdFrom(ctx)
	if err != nil || h == nil || (shared && owner != h.Owner()) {
		return nil, false, err
	}
	switch err := h.Enter(ctx); {
	case err == nil:
		return h, true, nil
	case errors.Is(err, ErrNotHeld):
		return nil, false, nil
	default:
		return nil, false, err
	}
}

// Unlock gives up one level of the hold carried by ctx (the context Lock
// returned, or one derived from it). At the last level the lock is handed
// to the next waiter, and the hold's context is cancelled. It fails with
// ErrNotHeld when ctx carries no live hold of this lock, and with
// ErrLeaseLost when the hold's lease was lost before.
//
// ctx's deadline, if any, bounds Unlock even while Redis does not answer:
// Unlock then returns context.DeadlineExceeded, the hold ends at its last
// level, and the release goes on in the background until Redis takes it
// or the lease runs out. A cancellation does not stop Unlock: the context
// it is given is often that of a hold that has just ended.
//
// Every Unlock gives up one level in the process, whatever Redis answers:
// a release Redis refuses (NOPERM during an ACL change, ...) or does not
// answer is sent again in the background, and the error says so. The
// last Unlock of a hold then also takes the levels Redis still counts for
// it, so that, under an owner id of its own (not ContextWithOwner's), it
// returns nil only once the lock is free (see "Unlock through a refusal"
// in docs/operations.md).
func (m *Mutex) Unlock(ctx context.Context) error {
	if err := m.usable(ctx); err != nil {
		return notHeld(err)
	}
	h, err := m.holdFrom(ctx)
	switch {
	case err != nil:
		return err
	case h == nil:
		return ErrNotHeld
	}
	return h.Unlock(ctx)
}

// notHeld turns ErrClosed into ErrNotHeld with ErrClosed wrapped: after
// Close no context carries a live hold.
func notHeld(err error) error {
	if errors.Is(err, ErrClosed) {
		return fmt.Errorf("%w: %w", ErrNotHeld, err)
	}
	return err
}

// Token returns the fencing token of the hold carried by ctx. Tokens of a
// lock name strictly increase with every fresh grant, across all Clients;
// a re-entry keeps its hold's token. Pass it to the resource the lock
// protects, so that it can refuse a holder whose lease was lost. ErrNotHeld
// when ctx carries no live hold.
func (m *Mutex) Token(ctx context.Context) (int64, error) {
	if err := m.usable(ctx); err != nil {
		return 0, notHeld(err)
	}
	h, err := m.holdFrom(ctx)
	switch {
	case err != nil:
		return 0, err
	case h == nil:
		return 0, ErrNotHeld
	}
	return h.Token(ctx)
}

// HoldCount returns how many levels the owner carried by ctx holds in
// Redis (across every process sharing that owner), 0 when it holds none or
// ctx carries no owner. ctx may be the context of a hold that has ended:
// it still names the owner (and the count is then 0 unless the owner is
// shared).
func (m *Mutex) HoldCount(ctx context.Context) (int, error) {
	if err := m.usable(ctx); err != nil {
		return 0, err
	}
	if ctx.Err() != nil {
		// The context of a hold that ended still names its owner: count
		// what that owner holds now (0, unless the owner is shared).
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), m.c.cfg.callTimeout)
		defer cancel()
	}
	owner, explicit := ownerFrom(ctx)
	h, err := m.holdFrom(ctx)
	if err != nil {
		return 0, err
	}
	if h != nil && (!explicit || owner == h.Owner()) {
		owner, explicit = h.Owner(), true
	}
	if !explicit {
		return 0, nil
	}
	return m.lock.HoldCount(ctx, owner)
}

// IsLocked reports whether anyone holds the lock, as Redis has it when it
// answers: a reading that may be out of date as soon as it returns, for
// monitoring and tests, never a way to decide whether to Lock (TryLock
// does that in one step). A hold whose lease has run out is not held. On
// a quorum Client it reports whether one owner holds on a majority of the
// masters. When ctx ends first, IsLocked returns ctx's error at once
// (joined with ErrUnavailable when Redis was not serving the call then).
func (m *Mutex) IsLocked(ctx context.Context) (bool, error) {
	if err := m.usable(ctx); err != nil {
		return false, err
	}
	return m.lock.IsLocked(ctx)
}

// TTL returns the lease left of the current hold, whoever holds it, as
// Redis has it when it answers, and 0 when the lock is free. A hold kept
// by the watchdog shows a lease that is renewed every third of it, so TTL
// says how long the lock would stay held should its holder's process die
// now, not how long it will be held. On a quorum Client, when ctx carries
// a live hold of this lock taken through this Client, TTL is that hold's
// validity left, measured here without a call (see WithDriftFactor);
// otherwise the validity of the hold of the owner that holds on a majority
// of the masters. Errors as for IsLocked.
func (m *Mutex) TTL(ctx context.Context) (time.Duration, error) {
	if err := m.usable(ctx); err != nil {
		return 0, err
	}
	h, _ := m.holdFrom(ctx) // a quorum's hold knows its validity; nil asks Redis
	return m.lock.TTL(ctx, h)
}

// ForceUnlock removes the current hold, whoever owns it, and hands the lock
// to the next waiter. It reports whether a hold was removed. The former
// holder's Client is told at once: the hold's context is cancelled with
// ErrLeaseLost within a push's latency, or, for a hold forced within a
// second of its grant on a lock nobody else of its Client waited for,
// about a second after the grant; and in any case at its next renewal or
// Unlock, should the push be lost. Use it to recover from an operator's
// decision, not as part of a protocol. When ctx ends before Redis answers,
// ForceUnlock returns ctx's error at once, and the hold may still be
// removed once Redis answers: look with IsLocked.
func (m *Mutex) ForceUnlock(ctx context.Context) (bool, error) {
	if err := m.usable(ctx); err != nil {
		return false, err
	}
	return m.lock.ForceUnlock(ctx)
}
