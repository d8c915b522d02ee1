package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/internal/pause"
)

// worker is one goroutine making attempts, one after the other, on the
// locks of its client.
type worker struct {
	id      string
	client  *fairlock.Client  // the worker's client
	mutexes []*fairlock.Mutex // one per lock name, of the worker's client
	rng     *rand.Rand        // used by the worker's goroutine only

	mu        sync.Mutex
	cur       *attempt // the attempt in progress; guarded by mu
	abandoned bool     // the run ended without the worker: results are dropped; guarded by mu
}

// wall strips the monotonic clock reading: times are compared across
// processes, so only the wall clock counts.
func wall(t time.Time) time.Time { return t.Round(0) }

// begin makes a the attempt in progress, unless the worker was abandoned.
func (w *worker) begin(a *attempt) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.abandoned {
		return false
	}
	w.cur = a
	return true
}

// update changes the attempt in progress.
func (w *worker) update(f func(a *attempt)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cur != nil {
		f(w.cur)
	}
}

// fail notes an unexpected error in the attempt in progress.
func (w *worker) fail(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	w.update(func(a *attempt) {
		if a.Err == "" {
			a.Err = msg
		} else {
			a.Err += "; " + msg
		}
	})
}

// finish records the attempt in progress, unless the worker was abandoned
// (the attempt was recorded as pending then).
func (w *worker) finish(rec recorder) {
	w.mu.Lock()
	a, dropped := w.cur, w.abandoned
	w.cur = nil
	w.mu.Unlock()
	if a != nil && !dropped {
		rec.Record(*a)
	}
}

// abandon stops the worker from recording anything more and returns a copy
// of its attempt in progress, marked pending, if it has one.
func (w *worker) abandon() (attempt, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.abandoned = true
	if w.cur == nil {
		return attempt{}, false
	}
	a := w.cur.clone()
	a.Outcome = outPending
	return a, true
}

// plan is what an attempt does, drawn before it starts.
type plan struct {
	kind     attemptKind
	giveUp   bool          // a Lock with a deadline: it may give up
	patience time.Duration // how long it waits, when giveUp
	holdFor  time.Duration
	depth    int // nested Lock calls with the held context
}

// draw draws the plan of an attempt from cfg.
func (w *worker) draw(cfg *config) plan {
	p := plan{kind: kindLock}
	if w.rng.Float64() < cfg.Try {
		p.kind = kindTry
	}
	p.giveUp = p.kind == kindLock && w.rng.Float64() < cfg.GiveUp
	p.patience = cfg.Patience.draw(w.rng)
	p.holdFor = cfg.Hold.draw(w.rng)
	p.depth = w.rng.IntN(cfg.Reentry + 1)
	return p
}

// attempt makes one attempt of the run's kind.
func (w *worker) attempt(cfg *config, rec recorder) {
	if cfg.Kind == runMultiLock {
		w.multiAttempt(cfg, rec)
		return
	}
	m := w.mutexes[w.rng.IntN(len(w.mutexes))]
	w.lockOne(m, w.draw(cfg), cfg, rec)
}

// lockOne makes one attempt on m: TryLock or Lock (maybe with a short
// deadline), then, when granted, re-enters the hold, keeps it for a while
// and unlocks every level.
func (w *worker) lockOne(m *fairlock.Mutex, p plan, cfg *config, rec recorder) {
	if !w.begin(&attempt{Worker: w.id, Lock: m.Name(), Kind: p.kind, Outcome: outPending}) {
		return
	}
	defer w.finish(rec)
	broken := false // a poll came too late to be sure of the place; used under w.mu
	ctx := context.WithValue(context.Background(), steps{}, func(e fairlock.Event) {
		switch e.Kind {
		case fairlock.Queued:
			w.update(func(a *attempt) { a.Joins = append(a.Joins, join{Sent: wall(e.Sent), Answered: wall(e.Answered)}) })
		case fairlock.Polled:
			w.update(func(a *attempt) { a.keep(wall(e.Sent), wall(e.Answered), cfg.WaiterTTL, &broken) })
		case fairlock.Granted:
			if e.HandOver > 0 {
				w.update(func(a *attempt) { a.Push = ms(e.HandOver) })
			}
		}
	})
	held, end := w.call(ctx, p, m)
	if held == nil {
		return
	}
	token, err := m.Token(held)
	w.update(func(a *attempt) { a.Granted, a.Token = end, token })
	if err != nil {
		w.fail("token: %v", err)
	}
	w.hold(m, held, func(ictx context.Context) {
		if t, err := m.Token(ictx); err != nil || t != token {
			w.fail("re-entry has token %d (%v), the hold %d", t, err, token)
		}
	}, p.holdFor, p.depth)
}

