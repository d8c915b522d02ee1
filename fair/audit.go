package fair

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock/fairlock/internal/shrink"
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
//
// Its cost is bounded whatever the rate of Lock calls: it watches the
// latest auditMax ended calls of the engine, no older than its span, and
// one look reads them all in one pipeline, which a cluster client splits
// into one per master; each round of clearing that finds traces reads the
// locks that had them again, the same way. What it keeps is in a ring
// that gives its memory back as it empties (shrink.Queue), and nothing
// once the span has passed since the last call ended.

const (
	auditSpan  = 10 * time.Second // how long an ended call is watched, at least (and a waiter TTL)
	auditEvery = time.Second      // how often
	auditMax   = 4096             // ended calls watched, the latest: what one look reads at most
	auditFixes = 64               // rounds of clearing per look, at most: traces cleared per lock
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

type audit struct {
	e       *Engine
	enabled bool
	kick    chan struct{} // capacity 1: look now

	mu      sync.Mutex
	calls   shrink.Queue[*endedCall] // the ended calls watched, oldest first, auditMax at most; guarded by mu
	running bool                     // the auditing goroutine runs; guarded by mu
}

func newAudit(e *Engine, rdb Redis) *audit {
	_, cluster := rdb.(*redis.ClusterClient)
	_, failover := notify.FailsOver(rdb)
	return &audit{e: e, enabled: cluster || failover, kick: make(chan struct{}, 1)}
}

// span is how long an ended call is watched: its entry can come back with
// a deadline up to a waiter TTL after the call's last poll.
func (a *audit) span() time.Duration {
	return max(auditSpan, a.e.cfg.WaiterTTL)
}

// ended records a Lock call of l that is over: h's hold ended (the last
// release, if one was sent, under call), or, when h is nil, a call that
// gave up waiting with entry in the line of ln (l, or the ticket that l
// is a lock of). With auditMax calls watched already, the oldest is
// forgotten.
func (a *audit) ended(l *Mutex, ln leaver, req Request, entry string, h *Hold, call string) {
	if a == nil || !a.enabled {
		return
	}
	c := &endedCall{l: l, waited: ln, owner: req.Owner, shared: req.Shared, entry: entry, call: call, at: time.Now()}
	if h != nil {
		c.token = strconv.FormatInt(h.token, 10)
		c.receiptTTL = h.releaseReceiptTTL()
	}
	a.mu.Lock()
	if a.calls.Len() == auditMax {
		a.calls.Pop()
	}
	a.calls.Push(c)
	start := !a.running
	a.running = true
	a.mu.Unlock()
	if start && !a.e.goUnlessClosed(a.run) {
		a.stop() // closed: nobody looks any more
	}
}

// stop forgets every call and marks the goroutine stopped: the engine is
// closed.
func (a *audit) stop() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.calls = shrink.Queue[*endedCall]{}
	a.running = false
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
	found := false
	for i := range a.calls.Len() {
		if a.calls.At(i).entry == id {
			found = true
			break
		}
	}
	a.mu.Unlock()
	if found {
		a.moved()
	}
}

// run looks at the watched calls once a second, and when kicked, until
// none is left or the engine closes.
func (a *audit) run() {
	t := time.NewTicker(auditEvery)
	defer t.Stop()
	for {
		select {
		case <-a.e.closing:
			a.stop()
			return
		case <-t.C:
		case <-a.kick:
		}
		calls := a.due()
		if calls == nil {
			return
		}
		a.look(calls)
	}
}

// due forgets the calls older than the span and returns the others,
// oldest first; with none left it marks the goroutine stopped and returns
// nil. It copies pointers only: every Unlock waits for it.
func (a *audit) due() []*endedCall {
	a.mu.Lock()
	defer a.mu.Unlock()
	for a.calls.Len() > 0 && time.Since(a.calls.At(0).at) > a.span() {
		a.calls.Pop()
	}
	if a.calls.Len() == 0 {
		a.running = false
		return nil
	}
	return a.calls.AppendTo(make([]*endedCall, 0, a.calls.Len()))
}
