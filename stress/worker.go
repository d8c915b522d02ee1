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
	id     string
	client *fairlock.Client // the worker's client
	// One handle per lock name, of the worker's client, of the run's kind:
	// Mutexes (the mutex and multilock kinds), Semaphores, RWMutexes or
	// Elections.
	mutexes   []*fairlock.Mutex
	sems      []*fairlock.Semaphore
	rws       []*fairlock.RWMutex
	elections []*fairlock.Election
	rng       *rand.Rand // used by the worker's goroutine only
	made      int        // attempts made: numbers an election candidate's value; used by the worker's goroutine only

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

// leaseLost notes that the attempt in progress lost the lease of its
// hold, and, the first time, when the worker saw it (attempt.Lost).
func (w *worker) leaseLost() {
	now := wall(time.Now())
	w.update(func(a *attempt) {
		if !a.LeaseLost {
			a.LeaseLost, a.Lost = true, now
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
	switch cfg.Kind {
	case runMultiLock:
		w.multiAttempt(cfg, rec)
	case runSemaphore:
		w.semaphoreAttempt(cfg, rec)
	case runRWMutex:
		w.rwAttempt(cfg, rec)
	case runElection:
		w.electionAttempt(cfg, rec)
	default:
		m := w.mutexes[w.rng.IntN(len(w.mutexes))]
		w.lockMutex(m, w.draw(cfg), cfg, rec)
	}
}

// single is a lock of one name as an attempt takes it: a Mutex, a
// Semaphore's permits, or a RWMutex's read or write lock.
type single interface {
	locker
	Unlock(ctx context.Context) error
	Token(ctx context.Context) (int64, error)
	Name() string
}

var _ single = (*fairlock.Mutex)(nil)

// lockMutex makes one attempt on m: TryLock or Lock (maybe with a short
// deadline), then, when granted, re-enters the hold, keeps it for a while
// and unlocks every level.
func (w *worker) lockMutex(m *fairlock.Mutex, p plan, cfg *config, rec recorder) {
	w.lockOne(m, attempt{}, p, cfg, rec, func(held context.Context, token int64) {
		w.hold(holding{
			held:    held,
			nest:    reenter(m),
			same:    w.sameToken(m, token),
			release: m.Unlock,
		}, p.holdFor, p.depth)
	})
}

// lockOne makes one attempt on l, recorded from a (its description of a
// Semaphore's or RWMutex's attempt; empty for a Mutex's): the call of its
// plan, then, when granted, keep with the held context and the hold's
// token, which holds the lock and unlocks it.
func (w *worker) lockOne(l single, a attempt, p plan, cfg *config, rec recorder, keep func(held context.Context, token int64)) {
	a.Worker, a.Lock, a.Kind, a.Outcome = w.id, l.Name(), p.kind, outPending
	if !w.begin(&a) {
		return
	}
	defer w.finish(rec)
	broken := false // a poll came too late to be sure of the place; used under w.mu
	ctx := context.WithValue(context.Background(), steps{}, func(e fairlock.Event) {
		if e.Call != "" {
			w.update(func(a *attempt) {
				if a.Granted.IsZero() { // not a re-entry's
					a.Call = e.Call
				}
			})
		}
		switch e.Kind {
		case fairlock.EventWaitStarted:
			// The call has sent nothing yet; a re-entry's call comes
			// later, under the hold.
			now := wall(e.At)
			w.update(func(a *attempt) {
				if a.Began.IsZero() {
					a.Began = now
				}
			})
		case fairlock.EventQueued:
			w.update(func(a *attempt) { a.Joins = append(a.Joins, join{Sent: wall(e.Sent), Answered: wall(e.Answered)}) })
		case fairlock.EventPolled:
			w.update(func(a *attempt) {
				a.keep(wall(e.Sent), wall(e.Answered), cfg.WaiterTTL, &broken)
				a.Polled = wall(e.Sent)
			})
		case fairlock.EventGranted:
			if e.HandOver > 0 {
				w.update(func(a *attempt) { a.Push = ms(e.HandOver) })
			}
		}
	})
	held, end := w.call(ctx, p, l)
	if held == nil {
		return
	}
	token, err := l.Token(held)
	w.update(func(a *attempt) { a.Granted, a.Token = end, token })
	switch {
	case errors.Is(err, fairlock.ErrLeaseLost):
		// A quorum hold's first Token commits the token to a majority,
		// and fails with the lease when it cannot.
		w.leaseLost()
	case err != nil:
		w.fail("token: %v", err)
	}
	keep(held, token)
}

// sameToken returns the check of a nested level of a hold of l whose
// token is token: the level's context carries that token.
func (w *worker) sameToken(l interface {
	Token(context.Context) (int64, error)
}, token int64) func(context.Context) {
	return func(ictx context.Context) {
		if t, err := l.Token(ictx); err != nil || t != token {
			w.fail("re-entry has token %d (%v), the hold %d", t, err, token)
		}
	}
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
		case a.Type == runElection && errors.Is(err, fairlock.ErrLeaseLost):
			// A quorum's Campaign commits the term before it returns,
			// and gives the leadership back when it cannot: the lease
			// was lost, as a hold's may be.
			a.Outcome, a.LeaseLost, a.Lost = outFailed, true, end
		default:
			a.Outcome = outFailed
			a.Err = err.Error()
		}
	})
}

