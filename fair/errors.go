package fair

import "errors"

// Sentinel errors. The root package re-exports them under the same names.
var (
	// ErrLocked: TryLock found the lock held by another owner, or waiters
	// in line for it.
	ErrLocked = errors.New("fairlock: locked by another owner")
	// ErrNotHeld: the caller's context carries no live hold of the lock.
	ErrNotHeld = errors.New("fairlock: lock not held")
	// ErrLeaseLost: the hold's lease ran out or its key vanished, so the
	// lock may now belong to someone else. It is the cause of the hold's
	// context.
	ErrLeaseLost = errors.New("fairlock: lease lost")
	// ErrClosed: the Client was closed.
	ErrClosed = errors.New("fairlock: client closed")
)

// redisError reports whether err is an error reply from the server (a
// script error, WRONGTYPE, NOSCRIPT left unresolved, ...), as opposed to a
// network or client error that may pass.
func redisError(err error) bool {
	var re interface{ RedisError() }
	return errors.As(err, &re)
}
