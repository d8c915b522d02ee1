package fair

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fairlock/fairlock/internal/errs"
	"github.com/fairlock/fairlock/internal/pause"
	"github.com/fairlock/fairlock/queue"
)

// Unlock gives up one level. At the last level the hold ends: in Redis
// the lock goes to the next live waiter, and the hold's context is
// cancelled. It fails with errs.ErrNotHeld when the hold is already over (with
// errs.ErrLeaseLost or errs.ErrClosed wrapped when that is why), and with
// errs.ErrLeaseLost when Redis no longer knows the hold.
//
// Every Unlock gives up a level here, whatever Redis answers: a caller
// that logs an Unlock's error and goes on has nothing left to call but
// the Unlocks of the levels below. A release that Redis refused (an error
// reply: NOPERM after an ACL change, WRONGTYPE, ...) or did not answer (a
// network error, a failover) is sent again in the background, under the
// same call id so that it counts once, until Redis takes it, the lease
// has run out or the Client closes; the error returned says so. At the
// last level the hold ends here (the watchdog stops renewing it), and
// when Redis still counts levels of an owner id of the hold's own (inner
// releases still being sent again) the last release takes them too: the
// last Unlock never returns nil while the lock stays held. Under a shared
// owner id (see Request.Shared) other callers' levels may be among those
// Redis counts, so the last Unlock then says that releases of this hold
// are still on their way instead.
//
// ctx's deadline bounds Unlock: when it passes before Redis answers,
// Unlock returns context.DeadlineExceeded (at the last level the hold
// ends here), and the release goes on in the background, its answer
// settled as above. A cancellation without a deadline does not stop it.
// So is a release that fewer replicas than the engine waits for
// acknowledged: it was made on the primary, and each re-send waits for
// the replicas again, until they acknowledge it.
func (h *Hold) Unlock(ctx context.Context) error {
	u, err := h.unlocking()
	if err != nil {
		return err
	}
	return u.run(ctx)
}

// unlocking is the release of one level of a hold by an Unlock, once the
// level is given up here (see Hold.unlocking).
type unlocking struct {
	h     *Hold
	last  bool          // the hold's last level in this process
	call  string        // the release's call id
	lease time.Duration // of the levels that remain (see callLease)
}

// unlocking gives up one level here, and returns its release, or the
// error of an Unlock of a hold that is over.
func (h *Hold) unlocking() (unlocking, error) {
	h.mu.Lock()
	last, err := h.leave()
	if err != nil {
		h.mu.Unlock()
		return unlocking{}, err
	}
	call := queue.NewID()
	if last {
		h.call = call
	}
	h.mu.Unlock()
	return unlocking{h: h, last: last, call: call, lease: h.callLease()}, nil
}

// run sends the release and settles its answer: the rest of Unlock.
func (u unlocking) run(ctx context.Context) error {
	h, last, call, lease := u.h, u.last, u.call, u.lease
	// The release runs on a goroutine of the engine when ctx has a
	// deadline, so that Unlock returns by then even while Redis does not
	// answer; after Close has started, without a deadline, or on a redis
	// client that bounds its calls by the deadline, it runs here. Only the deadline counts, not a cancellation: the context an
	// Unlock is given is often the context of a hold, of this lock or of
	// another it carries, that has just ended.
	deadline, bounded := ctx.Deadline()
	if !bounded {
		return h.settle(h.release(ctx, call, lease), last, call, lease)
	}
	if h.l.e.inline {
		// The redis client bounds each read and write by the deadline
		// (see callInline): the release runs here, and one the deadline
		// cut short is sent again in the background.
		out := h.release(withBound(ctx, deadline), call, lease)
		if out.err != nil && !time.Now().Before(deadline) {
			return u.cutShort()
		}
		return h.settle(out, last, call, lease)
	}
	fl := launch(h.l.e, func() (released, error) { return h.release(ctx, call, lease), nil })
	if fl == nil {
		return h.settle(h.release(ctx, call, lease), last, call, lease)
	}
	dctx, cancelWait := context.WithDeadline(context.Background(), deadline)
	defer cancelWait()
	out, early := fl.wait(dctx, nil, func(out released, _ error) {
		if err := h.settle(out, last, call, lease); err != nil && !errors.Is(err, errs.ErrLeaseLost) { // a loss is logged as such
			h.l.e.log.Warn("fairlock: an Unlock that returned at its deadline got its answer", h.logAttrs("err", err)...)
		}
	})
	if early != nil {
		// Redis has not answered yet: the release goes on, and its answer
		// is settled as if it had come in time, but for the caller.
		if last {
			h.end(nil)
		}
		return fmt.Errorf("fairlock: unlock: %w (the release goes on in the background until Redis takes it or the lease runs out)", early)
	}
	return h.settle(out, last, call, lease)
}

