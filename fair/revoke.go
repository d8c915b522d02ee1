package fair

import (
	"time"

	"github.com/fairlock/fairlock/internal/errs"
	"github.com/fairlock/fairlock/notify"
	"github.com/fairlock/fairlock/queue"
)

// A hold can be taken away in Redis before its holder gives it up: a
// forced unlock (ForceUnlock, the fairlock command's unlock --force)
// removes it whoever owns it and hands the lock on at once. The script
// that does so tells the holder's Client (revoke in lua/lib.lua): it
// publishes queue.Revoked(entry) on the Client's wake channel of the lock,
// entry being the waiter entry the hold was given to. Without that, the
// holder would learn it at its next renewal, up to a third of the lease
// later, while the next owner already holds the lock.
//
// So a hold of a Mutex (one lock, or each lock of a MultiLock's ticket)
// or of a quorum lock watches that id on its lock's channel until it
// ends. The subscription is the one the engine's waiters of the lock use,
// shared with them. When the engine has none at the grant (nobody of
// this Client waits for the lock), the hold subscribes only once it has
// lasted heedAfter, and then asks Redis once whether it is still held:
// a short hold, the common case on a free lock, costs no SUBSCRIBE and
// UNSUBSCRIBE, and a forced unlock of a young hold ends it heedAfter
// after its grant. When the revocation comes, or when the hub signals
// that messages may have been lost, the hold asks Redis whether it is
// still held: the watchdog renews it at once (in one pipeline with the
// others due), a fixed lease's hold is read (Holds: the same owner under
// the same token), a quorum's is read on a majority; when it is not, the
// hold ends at once with errs.ErrLeaseLost, as at a renewal that finds it
// gone. A revocation
// that does not arrive (the subscription refused, a connection lost, or
// sent in the moment between a grant and the watch of a lock already
// subscribed) leaves the renewal to find it, as before.

// heedAfter is how long a hold on a lock its engine has no subscription
// for lasts before it subscribes to hear its revocation.
const heedAfter = time.Second

// heed has the hold heed its revocation (see the comment above). To ask
// Redis, a hold the watchdog renews is renewed at once (renewals due
// together go out in one pipeline, and a renewal that finds the hold gone
// ends it with errs.ErrLeaseLost); a hold of a fixed lease, which no
// renewal may extend, is read (Holds).
func (h *Hold) heed() {
	look := func() { h.l.e.dog.renewNow(h) }
	if h.fixed {
		look = func() {
			h.l.e.goUnlessClosed(func() {
				if ok, err := h.l.Holds(h.ctx, h); err == nil && !ok && h.ctx.Err() == nil {
					h.revoked()
				}
			})
		}
	}
	heedRevocation(h.l.e, &h.holdState, h.l.e.hub, h.l.wakeChannel, h.entry, look)
}

// revoked ends the hold, which Redis no longer has, with errs.ErrLeaseLost,
// unless its last release is under way (then Unlock says how it went).
func (h *Hold) revoked() {
	if h.over() {
		return
	}
	if _, ended := h.end(errs.ErrLeaseLost); ended {
		logLost(h.l.e.log, "the hold was taken away in Redis (a forced unlock)", nil, h.logAttrs())
	}
}

// look asks the quorum's masters whether a majority still has the hold,
// for heedRevocation, and ends it when not: each master's revocation is
// heard on its own engine's hub, and a forced unlock removes the hold
// from every master (see QMutex.ForceUnlock).
func (h *QHold) look() {
	h.l.qm.goUnlessClosed(func() {
		if ok, err := h.l.Holds(h.ctx, h); err == nil && !ok && h.ctx.Err() == nil {
			h.revoked()
		}
	})
}

// revoked is Hold.revoked for a quorum's hold.
func (h *QHold) revoked() {
	if h.over() {
		return
	}
	if _, ended := h.end(errs.ErrLeaseLost); ended {
		logLost(h.l.qm.log, "the hold was taken away on a majority of the masters (a forced unlock)", nil, h.logAttrs())
	}
}

// goer runs work on goroutines its owner waits for (a lifecycle).
type goer interface{ goUnlessClosed(func()) bool }

// heedRevocation has the hold s, given to entry, listen for its
// revocation on channel of hub until it ends, with no goroutine of its own
// while nothing happens: at each signal it calls look, which must not
// block, to ask Redis whether the hold is still there. When channel is
// not subscribed now, the hold listens only once it has lasted heedAfter,
// and then looks once (a revocation before that found no listener). An
// error of Listen leaves the hold to its renewals. What it set up is
// undone when the hold ends, on the goroutine that ends it (see onEnd).
func heedRevocation(g goer, s *holdState, hub *notify.Hub, channel, entry string, look func()) {
	listen := func(lookNow bool) {
		w, confirmed, err := hub.Listen(s.ctx, channel, queue.Revoked(entry), look)
		if err != nil {
			return
		}
		s.onEnd(w.Stop)
		if lookNow && confirmed {
			look() // else at the confirmation
		}
	}
	if hub.Subscribed(channel) {
		listen(false)
		return
	}
	later := time.AfterFunc(heedAfter, func() { g.goUnlessClosed(func() { listen(true) }) })
	s.onEnd(func() { later.Stop() })
}
