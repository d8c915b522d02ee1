package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
)

// The multi workload takes several names at once. fairlock has a call for
// it, MultiLock, which on one server, as here, joins every name's line at
// once with one ticket and is granted every name at once, so it never has
// to give up and try again (on a Cluster or a Ring it takes the names one
// after another, in one order that every Client follows). Neither peer
// has one in a release (bsm/redislock's ObtainMulti is on its main branch
// only, after v0.9.4, the latest release), so each takes the names with
// tryAll, a loop in the manner of Redisson's RedissonMultiLock built on
// the peer's own single-name try. The kind of call ObtainMulti is, one
// script that takes every name or none, runs as the atomic try-all
// (atomic.go).

// errTaken is what a single-name try returns when another owner holds the
// name.
var errTaken = errors.New("taken")

// tryOne tries once to take the lock called name, without waiting, and
// returns the function that releases it, or errTaken.
type tryOne func(ctx context.Context, name string) (release func(context.Context) error, err error)

// tryAll takes every name of names, in the order given, with tryTake:
// when a name is taken, it gives back the names it took, waits a random
// time from 0 to maxWait, and starts again from the first name.
func tryAll(ctx context.Context, names []string, maxWait time.Duration, try tryOne) (func(context.Context) error, int64, error) {
	return tryTake(ctx, names, len(names), maxWait, try)
}

// tryTake takes n of names. Each attempt tries the names in the order
// given, once each and without waiting, passes over those taken, and
// stops when it holds n or when the names left cannot make up n; then it
// gives back what it took, waits a random time from 0 to maxWait, and
// starts again from the first name. It returns once it holds n names,
// with the function that releases them (the last taken first), or when a
// try fails otherwise or ctx ends; and in both cases the attempts it
// started. n must be between 1 and len(names).
func tryTake(ctx context.Context, names []string, n int, maxWait time.Duration, try tryOne) (func(context.Context) error, int64, error) {
	if n < 1 || n > len(names) {
		return nil, 0, fmt.Errorf("take %d of %d names", n, len(names))
	}
	var attempts int64
	for {
		attempts++
		held := make([]func(context.Context) error, 0, n)
		var err error
		for i := 0; i < len(names) && len(held) < n && len(held)+len(names)-i >= n; i++ {
			release, terr := try(ctx, names[i])
			if terr == nil {
				held = append(held, release)
			} else if !errors.Is(terr, errTaken) {
				err = terr
				break
			}
		}
		unlock := releaseAll(held)
		if err == nil && len(held) == n {
			return unlock, attempts, nil
		}
		if uerr := unlockWithin(unlock, false); uerr != nil {
			return nil, attempts, errors.Join(err, uerr)
		}
		if err != nil {
			return nil, attempts, err
		}
		if err := sleep(ctx, randomWait(maxWait)); err != nil {
			return nil, attempts, err
		}
	}
}

// releaseAll returns the function that calls each release, the last first,
// and joins their errors.
func releaseAll(releases []func(context.Context) error) func(context.Context) error {
	return func(ctx context.Context) error {
		var errs []error
		for i := len(releases) - 1; i >= 0; i-- {
			errs = append(errs, releases[i](ctx))
		}
		return errors.Join(errs...)
	}
}

// randomWait returns a random duration from 0 to max, or 0 when max is
// not positive.
func randomWait(max time.Duration) time.Duration {
	if max <= 0 {
		return 0
	}
	return rand.N(max + 1)
}

// sleep waits for d, or returns ctx's error when ctx ends first.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// lockAll takes names with one MultiLock: a single call, which waits in
// every name's line at once with one ticket and makes one attempt.
func (f fairLocker) lockAll(ctx context.Context, names []string) (func(context.Context) error, int64, error) {
	ml := f.c.MultiLock(names)
	held, err := ml.Lock(ctx)
	if err != nil {
		return nil, 1, err
	}
	// Unlock is bounded by the Client's call timeout, not by a context.
	return func(context.Context) error { return ml.Unlock(held) }, 1, nil
}

// lockAll takes names with tryAll, each name with tryOnce.
func (r redsyncLocker) lockAll(ctx context.Context, names []string) (func(context.Context) error, int64, error) {
	return tryAll(ctx, names, r.multiWait, r.tryOnce)
}

// tryOnce is a tryOne: a redsync Mutex's TryLockContext.
func (r redsyncLocker) tryOnce(ctx context.Context, name string) (func(context.Context) error, error) {
	m := r.rs.NewMutex(name, r.opts...)
	if err := m.TryLockContext(ctx); err != nil {
		if _, taken := errors.AsType[*redsync.ErrTaken](err); taken {
			return nil, errTaken
		}
		return nil, err
	}
	return redsyncUnlock(m), nil
}

// lockAll takes names with tryAll, each name with tryOnce.
func (r redislockLocker) lockAll(ctx context.Context, names []string) (func(context.Context) error, int64, error) {
	return tryAll(ctx, names, r.multiWait, r.tryOnce)
}

// tryOnce is a tryOne: one redislock Obtain that does not retry.
func (r redislockLocker) tryOnce(ctx context.Context, name string) (func(context.Context) error, error) {
	l, err := r.c.Obtain(ctx, name, r.ttl, nil) // nil options: no retry
	if errors.Is(err, redislock.ErrNotObtained) {
		return nil, errTaken
	}
	if err != nil {
		return nil, err
	}
	return l.Release, nil
}