// cutShort settles a release that its Unlock's deadline cut short on a
// redis client that bounds its calls by the deadline: whether Redis ran
// it is unknown, so it is sent again in the background under the same
// call id, whose receipt answers what the first did if it ran, and the
// Unlock returns the deadline's error, as one whose release goes on past
// its deadline does.
func (u unlocking) cutShort() error {
	if u.last {
		u.h.end(nil)
	}
	if !u.h.goResend(u.call, u.lease) {
		return fmt.Errorf("fairlock: unlock: %w (the Client is closed; the lock expires after its lease)", context.DeadlineExceeded)
	}
	return fmt.Errorf("fairlock: unlock: %w (the release goes on in the background until Redis takes it or the lease runs out)", context.DeadlineExceeded)
}

// release sends the release of one level under call id call, detached
// from ctx and bounded by the call timeout (and ctx's deadline). A call
// that got no answer (a connection refused or cut: a restart, a failover
// under way) is sent again under the same call id, which counts once,
// with the backoff of a waiting Lock's polls, until Redis answers or the
// bound passes; replies that say the server will be ready shortly are
// ridden out the same way (see runScript).
func (h *Hold) release(ctx context.Context, call string, lease time.Duration) released {
	cctx, cancel := h.l.e.detached(ctx)
	defer cancel()
	retry := retryMin
	for {
		n, err := h.l.releaseCall(cctx, call, h.owner, lease, h.releaseReceiptTTL())
		if !unanswered(err) || cctx.Err() != nil || !pause.For(cctx, retry) {
			return released{n, err}
		}
		retry = min(2*retry, retryMax)
	}
}

// released is what Redis answered to a release: the levels the owner
// still holds, or the call's error.
type released struct {
	n   int
	err error
}

// settle acts on Redis's answer to the release of one level (last: the
// hold's last one in this process) sent under call id call, and returns
// Unlock's error.
func (h *Hold) settle(out released, last bool, call string, lease time.Duration) error {
	n, err := out.n, out.err
	var refused, notAcked error
	if publishRefused(err) {
		// Released and handed over; only the push was refused.
		n, refused, err = 0, err, nil
	}
	if unacked(err) {
		// Released on the primary (n is its answer), not acknowledged.
		notAcked, err = err, nil
	}
	switch {
	case err != nil:
		// No answer, or a server still in a failover or a restart when
		// the call's bound passed (its replies were ridden out until
		// then: see runScript), or a refusal: the same release is sent
		// again until it counts, and the level counts as gone here.
		if last {
			h.end(nil)
		}
		if !h.goResend(call, lease) {
			return fmt.Errorf("fairlock: unlock: %w (the Client is closed; the lock expires after its lease)", err)
		}
		return fmt.Errorf("fairlock: unlock: %w (sent again in the background until Redis takes it or the lease runs out)", err)
	case n < 0 || (n == 0 && !last):
		h.endLost("Unlock found the hold gone in Redis", nil)
		h.l.e.rename() // the server may have lost its data
		return errs.ErrLeaseLost
	case last && n > 0 && !h.shared:
		// Redis counts levels that this process no longer does: releases
		// of inner levels still being sent again in the background. The
		// owner id is this hold's alone, so every level Redis counts is
		// ours to end: release them now rather than leave the lock to
		// expire unrenewed.
		h.end(nil)
		if err := h.releaseLevels(n); err != nil {
			return fmt.Errorf("fairlock: unlock: %w (the lock expires after its lease)", err)
		}
	case last && n > 0 && h.resending.Load() > 0:
		h.end(nil)
		return fmt.Errorf("fairlock: unlock: %d level(s) of the shared owner are still held in Redis, and releases of this hold's inner levels are still sent again in the background until Redis takes them or the lease runs out", n)
	case last:
		h.end(nil)
	}
	if notAcked != nil {
		if !retryable(notAcked) {
			return fmt.Errorf("fairlock: unlock: released on the primary, but %w", notAcked)
		}
		if !h.goResend(call, lease) {
			return fmt.Errorf("fairlock: unlock: released on the primary, but %w (the Client is closed; not sent again)", notAcked)
		}
		return fmt.Errorf("fairlock: unlock: released on the primary, but %w (sent again in the background until the replicas acknowledge it or the lease runs out)", notAcked)
	}
	if refused != nil {
		return fmt.Errorf("fairlock: unlock: the lock was handed to the next waiter, who learns it at its next poll, because %w", refused)
	}
	return nil
}

