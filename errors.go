package fairlock

import (
	"errors"

	"github.com/fairlock/fairlock/internal/errs"
)

// Errors returned by fairlock. Test for them with errors.Is: they are often
// wrapped, or joined with a context's error.
var (
	// ErrLocked is returned by TryLock when another owner holds the lock or
	// anyone is waiting for it.
	ErrLocked = errs.ErrLocked

	// ErrNotHeld is returned by Unlock and Token when the context carries
	// no live hold of the lock: it never held it, was already unlocked as
	// many times as it was locked, or the hold ended (then ErrLeaseLost or
	// ErrClosed is wrapped too; after Close, ErrClosed always is).
	ErrNotHeld = errs.ErrNotHeld

	// ErrLeaseLost is the cause of a hold's context when its lease ran out
	// or its key vanished before Unlock: another owner may hold the lock
	// now. Unlock and re-entry report it when Redis no longer knows the
	// hold, and so does Lock with a context whose hold was lost (a
	// re-entry is never a fresh grant).
	ErrLeaseLost = errs.ErrLeaseLost

	// ErrClosed is returned by every method once the Client is closed, and
	// to Lock calls that were waiting when it was closed. It is the cause
	// of the contexts of holds that were live at Close.
	ErrClosed = errs.ErrClosed

	// ErrUnsafeServer is returned by Lock and TryLock when the Redis server
	// cannot keep a lock safely: a version older than 5.0, or a
	// maxmemory-policy other than noeviction with maxmemory set (it may
	// evict lock keys). The Client checks once, at its first Lock, and logs
	// what it cannot check.
	ErrUnsafeServer = errs.ErrUnsafeServer

	// ErrNoPermission is returned when the Redis user may not run a
	// command, touch a key or use a channel fairlock needs: an ACL refused
	// it (NOPERM, or, for a command one of its scripts calls, the error
	// reply the script fails with). The error wraps the server's reply,
	// which names what was refused; docs/operations.md lists the rules a
	// user needs. A contended Lock whose user may not subscribe to the
	// lock's channel fails with it at once. When only the wake message of
	// a hand-over was refused, the state change itself was made (Unlock
	// released the lock and handed it to the next waiter, who learns it at
	// its next poll) and the error says so.
	ErrNoPermission = errs.ErrNoPermission

	// ErrNotReplicated is returned when a Client built WithReplicas made a
	// change that fewer replicas than it waits for acknowledged in time,
	// or whose WAIT failed: a Lock whose context ended while its grant was
	// not acknowledged (joined with the context's error; the grant was
	// given back and nothing is left in line), a TryLock or a re-entry
	// (the level was given back; a re-entered hold keeps the levels it
	// had), or an Unlock (the lock was released on the primary, and the
	// release is sent again in the background until the replicas
	// acknowledge it, as the error says). When the primary has fewer
	// replicas connected than asked for, the error names both numbers and
	// nothing waits for them: Lock fails at once, and Unlock does not send
	// its release again.
	ErrNotReplicated = errs.ErrNotReplicated

	// ErrInvalidName: the lock name is empty, longer than 1024 bytes, not
	// valid UTF-8, or contains '}'.
	ErrInvalidName = errs.ErrInvalidName

	// ErrInvalidOwner: an owner id given with ContextWithOwner is empty,
	// longer than 256 bytes, not valid UTF-8, or contains a space or a
	// control character.
	ErrInvalidOwner = errs.ErrInvalidOwner

	// ErrInvalidOption: an option was given a value it does not accept
	// (see each option), or New was given a nil client.
	ErrInvalidOption = errs.ErrInvalidOption

	// ErrTooManyNames: a MultiLock was given more than MaxMultiNames
	// distinct names.
	ErrTooManyNames = errs.ErrTooManyNames

	// ErrPermits: a Semaphore handle's capacity is not the one the
	// semaphore has in Redis (another handle made it with another
	// capacity, or SetPermits changed it). The error names the stored
	// one.
	ErrPermits = errs.ErrPermits

	// ErrWouldDeadlock: the call would wait for a hold that its own
	// context carries: a Semaphore's Acquire with a context that holds
	// permits of it already, or a RWMutex's Lock with a context that holds
	// only its read lock (an upgrade).
	ErrWouldDeadlock = errs.ErrWouldDeadlock

	// ErrNoQuorum: fewer than a majority of a quorum Client's masters
	// answered (see NewQuorum). The error says how many did.
	ErrNoQuorum = errs.ErrNoQuorum

	// ErrUnavailable is joined with the context's error by a call that
	// takes a lock (Lock, TryLock, RLock, TryRLock, Acquire, TryAcquire)
	// whose context ended while Redis was not serving the call:
	// its last round with Redis failed without an answer (a network
	// error, a server stopped or restarting) or with a reply that says
	// "not now" (loading, busy, failing over, full), or went unanswered
	// for 200 ms or more. It wraps that round's failure when there was
	// one. Without it, a Lock that ends with its context's error ended
	// while Redis answered it: the caller gave up waiting in line. The
	// calls of a quorum Client (NewQuorum) and re-entries do not join it.
	ErrUnavailable = errs.ErrUnavailable

	// ErrLayout: the keys under the Client's prefix were written by a
	// fairlock of another layout version (the key <prefix>:layout says
	// which); the error names both versions. Every call of the Client
	// fails with it, and nothing under the prefix is read or written
	// but that key: see "Keys" in docs/algorithm.md for how a layout
	// change is rolled out.
	ErrLayout = errs.ErrLayout

	// ErrInvalidValue: an Election's Campaign or Proclaim was given an
	// empty value, or one longer than MaxValueLen bytes.
	ErrInvalidValue = errs.ErrInvalidValue

	// ErrNoLeader is returned by an Election's Leader when nobody leads it.
	ErrNoLeader = errs.ErrNoLeader
)

// Errors for nil arguments: programming errors, reported instead of a panic.
var (
	errNilContext   = errors.New("fairlock: nil context")
	errNilMutex     = errors.New("fairlock: nil Mutex")
	errNilClient    = errors.New("fairlock: Mutex of a nil Client")
	errNilMultiLock = errors.New("fairlock: nil MultiLock")
	errNilSemaphore = errors.New("fairlock: nil Semaphore, or one of a nil Client")
	errNilRWMutex   = errors.New("fairlock: nil RWMutex, or one of a nil Client")
	// errNilClientCall is returned by the Client's own methods when it is
	// nil.
	errNilClientCall = errors.New("fairlock: nil Client")
)

// errorsIsNotHeld reports whether err is ErrNotHeld: a re-entry of a hold
// that was unlocked, which is no hold to re-enter.
func errorsIsNotHeld(err error) bool { return errors.Is(err, ErrNotHeld) }
