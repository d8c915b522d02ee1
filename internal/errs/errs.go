// Package errs defines fairlock's sentinel errors, once. Package fairlock
// re-exports each as ErrX (errs.Locked is fairlock.ErrLocked) and
// documents there what it means for a caller; the building blocks return
// these very values, so errors.Is holds across the layers.
package errs

import "errors"

// The sentinel errors; see their ErrX names in package fairlock.
var (
	Locked        = errors.New("fairlock: locked by another owner")
	NotHeld       = errors.New("fairlock: lock not held")
	LeaseLost     = errors.New("fairlock: lease lost")
	Closed        = errors.New("fairlock: client closed")
	UnsafeServer  = errors.New("fairlock: redis server cannot keep locks safely")
	NoPermission  = errors.New("fairlock: redis user lacks a permission")
	NotReplicated = errors.New("fairlock: not acknowledged by enough replicas")
	InvalidName   = errors.New("fairlock: invalid lock name")
	InvalidPrefix = errors.New("fairlock: invalid key prefix")
	InvalidOwner  = errors.New("fairlock: invalid owner id")
	InvalidOption = errors.New("fairlock: invalid option")
)
