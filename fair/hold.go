package fair

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/fairlock/fairlock/internal/errs"
	"github.com/fairlock/fairlock/queue"
)

// Hold is one owner's hold of a lock in this process: the levels this
// process has taken, the fencing token, and the context that ends with
// the hold. Unless its lease is fixed, the engine's watchdog renews the
// lease every third of it until the hold ends.
type Hold struct {
	holdState // owner, lease, levels, end; its mu guards call too
	l         *Mutex
	token     int64

	call string // call id of the last level's release, once sent; guarded by mu
	// resending counts the releases of this hold being sent again in
	// the background (see goResend).
	resending atomic.Int32
	// valid is a time until which the hold lasts in Redis at least, and
	// span the length of the window that set it. Once watched, they are
	// written only by the renewal in flight, and handed from one renewal
	// to the next through the watchdog's mu.
	valid time.Time
	span  time.Duration
	// failing says that the last renewal failed, and failWarned that the
	// first failure of that stretch was logged at Warn. Written only by
	// the renewal in flight, as valid and span.
	failing, failWarned bool

	// Guarded by the watchdog's mu: when the next renewal (or a fixed
	// lease's end) is due, the hold's index in the watchdog's heap (-1
	// when out of it), and whether the hold ended and left it for good.
	next      time.Time
	slot      int
	unwatched bool
	again     bool // renew again once the renewal under way is settled (see renewNow)
	// waited is set once, before the hold is handed to its caller: the
	// Lock call waited in line for it (a hand-over).
	waited bool
	// handOver is set with waited: the hand-over's latency when it was
	// pushed with its time (see serverClock.latency), else 0.
	handOver time.Duration
	// observed is what the engine's observer is told of the hold; nil
	// when the engine has none. Set before the hold is handed out.
	observed *observedHold
	// fixedMargin is how long before valid a fixed lease ends here: twice
	// the round trip of the call that granted it (at least 5ms, at most a
	// tenth of the lease), so that the release sent at the end usually
	// reaches Redis before the key expires by itself, and the next waiter
	// is handed the lock by push rather than found by its next poll.
	fixedMargin time.Duration
}

// newHold returns the hold of a grant, known to last in Redis for span
// from the time from.
func newHold(l *Mutex, req Request, entry string, token int64, from time.Time, span time.Duration) *Hold {
	h := &Hold{
		l:           l,
		token:       token,
		slot:        -1,
		valid:       from.Add(span),
		span:        span,
		fixedMargin: min(max(2*time.Since(from), 5*time.Millisecond), span/10),
	}
	h.init(req, entry)
	return h
}

// start hands the hold to the engine's watchdog, and has it heed its
// revocation (see revoke.go).
func (h *Hold) start() {
	h.l.e.dog.watch(h)
	if h.entry != "" {
		h.heed()
	}
}

// Exclusive reports whether the hold is a RWMutex's write hold.
func (h *Hold) Exclusive() bool { return h.l.level.Excl }

// Token returns the fencing token of the hold, or an error wrapping
// errs.ErrNotHeld when the hold has ended. It is known in the process:
// ctx is not needed.
func (h *Hold) Token(context.Context) (int64, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ended {
		return 0, h.endedErr()
	}
	return h.token, nil
}

// Enter takes one more level of the hold (re-entry): one round trip that
// raises the owner's count in Redis. It fails with errs.ErrLeaseLost (or
// errs.ErrClosed) when the hold ended that way, or when Redis no longer knows
// it, and with errs.ErrNotHeld when the hold was unlocked (or its last Release
// is under way).
func (h *Hold) Enter(ctx context.Context) error {
	if !h.l.e.observing() {
		return h.enter(ctx)
	}
	return reentered(ctx, h.l.e.observe, h.l.keys.Name, h.owner, func() int64 { return h.token }, h.enter)
}