// goResend sends a release again in the background (see resendRelease),
// unless the Client is closed; it reports whether it does.
func (h *Hold) goResend(call string, lease time.Duration) bool {
	h.resending.Add(1)
	if h.l.e.goUnlessClosed(func() {
		defer h.resending.Add(-1)
		h.resendRelease(call, lease)
	}) {
		return true
	}
	h.resending.Add(-1)
	return false
}

// releaseReceiptTTL is how long a release's receipt is kept: long enough
// for every re-send of resendRelease to find it.
func (h *Hold) releaseReceiptTTL() int64 {
	return max(h.l.e.receiptTTL(), (h.lease + 2*h.l.e.cfg.CallTimeout).Milliseconds())
}

// resendRelease sends the release call again, with backoff, until Redis
// answers it (and, with replicas to wait for, enough of them acknowledge
// it), until the hold's lease has run out (the watchdog stopped renewing
// it when the release was first sent, so by then Redis has dropped it
// anyway) or until the engine closes.
func (h *Hold) resendRelease(call string, lease time.Duration) {
	var last error // the last re-send's error
	done, closed := h.l.e.sendAgain(time.Now().Add(h.lease), func(ctx context.Context) bool {
		n, err := h.l.releaseCall(ctx, call, h.owner, lease, h.releaseReceiptTTL())
		if err == nil && n == 0 {
			h.audited(call) // a failover may undo it too: watched from now
		}
		last = err
		switch {
		case unacked(err) && !retryable(err):
			h.l.e.log.Warn("fairlock: released on the primary, but the replicas' acknowledgement could not be asked for",
				h.logAttrs("err", err)...)
			return true
		case err == nil || publishRefused(err):
			return true
		}
		// No answer, or refused (a full server before it lets releases
		// through, an ACL change that an operator may undo): nothing
		// changed, so it is sent again.
		return false
	})
	switch {
	case done:
	case closed:
		h.l.e.log.Warn("fairlock: the Client closed before Redis answered a release; the lock expires after its lease",
			h.logAttrs()...)
	case unacked(last):
		h.l.e.log.Warn("fairlock: a release made on the primary was not acknowledged by the replicas within the lease",
			h.logAttrs("err", last)...)
	default:
		h.l.e.log.Log(context.Background(), failLevel(last), "fairlock: could not release the lock; it expired after its lease",
			h.logAttrs("err", last)...)
	}
}

// releaseLevels releases levels of the owner's hold, bounded by the call
// timeout. Best effort: a failure leaves the lock to expire, is logged,
// and is returned.
func (h *Hold) releaseLevels(levels int) error {
	ctx, cancel := h.l.e.detached(context.Background())
	defer cancel()
	for range levels {
		n, err := h.l.release(ctx, h.owner, 0)
		if unacked(err) {
			// Released on the primary; nothing more can be done here.
			h.l.e.log.Warn("fairlock: released a hold that ended, but the replicas did not acknowledge it",
				h.logAttrs("err", err)...)
			err = nil
		}
		if publishRefused(err) {
			h.l.e.log.Warn("fairlock: released a hold that ended, but the wake message was refused",
				h.logAttrs("err", err)...)
			return nil
		}
		if err != nil {
			h.l.e.log.Log(context.Background(), failLevel(err), "fairlock: could not release a hold that ended; it expires after its lease",
				h.logAttrs("err", err)...)
			return err
		}
		if n <= 0 {
			return nil
		}
	}
	return nil
}
