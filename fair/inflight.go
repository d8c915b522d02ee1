package fair

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/fairlock/fairlock/internal/errs"
	"github.com/fairlock/fairlock/queue"
)

// cleanupGrace is how long a caller whose context has ended waits for the
// cleanup of its Lock call (leaving the queue, giving back a grant that
// raced with the end). On a healthy server that is one round trip, done
// well within the grace, so Redis keeps nothing of the caller when Lock
// returns. On a server that does not answer (paused, cut off), Lock
// returns after the grace with the context's error, so the caller's
// deadline is honoured (within a quarter of a second, with room for the
// scheduling of a loaded machine), and the cleanup goes on in the
// background; Close waits for it.
const cleanupGrace = 200 * time.Millisecond

// flight is one call to Redis made on a goroutine of the engine, which
// Close waits for, on behalf of callers that may stop waiting for it.
type flight[T any] struct {
	done chan struct{} // closed once the call has returned and val, err are set

	mu  sync.Mutex
	val T     // guarded by mu; the call's result, once over
	err error // guarded by mu
	// orphan, guarded by mu, receives the result of a call that its only
	// caller stopped waiting for before it returned.
	orphan func(T, error)
	over   bool // guarded by mu; the call has returned
}

// launch runs f on a goroutine that Close waits for, and returns its
// flight; nil when Close has started, and then f does not run. It may be
// called anywhere, within an operation of the engine or not.
func launch[T any](e *Engine, f func() (T, error)) *flight[T] {
	fl := &flight[T]{done: make(chan struct{})}
	if !e.goUnlessClosed(func() {
		v, err := f()
		fl.mu.Lock()
		fl.val, fl.err, fl.over = v, err, true
		orphan := fl.orphan
		fl.mu.Unlock()
		close(fl.done)
		if orphan != nil {
			orphan(v, err)
		}
	}) {
		return nil
	}
	return fl
}

// wait returns the call's result, or returns early: with ctx's error as
// soon as ctx ends, or with errs.ErrClosed as soon as the engine starts to
// close. On an early return, orphan (if not nil) receives the result once
// the call returns; a call that has returned by then gives its result to
// the caller instead, as if it had come first.
func (fl *flight[T]) wait(ctx context.Context, closing <-chan struct{}, orphan func(T, error)) (T, error) {
	v, _, err := fl.waitEarly(ctx, closing, orphan)
	return v, err
}

// waitEarly is wait, and also reports whether it returned early, leaving
// the call's result to orphan.
func (fl *flight[T]) waitEarly(ctx context.Context, closing <-chan struct{}, orphan func(T, error)) (T, bool, error) {
	var err error
	select {
	case <-fl.done:
	case <-ctx.Done():
		err = ctx.Err()
	case <-closing:
		err = errs.ErrClosed
	}
	fl.mu.Lock()
	defer fl.mu.Unlock()
	if !fl.over {
		fl.orphan = orphan
		var zero T
		return zero, true, err
	}
	return fl.val, false, fl.err
}

// within runs f on a goroutine of the engine (see launch) and returns its
// result, but returns as soon as ctx ends, with ctx's error, or as soon as
// the engine starts to close, with errs.ErrClosed: f then goes on in the
// background, Close waits for it, and orphan (if not nil) receives its
// result, to undo what it did. Once Close has started, f does not run and
// the error is errs.ErrClosed. So a caller's context bounds the call even
// while Redis does not answer, whatever the redis client's timeouts.
//
// A ctx that can never end (its Done is nil, as for context.Background)
// gives nothing to return early for but Close, so f runs on the caller's
// goroutine.
func within[T any](e *Engine, ctx context.Context, f func() (T, error), orphan func(T, error)) (T, error) {
	if ctx.Done() == nil {
		return f()
	}
	v, _, err := waitWithin(e, ctx, f, orphan)
	return v, err
}

// waitWithin is within for a ctx that can end, and also reports whether
// it returned early, leaving the call to orphan.
func waitWithin[T any](e *Engine, ctx context.Context, f func() (T, error), orphan func(T, error)) (T, bool, error) {
	fl := launch(e, f)
	if fl == nil {
		var zero T
		return zero, false, errs.ErrClosed
	}
	return fl.waitEarly(ctx, e.closing, orphan)
}

// shared is a call that callers share, such as the check of the server at
// the first Lock of a Client: the first caller starts it on a goroutine of
// the engine, callers that come while it runs join it, and each waits for
// it or for its own context. A caller that stops waiting leaves the call
// running for the others, and for the next caller to join.
type shared[T any] struct {
	mu sync.Mutex
	fl *flight[T] // guarded by mu; the call running, nil when none
}