// enter is Enter without its events.
func (h *Hold) enter(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := h.l.e.begin(); err != nil {
		return err
	}
	defer h.l.e.ops.Done()
	h.mu.Lock()
	gone := h.gone()
	h.mu.Unlock()
	if gone != nil {
		return gone
	}

	req := Request{Owner: h.owner, Lease: h.callLease()}
	rep, err := callWithin(h.l, ctx, req, "", queue.ModeReenter, giveBackIfGranted(h.l, ctx, req))
	if err != nil && !unacked(err) {
		return err
	}
	if !rep.Granted {
		h.endLost("a re-entry found the hold gone in Redis", nil)
		h.l.e.rename() // the server may have lost its data
		return errs.ErrLeaseLost
	}
	if rep.Token != h.token {
		// The owner holds the lock again, under a newer token: our hold was
		// lost in between (another process sharing the owner id took it
		// anew). Give the level back and report the loss.
		h.endLost("a re-entry found the owner holding the lock under a newer token", nil)
		return errors.Join(errs.ErrLeaseLost, h.l.giveBack(ctx, Request{Owner: h.owner}))
	}
	if unacked(err) {
		// Counted on the primary, but the replicas did not acknowledge
		// it: a failover could lose the level. Give it back; the hold
		// keeps the levels it had.
		return dropUnacked(h.l, ctx, req, err)
	}
	// The level counts only once granted, so that a Release of every
	// level (Close, a lost lease) that ran meanwhile did not count it:
	// then it is given back here.
	h.mu.Lock()
	ended, cause := h.ended, h.cause
	if !ended && ctx.Err() == nil {
		h.levels++
	}
	h.mu.Unlock()
	switch {
	case ended && cause != nil:
		return errors.Join(cause, h.l.giveBack(ctx, req))
	case ended:
		return errors.Join(errs.ErrNotHeld, h.l.giveBack(ctx, req))
	case ctx.Err() != nil:
		// Granted, but the caller's context ended meanwhile.
		return errors.Join(ctx.Err(), h.l.e.soon(func() error { return h.l.giveBack(ctx, req) }))
	}
	return nil
}

// end ends the hold once: it cancels the context with cause (nil: the
// hold was unlocked), stops the watchdog and forgets the hold. It returns
// the levels still held in this process, and false when the hold had
// already ended.
func (h *Hold) end(cause error) (int, bool) {
	return h.endFor(cause, false)
}

// endFor is end; ranOut says the hold ended because its fixed lease ran
// out, for the observer.
func (h *Hold) endFor(cause error, ranOut bool) (int, bool) {
	return h.endAs(cause, ranOut, false)
}

// endClosing ends the hold for Close, as end does with errs.ErrClosed,
// but the watchdog keeps renewing what levels it had until their release
// is answered (see released).
func (h *Hold) endClosing() (int, bool) {
	return h.endAs(errs.ErrClosed, false, true)
}

// endAs is endFor; closing says that Close ends the hold (see
// holdState.finish).
func (h *Hold) endAs(cause error, ranOut, closing bool) (int, bool) {
	var call string
	levels, ok := h.finish(cause, closing, func() { call = h.call })
	if !ok {
		return 0, false
	}
	if !closing || levels == 0 {
		h.l.e.dog.unwatch(h)
	}
	h.l.e.dropHold(h)
	h.audited(call)
	if o := h.observed; o != nil {
		h.l.e.observe(o.ctx, Event{Kind: EventHoldEnded, Lock: h.l.keys.Name, Owner: h.owner,
			Call: queue.WaiterIDOf(h.entry), Token: h.token, Held: time.Since(o.took), End: endKind(cause, ranOut), Err: cause})
	}
	return levels, true
}

// audited has the engine's audit watch for traces of the ended hold that
// a failover brings back (see audit.go); call is its last release, or "".
func (h *Hold) audited(call string) {
	req := Request{Owner: h.owner, Shared: h.shared}
	h.l.e.audit.ended(h.l, h.l, req, h.entry, h, call)
}

// lose ends a hold whose renewals failed until its lease nearly ran out,
// or whose fixed lease ran out (ranOut), with errs.ErrLeaseLost, logs the
// loss at Error (why says how it was found, err what failed if anything),
// and then releases its levels in the background: if Redis was only slow
// and the hold is still there, the next waiter gets the lock now instead
// of when the lease runs out. (The release script only touches a hold
// this owner still has.)
func (h *Hold) lose(ranOut bool, why string, err error) {
	levels, ok := h.endFor(errs.ErrLeaseLost, ranOut)
	if !ok {
		return
	}
	logLost(h.l.e.log, why, err, h.logAttrs())
	if levels > 0 {
		h.l.e.wg.Go(func() { _ = h.releaseLevels(levels) })
	}
}

// endLost ends the hold with errs.ErrLeaseLost, as end does, and logs the
// loss at Error when it ended it: why says how it was found, err what
// failed if anything.
func (h *Hold) endLost(why string, err error) (int, bool) {
	levels, ok := h.end(errs.ErrLeaseLost)
	if ok {
		logLost(h.l.e.log, why, err, h.logAttrs())
	}
	return levels, ok
}

// abandon ends the hold with cause and releases its levels in Redis, so
// that the next waiter need not wait for the lease to run out. Best effort:
// a failure leaves the lock to expire.
func (h *Hold) abandon(cause error) {
	levels, ok := h.end(cause)
	if ok {
		_ = h.releaseLevels(levels)
	}
}

// releasedOnClose says that Close has had the answer to the release of
// the hold it ended (or gave up waiting for it): the watchdog stops
// renewing it.
func (h *Hold) releasedOnClose() {
	h.released()
	h.l.e.dog.unwatch(h)
}
