package fair

import (
	"context"
	"errors"
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
// deadline is honoured, and the cleanup goes on in the background; Close
// waits for it.
const cleanupGrace = 250 * time.Millisecond

// outcome is the result of one acquire call.
type outcome struct {
	rep queue.Reply
	err error
}

// callWithin runs one acquire detached from ctx (see call), but returns as
// soon as ctx ends, with ctx's error, or as soon as the engine starts to
// close, with errs.ErrClosed. A call still in flight then is never abandoned:
// it goes on in the background, and orphan receives its outcome, to undo
// what it did. Must run within an operation of the engine (begin), so
// that Close waits for the orphan.
//
// A ctx that can never end (its Done is nil, as for context.Background)
// gives nothing to return early for but Close, so the call runs on the
// caller's goroutine: a Close meanwhile is answered when the call is (a
// grant then finds the engine closed and is given back; see hold), at the
// latest at the bound of Close, which cuts every call short.
func (l *Mutex) callWithin(ctx context.Context, req Request, entry, mode string, orphan func(queue.Reply, error)) (queue.Reply, error) {
	if ctx.Done() == nil {
		return l.call(ctx, req, entry, mode)
	}
	done := make(chan outcome, 1)
	go func() {
		rep, err := l.call(ctx, req, entry, mode)
		done <- outcome{rep, err}
	}()
	var err error
	select {
	case o := <-done:
		return o.rep, o.err
	case <-ctx.Done():
		err = ctx.Err()
	case <-l.e.closing:
		err = errs.ErrClosed
	}
	l.e.wg.Go(func() {
		o := <-done
		orphan(o.rep, o.err)
	})
	return queue.Reply{}, err
}

// giveBackIfGranted is the orphan of a call that was not queued: a grant
// it made is given back, acknowledged by the replicas or not (then
// without waiting for them: see giveBackUnacked).
func (l *Mutex) giveBackIfGranted(ctx context.Context, req Request) func(queue.Reply, error) {
	return func(rep queue.Reply, err error) {
		switch {
		case err == nil && rep.Granted:
			_ = l.giveBack(ctx, req)
		case unacked(err) && rep.Granted:
			_ = l.giveBackUnacked(ctx, req)
		}
	}
}

// leaveQueue is the orphan of a poll of a waiter that gave up: a grant the
// poll made is given back, and the entry leaves the queue.
func (l *Mutex) leaveQueue(ctx context.Context, req Request, entry string) func(queue.Reply, error) {
	return func(rep queue.Reply, err error) {
		l.giveBackIfGranted(ctx, req)(rep, err)
		_ = l.giveUp(ctx, req.Owner, entry)
	}
}

// sendAgain calls send, each time on a fresh detached context, with a
// backoff of retryMin doubling to retryMax before each call, until send
// reports that it is done, until the time until has passed, or until the
// engine closes. It reports which of the first two ended it (done), or
// that the engine closed. Run it in a goroutine the engine waits for.
func (e *Engine) sendAgain(until time.Time, send func(ctx context.Context) (done bool)) (done, closed bool) {
	retry := retryMin
	for {
		t := time.NewTimer(retry)
		select {
		case <-t.C:
		case <-e.closing:
			t.Stop()
			return false, true
		}
		if !time.Now().Before(until) {
			return false, false
		}
		ctx, cancel := e.detached(context.Background())
		done := send(ctx)
		cancel()
		if done {
			return true, false
		}
		retry = min(2*retry, retryMax)
	}
}

// soon runs cleanup in the background and waits for it at most
// cleanupGrace. It returns cleanup's error, or nil when it is still
// running (its failure is logged by cleanup itself). Must run within an
// operation of the engine (begin).
func (l *Mutex) soon(cleanup func() error) error {
	done := make(chan error, 1)
	l.e.wg.Go(func() { done <- cleanup() })
	t := time.NewTimer(cleanupGrace)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
		return nil
	}
}

// errStillGivingBack is settle's error when its cleanup has not finished.
var errStillGivingBack = errors.New("fairlock: the primary has not answered the give-back yet; it is still sent in the background")

// settle runs cleanup in the background and waits for it until it is
// done, or until cleanupGrace after ctx ended (at once when it already
// has). It returns cleanup's error, or errStillGivingBack when cleanup is
// still running then (its failure is logged by cleanup itself). Must run
// within an operation of the engine (begin).
func (l *Mutex) settle(ctx context.Context, cleanup func() error) error {
	done := make(chan error, 1)
	l.e.wg.Go(func() { done <- cleanup() })
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	t := time.NewTimer(cleanupGrace)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
		return errStillGivingBack
	}
}
