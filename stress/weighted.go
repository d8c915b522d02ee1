package main

import (
	"context"
	"errors"

	"github.com/fairlock/fairlock"
)

// The attempts of the semaphore and rwmutex kinds: each takes one name's
// Semaphore (some of its permits) or RWMutex (its read or its write
// lock), with the calls and the record of a Mutex's attempt (lockOne),
// and holds it in the way of its kind.

// permits is n permits of a Semaphore, as an attempt takes them.
type permits struct {
	s *fairlock.Semaphore
	n int64
}

var _ single = permits{}

func (p permits) Lock(ctx context.Context) (context.Context, error) {
	return p.s.Acquire(ctx, p.n)
}

func (p permits) TryLock(ctx context.Context) (context.Context, error) {
	return p.s.TryAcquire(ctx, p.n)
}

func (p permits) Unlock(ctx context.Context) error         { return p.s.Release(ctx) }
func (p permits) Token(ctx context.Context) (int64, error) { return p.s.Token(ctx) }
func (p permits) Name() string                             { return p.s.Name() }

// readLock is the read lock of a RWMutex, as an attempt takes it; the
// RWMutex itself is its write lock.
type readLock struct{ rw *fairlock.RWMutex }

var (
	_ single = readLock{}
	_ single = (*fairlock.RWMutex)(nil)
)

func (r readLock) Lock(ctx context.Context) (context.Context, error)    { return r.rw.RLock(ctx) }
func (r readLock) TryLock(ctx context.Context) (context.Context, error) { return r.rw.TryRLock(ctx) }
func (r readLock) Unlock(ctx context.Context) error                     { return r.rw.RUnlock(ctx) }
func (r readLock) Token(ctx context.Context) (int64, error)             { return r.rw.Token(ctx) }
func (r readLock) Name() string                                         { return r.rw.Name() }

// semaphoreAttempt takes 1 to cfg.Permits permits (uniform) of a random
// name's Semaphore, holds them and releases them. A Semaphore's hold is
// not re-entrant: where the plan would re-enter, one Acquire with the
// held context checks that it is refused with ErrWouldDeadlock.
func (w *worker) semaphoreAttempt(cfg *config, rec recorder) {
	s := w.sems[w.rng.IntN(len(w.sems))]
	n := 1 + w.rng.Int64N(cfg.Permits)
	p := w.draw(cfg)
	l := permits{s, n}
	w.lockOne(l, attempt{Type: runSemaphore, Permits: cfg.Permits, Weight: n}, p, cfg, rec, func(held context.Context, token int64) {
		if p.depth > 0 {
			w.refused(held, func() (context.Context, error) { return s.Acquire(held, n) }, l.Unlock)
		}
		w.hold(holding{held: held, release: l.Unlock}, p.holdFor, 0)
	})
}

// rwAttempt takes the read lock (a fraction cfg.Readers of the attempts)
// or the write lock of a random name's RWMutex, holds it and unlocks it.
// A reader re-enters with RLock, and where it would re-enter checks once
// that Lock with its context is refused (a read hold is never upgraded);
// a writer re-enters with Lock or RLock, each half the time, and a
// fraction cfg.Downgrade of the writers downgrade at the end: RLock with
// the held context, then Unlock of the write level, the read level held
// for the second half of the hold time.
func (w *worker) rwAttempt(cfg *config, rec recorder) {
	rw := w.rws[w.rng.IntN(len(w.rws))]
	write := w.rng.Float64() >= cfg.Readers
	p := w.draw(cfg)
	if !write {
		r := readLock{rw}
		w.lockOne(r, attempt{Type: runRWMutex}, p, cfg, rec, func(held context.Context, token int64) {
			if p.depth > 0 {
				w.refused(held, func() (context.Context, error) { return rw.Lock(held) }, rw.Unlock)
			}
			w.hold(holding{held: held, nest: reenter(r), same: w.sameToken(rw, token), release: r.Unlock}, p.holdFor, p.depth)
		})
		return
	}
	down := w.rng.Float64() < cfg.Downgrade
	w.lockOne(rw, attempt{Type: runRWMutex, Write: true}, p, cfg, rec, func(held context.Context, token int64) {
		h := holding{
			held: held,
			nest: func(held context.Context) (context.Context, func(context.Context) error, error) {
				if w.rng.IntN(2) == 0 {
					return reenter(readLock{rw})(held)
				}
				return reenter(rw)(held)
			},
			same:    w.sameToken(rw, token),
			release: rw.Unlock,
		}
		if down {
			h.downgrade = reenter(readLock{rw})
		}
		w.hold(h, p.holdFor, p.depth)
	})
}

// refused checks that take, a call with the held context of a hold that
// must not be re-entered that way, fails with ErrWouldDeadlock, and
// counts it. A call that took the lock is a failure of the attempt, and
// its hold is given back with unlock.
func (w *worker) refused(held context.Context, take func() (context.Context, error), unlock func(context.Context) error) {
	ictx, err := take()
	switch {
	case err == nil:
		w.fail("a call with the held context took the lock again where it must fail with ErrWouldDeadlock")
		if err := unlock(ictx); err != nil {
			w.fail("giving it back: %v", err)
		}
	case errors.Is(err, fairlock.ErrWouldDeadlock):
		w.update(func(a *attempt) { a.Refused++ })
	case errors.Is(err, fairlock.ErrLeaseLost) || errors.Is(context.Cause(held), fairlock.ErrLeaseLost):
		// Reported by the hold step.
	default:
		w.fail("a call with the held context failed with %v, not ErrWouldDeadlock", err)
	}
}