// do joins the call running, or starts f, and waits for it as
// flight.wait does (with no orphan).
func (s *shared[T]) do(e *Engine, ctx context.Context, f func() (T, error)) (T, error) {
	s.mu.Lock()
	fl := s.fl
	if fl == nil {
		fl = launch(e, func() (T, error) {
			defer func() {
				s.mu.Lock()
				s.fl = nil
				s.mu.Unlock()
			}()
			return f()
		})
		s.fl = fl
	}
	s.mu.Unlock()
	if fl == nil {
		var zero T
		return zero, errs.ErrClosed
	}
	return fl.wait(ctx, e.closing, nil)
}

// callWithin runs one acquire detached from ctx (see call), but returns as
// soon as ctx ends, with ctx's error, or as soon as the engine starts to
// close, with errs.ErrClosed. A call still in flight then is never abandoned:
// it goes on in the background, and orphan receives its outcome, to undo
// what it did; Close waits for both (see within).
//
// A ctx that can never end (its Done is nil, as for context.Background)
// gives nothing to return early for but Close, so the call runs on the
// caller's goroutine: a Close meanwhile is answered when the call is (a
// grant then finds the engine closed and is given back; see hold), at the
// latest at the bound of Close, which cuts every call short.
//
// A call cut short that way returns only once orphan has undone what the
// call did, or cleanupGrace after ctx ended, whichever comes first: on a
// healthy server that is one round trip, so that Redis keeps nothing of
// a Lock that returns with ctx's error (no grant that raced with the end,
// no place in line); on a server that does not answer, the caller still
// gets its error within the grace.
func callWithin[G any](ln line[G], ctx context.Context, req Request, entry, mode string, orphan func(queue.Reply, error)) (queue.Reply, error) {
	e := ln.engine()
	call := func() (queue.Reply, error) { return ln.poll(ctx, req, entry, mode) }
	if ctx.Done() == nil {
		return within(e, ctx, call, orphan)
	}
	if deadline, ok := ctx.Deadline(); ok && e.inline && entry != "" && mode != queue.ModeReenter {
		return callInline(ln, ctx, deadline, req, entry, mode, orphan)
	}
	undone := make(chan error, 1)
	rep, early, err := waitWithin(e, ctx, call, func(rep queue.Reply, err error) {
		if orphan != nil {
			orphan(rep, err)
		}
		undone <- nil
	})
	if early {
		graced(undone)
	}
	return rep, err
}

// callInline is callWithin on the caller's goroutine, for a ctx with a
// deadline on a client that bounds each call by its context's deadline
// (see Engine.inline): every call is bounded by that deadline too (see
// withBound), so the caller still has its answer by then when Redis does
// not answer, without the goroutine and the two wake-ups that running the
// call on one of its own costs. A cancellation before the deadline is
// heard once Redis answers: an answer that comes is the caller's, as one
// that came before the cancellation would be. A call that failed once ctx
// had ended is undone: whatever a call under entry did is taken back
// (giveUp: out of the line, a grant to the entry given back), and orphan
// has its outcome, in the background; the caller waits cleanupGrace for
// that at most, and whatever the call did should Redis run it late, within
// a call timeout, is taken back then. A re-entry, whose entry is not its
// own, is not run here.
func callInline[G any](ln line[G], ctx context.Context, deadline time.Time, req Request, entry, mode string, orphan func(queue.Reply, error)) (queue.Reply, error) {
	e := ln.engine()
	select {
	case <-e.closing:
		return queue.Reply{}, errs.ErrClosed
	default:
	}
	rep, err := ln.poll(withBound(ctx, deadline), req, entry, mode)
	if err == nil || (ctx.Err() == nil && time.Now().Before(deadline)) {
		return rep, err
	}
	undone := make(chan error, 1)
	if e.goUnlessClosed(func() {
		_ = giveUp(ln, ctx, req.Owner, entry)
		if orphan != nil {
			orphan(rep, err)
		}
		undone <- nil
		// A call that Redis runs late (held up on its way past the
		// deadline) would leave a grant or a place: look once more, a call
		// timeout later, unless the engine closes first.
		t := time.NewTimer(e.cfg.CallTimeout)
		defer t.Stop()
		select {
		case <-t.C:
			_ = giveUp(ln, ctx, req.Owner, entry)
		case <-e.closing:
		}
	}) {
		graced(undone)
	}
	if ctx.Err() != nil {
		return queue.Reply{}, ctx.Err()
	}
	return queue.Reply{}, context.DeadlineExceeded // ctx's timer fires a moment after its deadline
}