// holding is a granted lock as the hold step keeps it.
type holding struct {
	held context.Context // the context Lock returned
	// nest takes one more level of the hold with the held context: it
	// returns the level's context and the call that gives it back. nil:
	// the hold is not re-entered.
	nest    func(held context.Context) (context.Context, func(context.Context) error, error)
	same    func(context.Context)       // checks the tokens a nested level's context carries
	release func(context.Context) error // the outer Unlock
	// downgrade, when set, takes a read level with the held context (a
	// RWMutex's writer): the hold step then unlocks the write level with
	// release, keeps the read level for the second half of the hold time,
	// and gives it back with the returned call.
	downgrade func(held context.Context) (context.Context, func(context.Context) error, error)
}

// reenter returns the nesting of a hold of l: one more Lock with the
// held context, given back with Unlock.
func reenter(l interface {
	Lock(context.Context) (context.Context, error)
	Unlock(context.Context) error
}) func(context.Context) (context.Context, func(context.Context) error, error) {
	return func(held context.Context) (context.Context, func(context.Context) error, error) {
		ictx, err := l.Lock(held)
		return ictx, l.Unlock, err
	}
}

// hold keeps a granted lock (a Mutex's, a MultiLock's, a Semaphore's
// permits, a RWMutex's read or write lock): depth nested levels taken
// with the held context, each of which h.same checks carries the hold's
// tokens, a sleep of d (cut short if the hold ends), the nested Unlocks,
// a downgrade when h has one, then the outer Unlock.
func (w *worker) hold(h holding, d time.Duration, depth int) {
	held := h.held
	lost := func(err error) bool {
		if errors.Is(err, fairlock.ErrLeaseLost) {
			w.leaseLost()
			return true
		}
		return false
	}
	type level struct {
		ctx    context.Context
		unlock func(context.Context) error
	}
	var inner []level
	for i := 0; i < depth && h.nest != nil; i++ {
		ictx, unlock, err := h.nest(held)
		if err != nil {
			// A hold whose lease was lost fails re-entry with its
			// context's error: one event, reported once.
			if !lost(err) && !lost(context.Cause(held)) {
				w.fail("re-entry: %v", err)
			}
			break
		}
		h.same(ictx)
		inner = append(inner, level{ictx, unlock})
	}
	w.update(func(a *attempt) { a.Depth = len(inner) })

	if h.downgrade != nil {
		d /= 2 // the other half is held as a reader
	}
	pause.For(held, d) // the hold time, cut short if the hold is lost
	lost(context.Cause(held))
	for i := len(inner) - 1; i >= 0; i-- {
		if err := inner[i].unlock(inner[i].ctx); err != nil && !lost(err) {
			w.fail("nested unlock: %v", err)
		}
	}
	last, release := held, h.release
	if h.downgrade != nil {
		last, release = w.downgrade(h, d, lost)
	}
	w.update(func(a *attempt) { a.UnlockStart = wall(time.Now()) })
	err := release(last)
	w.update(func(a *attempt) {
		a.UnlockEnd = wall(time.Now())
		a.Outcome = outGranted
	})
	if err != nil && !lost(err) {
		w.fail("unlock: %v", err)
	}
}

// downgrade takes the read level of h under its write hold, unlocks the
// write level (recording when), and keeps the read level for d. It
// returns the context whose hold the outer Unlock then ends and that
// Unlock: the read level's, or the write hold's when the read level
// could not be taken.
func (w *worker) downgrade(h holding, d time.Duration, lost func(error) bool) (context.Context, func(context.Context) error) {
	rctx, runlock, err := h.downgrade(h.held)
	if err != nil {
		if !lost(err) && !lost(context.Cause(h.held)) {
			w.fail("read level under the write hold: %v", err)
		}
		return h.held, h.release
	}
	h.same(rctx)
	w.update(func(a *attempt) { a.Downgrade = wall(time.Now()) })
	if err := h.release(h.held); err != nil && !lost(err) {
		w.fail("unlock of the write level: %v", err)
	}
	switch {
	case h.held.Err() == nil:
		w.fail("the write hold's context goes on after its last Unlock")
	case rctx.Err() != nil && !lost(context.Cause(rctx)):
		w.fail("the read level ended with the write level: %v", context.Cause(rctx))
	}
	h.same(rctx) // the read level keeps the write hold's token
	pause.For(rctx, d)
	lost(context.Cause(rctx))
	return rctx, runlock
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
