package fair

import (
	"context"
	"time"
)

// watchdog keeps the hold alive until it ends. A hold with a watchdog
// lease is renewed every lease/3, and at once when it came by hand-over
// (renewNow: its expiry may be its waiter deadline). A fixed lease is
// never renewed; the hold ends when it runs out.
//
// h.valid is a time until which the hold is known to last: the send time
// of the last call that set the expiry, plus the expiry it set. When
// renewals keep failing (Redis unreachable), the hold is declared lost a
// sixth of the lease before that time, so the holder learns it before
// another owner can be granted.
func (h *Hold) watchdog(renewNow bool) {
	lease := h.lease
	margin := lease / 6
	retry := max(lease/12, 10*time.Millisecond)
	next := time.Now().Add(lease / 3)
	if renewNow {
		next = time.Now()
	}
	if h.fixed {
		next = h.valid
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
			// The fixed lease has run out.
			h.end(ErrLeaseLost)
			return
		}

		sent := time.Now()
		budget := min(h.l.e.cfg.CallTimeout, time.Until(h.valid.Add(-margin)))
		ok, err := false, context.DeadlineExceeded
		if budget > 0 {
			ctx, cancel := context.WithTimeout(context.Background(), budget)
			ok, err = h.l.renew(ctx, h.owner, lease)
			cancel()
		}
		switch {
		case err == nil && ok:
			h.valid = sent.Add(lease)
			next = sent.Add(lease / 3)
		case err == nil:
			if h.over() {
				return // the last Release handed the lock on meanwhile
			}
			h.l.e.log.Info("fairlock: lease lost: the lock is no longer ours", "lock", h.l.keys.Name)
			h.end(ErrLeaseLost)
			return
		case !time.Now().Before(h.valid.Add(-margin)):
			h.l.e.log.Warn("fairlock: lease lost: renewal failed until the lease nearly ran out",
				"lock", h.l.keys.Name, "err", err)
			h.end(ErrLeaseLost)
			return
		default:
			h.l.e.log.Warn("fairlock: renewal failed, retrying", "lock", h.l.keys.Name, "err", err)
			next = time.Now().Add(retry)
		}
		timer.Reset(time.Until(next))
	}
}
