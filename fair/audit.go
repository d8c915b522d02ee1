package fair

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock/fairlock/notify"
)

// A failover can bring back what this engine is done with. The old
// primary acknowledged writes that it had not passed to the replica that
// was promoted (a graceful Sentinel failover leaves the old primary taking
// writes for about a second after the promotion), so the new primary can
// still have:
//
//   - a hold that was released since: nobody owns it, and the lock stays
//     blocked until its lease runs out;
//   - in its queue, the entry of a Lock call that has since been granted
//     (and released) or has given up: the lock is handed to it, nobody
//     claims it, and it stays blocked until the entry's deadline, a
//     waiter TTL; with several such entries in line, one after another.
//
// The audit clears both. For a while after each Lock call of this engine
// ends (its hold ended, or it gave up waiting), it looks, once a second
// and at once when the notify hub sees the primary move, whether the
// lock's hold in Redis is a trace of such a call, and if so releases it,
// which hands the lock to the next waiter; it looks again until the hold
// is no trace. A trace is:
//
//   - for an owner id of its own (one Lock call's, the default), any hold
//     of that owner: nothing of this engine can hold under it any more,
//     so every level is released;
//   - for a shared owner id (other calls, here or in other processes, may
//     hold under it), only the ended hold itself, under its fencing token,
//     whose last release is sent again under the same call id (its
//     receipt was lost with it, so it acts once), and a hand-over to the
//     ended call's own waiter entry, which the cancel script gives back.
//
// It runs only for clients that can fail over (a cluster client, the
// failover client); on one server nothing comes back.

const (
	auditSpan   = 10 * time.Second // how long an ended call is watched, at least (and a waiter TTL)
	auditEvery  = time.Second      // how often
	auditPerKey = 256              // ended calls watched per lock, the latest
	auditFixes  = 64               // traces released per lock and look, at most
)

// endedCall is one Lock call of this engine that is over.
type endedCall struct {
	owner      string
	shared     bool   // the owner id is shared (see Request.Shared)
	entry      string // its waiter entry
	token      string // its hold's token, "" when it gave up without one
	call       string // its hold's last release, "" if none was sent
	receiptTTL int64  // of that release
	at         time.Time
}

// watchedLock is a lock with recent ended calls, oldest first.
type watchedLock struct {
	l     *Mutex
	calls []endedCall
}

type audit struct {
	e       *Engine
	enabled bool
	kick    chan struct{} // capacity 1: look now

	mu      sync.Mutex
	recent  map[string]*watchedLock // lock hash key -> its ended calls; guarded by mu
	entries map[string]int          // waiter entry -> how many ended calls in recent have it; guarded by mu
	running bool                    // the auditing goroutine runs; guarded by mu
}

func newAudit(e *Engine, rdb Redis) *audit {
	_, cluster := rdb.(*redis.ClusterClient)
	_, failover := notify.FailsOver(rdb)
	return &audit{e: e, enabled: cluster || failover, kick: make(chan struct{}, 1),
		recent: make(map[string]*watchedLock), entries: make(map[string]int)}
}

// span is how long an ended call is watched: its entry can come back with
// a deadline up to a waiter TTL after the call's last poll.
func (a *audit) span() time.Duration {
	return max(auditSpan, a.e.cfg.WaiterTTL)
}

// ended records a Lock call of l that is over: h's hold ended (the last
// release, if one was sent, under call), or, when h is nil, a call that
// gave up waiting with entry.
func (a *audit) ended(l *Mutex, req Request, entry string, h *Hold, call string) {
	if a == nil || !a.enabled || l.w != nil {
		// A weighted lock's trace is not looked for: a hold a failover
		// brings back gives its weight back when its lease ends.
		return
	}
	c := endedCall{owner: req.Owner, shared: req.Shared, entry: entry, call: call, at: time.Now()}
	if h != nil {
		c.token = strconv.FormatInt(h.token, 10)
		c.receiptTTL = h.releaseReceiptTTL()
	}
	a.mu.Lock()
	w := a.recent[l.keys.Lock]
	if w == nil {
		w = &watchedLock{l: l}
		a.recent[l.keys.Lock] = w
	}
	if len(w.calls) == auditPerKey {
		a.forgetLocked(w.calls[0])
		w.calls = w.calls[1:] // append reallocates now and then: no copy per call
	}
	w.calls = append(w.calls, c)
	a.entries[c.entry]++
	start := !a.running
	a.running = true
	a.mu.Unlock()
	if start && !a.e.goUnlessClosed(a.run) {
		a.mu.Lock()
		a.running = false
		a.mu.Unlock()
	}
}

