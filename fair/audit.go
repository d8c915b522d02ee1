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
// still have, of a Lock call that has ended (of any primitive: a Mutex, a
// Semaphore, a RWMutex's read or write hold, a MultiLock's holds and
// ticket):
//
//   - a hold that was released since: nobody owns it, and a Mutex stays
//     blocked, or a weighted lock keeps its weight, until its lease runs
//     out;
//   - its entry in line, of a call that has since been granted (and
//     released) or has given up: the lock is handed to it and nobody
//     claims it, or, at the head of a weighted lock's line where it does
//     not fit, or as a ticket that waits for another of its locks, it
//     holds up everyone behind it; either until the entry's deadline, a
//     waiter TTL.
//
// The audit clears both. For a while after each Lock call of this engine
// ends (its hold ended, or it gave up waiting), it looks, once a second
// and at once when the notify hub sees the primary move, whether the
// lock keeps a trace of such a call, and if so clears it, which hands the
// lock on; it looks again until it finds none (see audittrace.go). A
// trace is:
//
//   - the call's entry in line: its call is over, so it leaves (the
//     ticket of a MultiLock that gave up leaves every line at once);
//   - for an owner id of its own (one Lock call's, the default), any
//     level of the call's kind that the owner holds (a RWMutex's write
//     hold's write levels, any other hold's levels): nothing of this
//     engine can hold them any more, so each is released. The read levels
//     taken under a write hold share its owner id, and are left alone;
//   - for a shared owner id (other calls, here or in other processes, may
//     hold under it; a read level taken under a write hold is one), only
//     the ended hold itself, under its fencing token, whose last release
//     is sent again under the same call id (its receipt was lost with
//     it, so it acts once), and a hand-over to the ended call's own
//     waiter entry, which the cancel script gives back.
//
// It runs only for clients that can fail over (a cluster client, the
// failover client); on one server nothing comes back.

const (
	auditSpan   = 10 * time.Second // how long an ended call is watched, at least (and a waiter TTL)
	auditEvery  = time.Second      // how often
	auditPerKey = 256              // ended calls watched per lock, the latest
	auditFixes  = 64               // traces cleared per lock and look, at most
)

// endedCall is one Lock call of this engine that is over.
type endedCall struct {
	l          *Mutex // the handle it was made through: the kind of its levels
	waited     leaver // the line its entry waited in: l's, or the ticket's that l is a lock of
	owner      string
	shared     bool   // the owner id is shared (see Request.Shared)
	entry      string // its waiter entry
	token      string // its hold's token, "" when it gave up without one
	call       string // its hold's last release, "" if none was sent
	receiptTTL int64  // of that release
	at         time.Time
}

// leaver takes a waiter entry out of the line it waits in, giving back a
// grant to it: a lock's (a Mutex, a weighted lock) or a ticket's.
type leaver interface {
	cancel(ctx context.Context, owner, entry string) (bool, error)
}

// watchedLock is a lock with recent ended calls, oldest first.
type watchedLock struct {
	l     *Mutex // a handle of the lock: its keys
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
// gave up waiting with entry in the line of ln (l, or the ticket that l
// is a lock of).
func (a *audit) ended(l *Mutex, ln leaver, req Request, entry string, h *Hold, call string) {
	if a == nil || !a.enabled {
		return
	}
	c := endedCall{l: l, waited: ln, owner: req.Owner, shared: req.Shared, entry: entry, call: call, at: time.Now()}
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
