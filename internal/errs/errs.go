// Package errs defines fairlock's sentinel errors, once. Package fairlock
// re-exports each of the first set under the same name (errs.ErrLocked is
// fairlock.ErrLocked) and documents there what it means for a caller; the
// building blocks return these very values, so errors.Is holds across the
// layers.
package errs

import "errors"

// The sentinel errors; see their documentation in package fairlock.
var (
	ErrLocked        = errors.New("fairlock: locked by another owner")
	ErrNotHeld       = errors.New("fairlock: lock not held")
	ErrLeaseLost     = errors.New("fairlock: lease lost")
	ErrClosed        = errors.New("fairlock: client closed")
	ErrUnsafeServer  = errors.New("fairlock: redis server cannot keep locks safely")
	ErrNoPermission  = errors.New("fairlock: redis user lacks a permission")
	ErrNotReplicated = errors.New("fairlock: not acknowledged by enough replicas")
	ErrInvalidName   = errors.New("fairlock: invalid lock name")
	ErrInvalidPrefix = errors.New("fairlock: invalid key prefix")
	ErrInvalidOwner  = errors.New("fairlock: invalid owner id")
	ErrInvalidOption = errors.New("fairlock: invalid option")
	ErrTooManyNames  = errors.New("fairlock: too many lock names")
	ErrPermits       = errors.New("fairlock: semaphore capacity differs from the one in redis")
	ErrWouldDeadlock = errors.New("fairlock: the call would wait for a hold its own context carries")
	ErrNoQuorum      = errors.New("fairlock: no majority of masters answered")
	ErrUnavailable   = errors.New("fairlock: redis did not answer in time")
	ErrLayout        = errors.New("fairlock: the keys under the prefix have another layout")
	ErrInvalidValue  = errors.New("fairlock: invalid election value")
	ErrNoLeader      = errors.New("fairlock: the election has no leader")
)

// ErrUnexpectedReply says Redis answered something fairlock does not read:
// a lock's keys written by something else, a script of another version, or
// a proxy that changed the reply. The errors that wrap it quote what was
// read. Package fairlock does not re-export it: no caller can act on it
// but by reporting it.
var ErrUnexpectedReply = errors.New("fairlock: unexpected reply from redis")

// Reply returns the message of an error reply from the server (go-redis
// marks those with a RedisError method), and false when err is none: a
// network error, a context's, or nil.
func Reply(err error) (string, bool) {
	if err == nil {
		return "", false // before the errors.As below, whose target escapes
	}
	var re interface{ RedisError() }
	if !errors.As(err, &re) {
		return "", false
	}
	e, _ := re.(error)
	if e == nil {
		return "", false
	}
	return e.Error(), true
}