// moved tells the audit that the primary moved: it looks at once.
func (a *audit) moved() {
	if a == nil || !a.enabled {
		return
	}
	select {
	case a.kick <- struct{}{}:
	default:
	}
}

// unclaimed tells the audit that a grant to waiter entry id was published
// on channel and no waiter of this engine took it: if id is the entry of
// an ended call, a failover brought it back, and the audit looks at once.
func (a *audit) unclaimed(channel, id string) {
	if a == nil || !a.enabled {
		return
	}
	a.mu.Lock()
	n := a.entries[id]
	a.mu.Unlock()
	if n > 0 {
		a.moved()
	}
}

// forgetLocked drops c from the entries index. Requires mu.
func (a *audit) forgetLocked(c endedCall) {
	if a.entries[c.entry]--; a.entries[c.entry] <= 0 {
		delete(a.entries, c.entry)
	}
}

// run looks at the watched locks once a second, and when kicked, until
// none is left or the engine closes.
func (a *audit) run() {
	t := time.NewTicker(auditEvery)
	defer t.Stop()
	for {
		select {
		case <-a.e.closing:
			return
		case <-t.C:
		case <-a.kick:
		}
		a.mu.Lock()
		var due []watchedLock
		for k, w := range a.recent {
			i := 0
			for i < len(w.calls) && time.Since(w.calls[i].at) > a.span() {
				a.forgetLocked(w.calls[i])
				i++
			}
			w.calls = w.calls[i:]
			if len(w.calls) == 0 {
				delete(a.recent, k)
				continue
			}
			due = append(due, watchedLock{l: w.l, calls: append([]endedCall(nil), w.calls...)})
		}
		if len(due) == 0 {
			a.running = false
			a.mu.Unlock()
			return
		}
		a.mu.Unlock()
		for _, w := range due {
			a.check(w)
		}
	}
}

// trace returns the ended call of w whose trace the hold (owner, token,
// entry) is, and false if it is none.
func (w watchedLock) trace(owner, token, entry string) (endedCall, bool) {
	for i := len(w.calls) - 1; i >= 0; i-- {
		c := w.calls[i]
		switch {
		case c.owner != owner:
		case !c.shared:
			return c, true
		case c.token != "" && c.token == token && c.call != "":
			return c, true
		case c.entry != "" && c.entry == entry:
			return c, true
		}
	}
	return endedCall{}, false
}

// check releases the traces of w's ended calls that hold w's lock, one
// after another, and stops at the first hold that is none.
func (a *audit) check(w watchedLock) {
	ctx, cancel := a.e.detached(context.Background())
	defer cancel()
	l := w.l
	warned := false
	for range auditFixes {
		v, err := a.e.rdb.HMGet(ctx, l.keys.Lock, "owner", "token", "entry").Result()
		if err != nil {
			return // look again at the next tick
		}
		owner, _ := v[0].(string)
		token, _ := v[1].(string)
		entry, _ := v[2].(string)
		c, ok := w.trace(owner, token, entry)
		if !ok {
			return
		}
		if !warned {
			a.e.log.Warn("fairlock: a failover brought back a hold that had ended or a waiter that had left; releasing it",
				"lock", l.keys.Name)
			warned = true
		}
		switch {
		case !c.shared:
			_, err = l.release(ctx, owner, 0)
		case c.token == token:
			_, err = l.releaseCall(ctx, c.call, owner, 0, c.receiptTTL)
		default:
			_, err = l.cancel(ctx, owner, entry)
		}
		if err != nil && !publishRefused(err) && !unacked(err) {
			return
		}
		if c.shared {
			w.forget(c) // it acts once
		}
	}
}

// forget drops c from w's copy of the ended calls.
func (w *watchedLock) forget(c endedCall) {
	for i := range w.calls {
		if w.calls[i] == c {
			w.calls = append(w.calls[:i:i], w.calls[i+1:]...)
			return
		}
	}
}
