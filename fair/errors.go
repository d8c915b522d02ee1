package fair

import (
	"errors"
	"strings"
)

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

// transient reports whether err is an error reply that a retry may get
// past: the server is loading its data set, busy with a script, in the
// middle of a failover or of a slot migration, or no longer the primary.
// A waiting Lock keeps its place through these, as through network errors.
func transient(err error) bool {
	if !redisError(err) {
		return false
	}
	msg := err.Error()
	for _, p := range []string{"LOADING", "BUSY", "TRYAGAIN", "CLUSTERDOWN", "MASTERDOWN", "READONLY", "NOREPLICAS"} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}
