package fair

import (
	"context"
	"time"

	"github.com/fairlock/fairlock/queue"
)

// Locker is one named lock as the root package uses it, whichever engine
// runs it: a Mutex of an Engine (one Redis deployment) or a QMutex of a
// Quorum (N independent masters). Both keep the same contract; only the
// way they reach Redis differs.
type Locker interface {
	// Take waits in line for a fresh hold of req.Owner (or, without
	// req.Wait, tries once), as Mutex.Lock does.
	Take(ctx context.Context, req Request) (Held, error)
	// Took reports whether h was taken through this lock's engine, which
	// makes it a hold of this very lock when its keys are the same.
	Took(h Held) bool
	// Holds reports whether Redis, as this lock's engine reaches it, has
	// h as the hold of this lock: a hold taken through another engine
	// (another Client) of the same deployment.
	Holds(ctx context.Context, h Held) (bool, error)
	// HoldCount returns the levels owner holds in Redis.
	HoldCount(ctx context.Context, owner string) (int, error)
	// IsLocked reports whether anyone holds the lock.
	IsLocked(ctx context.Context) (bool, error)
	// TTL returns the lease left of the current hold, 0 when free; held,
	// when not nil, is the live hold of this lock the caller carries.
	TTL(ctx context.Context, held Held) (time.Duration, error)
	// ForceUnlock removes the hold whoever owns it.
	ForceUnlock(ctx context.Context) (bool, error)
}

// Held is one owner's hold of a lock in this process, whichever engine
// took it (a Hold or a QHold).
type Held interface {
	// Context is cancelled when the hold ends, with its cause.
	Context() context.Context
	// Owner returns the hold's owner id.
	Owner() string
	// Enter takes one more level (a re-entry).
	Enter(ctx context.Context) error
	// Unlock gives up one level; at the last the hold ends.
	Unlock(ctx context.Context) error
	// Token returns the hold's fencing token.
	Token(ctx context.Context) (int64, error)
}

var (
	_ Locker = (*Mutex)(nil)
	_ Locker = (*QMutex)(nil)
	_ Held   = (*Hold)(nil)
	_ Held   = (*QHold)(nil)
)

// Take is Lock, as a Locker.
func (l *Mutex) Take(ctx context.Context, req Request) (Held, error) {
	h, err := l.Lock(ctx, req)
	if err != nil {
		return nil, err
	}
	return h, nil
}

// Take is Lock, as a Locker.
func (l *QMutex) Take(ctx context.Context, req Request) (Held, error) {
	h, err := l.Lock(ctx, req)
	if err != nil {
		return nil, err
	}
	return h, nil
}

// Lock returns the lock called name of this engine, its keys made with
// prefix (see queue.For).
func (e *Engine) Lock(prefix, name string) (queue.Keys, Locker, error) {
	keys, err := queue.For(prefix, name)
	if err != nil {
		return keys, nil, err
	}
	return keys, e.Mutex(keys), nil
}

// Lock returns the lock called name of this Quorum, its keys made with
// prefix (see queue.Quorum).
func (qm *Quorum) Lock(prefix, name string) (queue.Keys, Locker, error) {
	keys, err := queue.Quorum(prefix, name)
	if err != nil {
		return keys, nil, err
	}
	return keys, qm.Mutex(keys), nil
}