// giveBackIfGranted is the orphan of a call that was not queued: a grant
// it made is given back, acknowledged by the replicas or not (then
// without waiting for them: see giveBackUnacked).
func giveBackIfGranted[G any](ln line[G], ctx context.Context, req Request) func(queue.Reply, error) {
	return func(rep queue.Reply, err error) {
		switch {
		case err == nil && rep.Granted:
			_ = ln.giveBack(ctx, req)
		case unacked(err) && rep.Granted:
			_ = ln.giveBackUnacked(ctx, req)
		}
	}
}

// leaveQueue is the orphan of a poll of a waiter that gave up: a grant the
// poll made is given back, and the entry leaves the queue. It returns
// the error of leaving (see giveUp).
func leaveQueue[G any](ln line[G], ctx context.Context, req Request, entry string) func(queue.Reply, error) error {
	return func(rep queue.Reply, err error) error {
		giveBackIfGranted(ln, ctx, req)(rep, err)
		return giveUp(ln, ctx, req.Owner, entry)
	}
}

// sendAgain calls send, each time on a fresh detached context, with a
// backoff of retryMin doubling to retryMax before each call, until send
// reports that it is done, until the time until has passed, or until the
// engine closes. It reports which of the first two ended it (done), or
// that the engine closed. Run it in a goroutine the engine waits for.
func (e *Engine) sendAgain(until time.Time, send func(ctx context.Context) (done bool)) (done, closed bool) {
	return resend(e.closing, until, func() bool {
		ctx, cancel := e.detached(context.Background())
		defer cancel()
		return send(ctx)
	})
}

// resend calls send with a backoff of retryMin doubling to retryMax
// before each call, until send reports that it is done, until the time
// until has passed, or until closing is closed. It reports which of the
// first two ended it (done), or that closing was. It serves an engine's
// re-sends (sendAgain) and a quorum hold's (QHold.sendRelease).
func resend(closing <-chan struct{}, until time.Time, send func() (done bool)) (done, closed bool) {
	retry := retryMin
	for {
		t := time.NewTimer(retry)
		select {
		case <-t.C:
		case <-closing:
			t.Stop()
			return false, true
		}
		if !time.Now().Before(until) {
			return false, false
		}
		if send() {
			return true, false
		}
		retry = min(2*retry, retryMax)
	}
}

// soon runs cleanup in the background and waits for it at most
// cleanupGrace. It returns cleanup's error, or nil when it is still
// running (its failure is logged by cleanup itself). Must run within an
// operation of the engine (begin).
func (e *Engine) soon(cleanup func() error) error {
	err, _ := graced(e.background(cleanup))
	return err
}

// errStillGivingBack is awaitCleanup's error when its cleanup has not finished.
var errStillGivingBack = errors.New("fairlock: the primary has not answered the give-back yet; it is still sent in the background")

// awaitCleanup runs cleanup in the background and waits for it until it is
// done, or until cleanupGrace after ctx ended (at once when it already
// has). It returns cleanup's error, or errStillGivingBack when cleanup is
// still running then (its failure is logged by cleanup itself). Must run
// within an operation of the engine (begin).
func (e *Engine) awaitCleanup(ctx context.Context, cleanup func() error) error {
	done := e.background(cleanup)
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	if err, ok := graced(done); ok {
		return err
	}
	return errStillGivingBack
}

// background runs f on a goroutine the engine waits for; its error
// arrives on the channel.
func (e *Engine) background(f func() error) <-chan error {
	done := make(chan error, 1)
	e.wg.Go(func() { done <- f() })
	return done
}

// graced waits for done at most cleanupGrace: its error and true, or
// false when it has not come by then.
// graceAfter returns a context with ctx's values that ends cleanupGrace
// after ctx ends: the bound of a clean-up that a caller who gave up still
// waits for a little, as awaitCleanup does.
func graceAfter(ctx context.Context) (context.Context, context.CancelFunc) {
	g, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, func() { time.AfterFunc(cleanupGrace, cancel) })
	return g, func() {
		stop()
		cancel()
	}
}

func graced(done <-chan error) (error, bool) {
	t := time.NewTimer(cleanupGrace)
	defer t.Stop()
	select {
	case err := <-done:
		return err, true
	case <-t.C:
		return nil, false
	}
}