// locker is what an attempt calls: a Mutex or a MultiLock.
type locker interface {
	Lock(ctx context.Context) (context.Context, error)
	TryLock(ctx context.Context) (context.Context, error)
}

// call makes the call of the attempt in progress on l with ctx, as its
// plan says (Lock or TryLock, with a deadline when it may give up), and
// records its start and, when it fails, how. It returns the held context
// (nil when the call failed) and when the call returned.
func (w *worker) call(ctx context.Context, p plan, l locker) (context.Context, time.Time) {
	ctx, cancel := w.started(ctx, p)
	defer cancel()
	var held context.Context
	var err error
	if p.kind == kindTry {
		held, err = l.TryLock(ctx)
	} else {
		held, err = l.Lock(ctx)
	}
	end := wall(time.Now())
	if err != nil {
		w.failed(p, end, err)
		return nil, end
	}
	return held, end
}

// started records the start of the attempt in progress, now, and returns
// the context of its call: ctx, with the deadline of a Lock that may give
// up.
func (w *worker) started(ctx context.Context, p plan) (context.Context, context.CancelFunc) {
	cancel := context.CancelFunc(func() {})
	start := time.Now()
	if p.giveUp {
		deadline := start.Add(p.patience)
		ctx, cancel = context.WithDeadline(ctx, deadline)
		w.update(func(a *attempt) { a.Deadline = wall(deadline) })
	}
	w.update(func(a *attempt) { a.Start = wall(start) })
	return ctx, cancel
}

// failed records how the call of the attempt in progress failed with err,
// returning at end.
func (w *worker) failed(p plan, end time.Time, err error) {
	w.update(func(a *attempt) {
		a.Ended = end
		switch {
		case p.kind == kindTry && errors.Is(err, fairlock.ErrLocked):
			a.Outcome = outTryFailed
		case p.giveUp && errors.Is(err, context.DeadlineExceeded):
			// If leaving the queue failed too, the entry is left in
			// Redis: the final inspection reports it.
			a.Outcome = outGaveUp
		default:
			a.Outcome = outFailed
			a.Err = err.Error()
		}
	})
}

// hold keeps a granted lock (a Mutex's, or a MultiLock's): depth nested
// Lock calls with the held context, each of which sameTokens checks
// carries the hold's tokens, a sleep of d (cut short if the hold ends),
// the nested Unlocks, then the outer Unlock.
func (w *worker) hold(m interface {
	Lock(context.Context) (context.Context, error)
	Unlock(context.Context) error
}, held context.Context, sameTokens func(context.Context), d time.Duration, depth int) {
	lost := func(err error) bool {
		if errors.Is(err, fairlock.ErrLeaseLost) {
			w.update(func(a *attempt) { a.LeaseLost = true })
			return true
		}
		return false
	}
	inner := make([]context.Context, 0, depth)
	for range depth {
		ictx, err := m.Lock(held)
		if err != nil {
			// A hold whose lease was lost fails re-entry with its
			// context's error: one event, reported once.
			if !lost(err) && !lost(context.Cause(held)) {
				w.fail("re-entry: %v", err)
			}
			break
		}
		sameTokens(ictx)
		inner = append(inner, ictx)
	}
	w.update(func(a *attempt) { a.Depth = len(inner) })

	pause.For(held, d) // the hold time, cut short if the hold is lost
	lost(context.Cause(held))
	for i := len(inner) - 1; i >= 0; i-- {
		if err := m.Unlock(inner[i]); err != nil && !lost(err) {
			w.fail("nested unlock: %v", err)
		}
	}
	w.update(func(a *attempt) { a.UnlockStart = wall(time.Now()) })
	err := m.Unlock(held)
	w.update(func(a *attempt) {
		a.UnlockEnd = wall(time.Now())
		a.Outcome = outGranted
	})
	if err != nil && !lost(err) {
		w.fail("unlock: %v", err)
	}
}

// steps is the context key of an attempt's record of its own waiting
// steps: a func(fairlock.Event).
type steps struct{}

// attemptObserver is every stress Client's Observer: it hands each event
// of a Lock call to the record its context carries (only the stress
// attempts' contexts carry one, and only Lock calls' events go there).
var attemptObserver = fairlock.ObserverFunc(func(ctx context.Context, e fairlock.Event) {
	if record, ok := ctx.Value(steps{}).(func(fairlock.Event)); ok {
		record(e)
	}
})
