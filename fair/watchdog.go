package fair

import (
	"context"
	"errors"
	"time"
)

// errStopped: the hold ended while a renewal was in flight.
var errStopped = errors.New("fairlock: hold ended during renewal")

// watchdog keeps the hold alive until it ends. A hold with a watchdog
// lease is renewed every lease/3, the first time when a third of the span
// known at the grant has passed (h.span from the send time of the call
// that made it): for a fresh grant a third of the lease; for a grant by
// hand-over, whose expiry may be the waiter's deadline, or one answered
// late, possibly at once; for a short hold never, as it is released
// first. A fixed lease is never renewed; the hold ends when it runs out.
//
// h.valid is a time until which the hold is known to last: the send time
// of the last call that set the expiry, plus the expiry it set (h.span).
// When renewals keep failing (Redis unreachable), the hold is declared
// lost a sixth of that span before that time, so the holder learns it
// before another owner can be granted.
func (h *Hold) watchdog() {
	lease := h.lease
	retry := max(lease/12, 10*time.Millisecond)
	next := h.valid.Add(-h.span + h.span/3)
	if h.fixed {
		next = h.valid.Add(-h.fixedMargin)
	}

	timer := time.NewTimer(time.Until(next))
	defer timer.Stop()
	for {
		select {
		case <-h.stop:
			return
		case <-timer.C:
		}
		if h.fixed {
			// The fixed lease has run out: the hold ends, and what is left
			// of it in Redis (the key outlives our end by the call's
			// transit time) is released, so the next waiter is handed
			// the lock now rather than when its poll finds the key gone.
			h.lose()
			return
		}

		sent := time.Now()
		giveUp := h.valid.Add(-h.span / 6)
		ok, err := h.renewBy(giveUp)
		switch {
		case errors.Is(err, errStopped):
			return // the hold ended (Release, Close) while the renewal was out: no failure
		case err == nil && ok:
			h.valid, h.span = sent.Add(lease), lease
			next = sent.Add(lease / 3)
		case err == nil:
			if h.over() {
				return // the last Release handed the lock on meanwhile
			}
			h.l.e.log.Info("fairlock: lease lost: the lock is no longer ours", "lock", h.l.keys.Name)
			h.end(ErrLeaseLost)
			return
		case !time.Now().Before(giveUp):
			h.l.e.log.Warn("fairlock: lease lost: renewal failed until the lease nearly ran out",
				"lock", h.l.keys.Name, "err", err)
			h.lose()
			return
		default:
			h.l.e.log.Warn("fairlock: renewal failed, retrying", "lock", h.l.keys.Name, "err", err)
			next = time.Now().Add(retry)
		}
		timer.Reset(time.Until(next))
	}
}

// renewBy renews the lease once, but waits for the answer only until
// giveUp (and at most the call timeout): go-redis bounds a read by its own
// ReadTimeout, not by the context's deadline, so a renewal on a silent
// connection could otherwise keep the watchdog from declaring the loss in
// time. A renewal still in flight then goes on in the background.
func (h *Hold) renewBy(giveUp time.Time) (bool, error) {
	budget := min(h.l.e.cfg.CallTimeout, time.Until(giveUp))
	if budget <= 0 {
		return false, context.DeadlineExceeded
	}
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel() // once we stop waiting, go-redis need not retry
	type result struct {
		ok  bool
		err error
	}
	done := make(chan result, 1)
	h.l.e.wg.Go(func() {
		ok, err := h.l.renew(ctx, h.owner, h.lease)
		done <- result{ok, err}
	})
	select {
	case r := <-done:
		return r.ok, r.err
	case <-ctx.Done():
		select {
		case r := <-done: // answered at the deadline: the answer counts
			return r.ok, r.err
		default:
			return false, ctx.Err()
		}
	case <-h.stop:
		return false, errStopped
	}
}
