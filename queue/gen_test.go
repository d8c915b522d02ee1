package queue_test

import (
	"fmt"
	"math/bits"
	"slices"
	"strings"
	"time"

	"github.com/fairlock/fairlock/queue"
)

// The generator turns bytes into realistic calls on one lock, or on a few
// locks of one server: a few owners (one with a ':' in its id), a few
// waiting calls that poll, stop polling (die) or give up, fast-path
// tries, re-entries, releases, renewals, force-unlocks, calls re-sent
// under the same call id, and time passing by small steps or exactly to
// (and around) the next deadline or expiry. A third of the waiting calls
// and a quarter of the tries on one lock are an election's candidates,
// which campaign with a value (mostly the one they joined with, at times
// another, or none), and the holder proclaims new values. On several locks, half the
// waiting calls and tries are a MultiLock's, on two or three of the locks
// at once (multiacquire with a ticket, and cancel of the ticket), and the
// other calls are each made on one lock. The bytes come from a seeded
// generator or from the fuzzer, and the calls are resolved against the
// model's state as they are made.

var (
	owners     = []string{"ann", "bob", "c:d", "eve"}
	leases     = []int64{10, 25, 60, 200}
	waiterTTLs = []int64{10, 12, 30, 90}
	advances   = []int64{0, 1, 2, 3, 5, 8, 13, 30, 100}
)

// values are values that candidates campaign and proclaim with: empty,
// plain, with spaces and a newline, the leader channel's message, and
// long; value adds bytes that are no text.
var values = []string{"", "alpha", "two words", "v:1 2\n", queue.LeaderMessage, strings.Repeat("0123456789", 30)}

// value picks a value by b: one of values, or bytes made of b (a NUL, a
// space, b's complement: no valid UTF-8 for most b).
func value(b byte) string {
	if i := int(b) % (len(values) + 1); i < len(values) {
		return values[i]
	}
	return string([]byte{b, 0, ' ', ^b, '\r', '\n'})
}

const (
	slots      = 6  // waiting Lock calls alive at once
	historyLen = 8  // recent calls that may be re-sent
	receiptTTL = 50 // ms, in model units
)

// waiter is one waiting Lock or MultiLock call of the pool.
type waiter struct {
	owner, entry string
	value        string // a candidate's value (IsCandidate of entry)
	lease, ttl   int64
	lock         int   // a Lock call's lock
	locks        []int // a MultiLock call's locks; nil for a Lock call
	dead         bool  // stopped polling; a new call takes its slot
}

// world is the generator's side of the run: the locks' names, the pool of
// waiting calls and the calls that may be re-sent. scale multiplies every
// duration (a real server's clock cannot be moved, so there everything
// lasts long).
type world struct {
	scale      int64
	timeless   bool     // time never advances: advance ops are skipped
	names      []string // the locks, in key order: one name, or a few
	sets       [][]int  // every set of two or three of the locks, by index
	seq        int
	waiters    [slots]*waiter
	history    []call
	lastCancel call
}

// newWorld returns a world of the locks names, in key order.
func newWorld(scale int64, timeless bool, names ...string) *world {
	w := &world{scale: scale, timeless: timeless, names: names}
	n := len(names)
	for mask := range 1 << n {
		if k := bits.OnesCount(uint(mask)); k == 2 || k == 3 {
			var set []int
			for i := range n {
				if mask&(1<<i) != 0 {
					set = append(set, i)
				}
			}
			w.sets = append(w.sets, set)
		}
	}
	return w
}

// releasers are the tags a release is made under: none, or the tag of
// one of the Clients of id's waiter ids (upper case: "0000000B").
var releasers = []string{"", "00000000", "00000001", "00000002", "0000000B"}

// id returns a fresh waiter id: untagged, or tagged with one of a few
// Client tags in lower or upper case (the scripts read hex either way),
// with or without the wake format version that asks for timed messages.
func (w *world) id() string {
	w.seq++
	switch w.seq % 6 {
	case 1:
		return fmt.Sprintf("%016x%08x", w.seq, w.seq%3)
	case 3:
		return fmt.Sprintf("%016x%08X", w.seq, 10+w.seq%3)
	case 5:
		return fmt.Sprintf("%016x%08x%s", w.seq, w.seq%3, queue.WakeVersion)
	}
	return fmt.Sprintf("%016x", w.seq)
}

// ticketID returns a fresh waiter id of a MultiLock's ticket, with the
// tag of one of a few Clients in lower or upper case.
func (w *world) ticketID() string {
	w.seq++
	if w.seq%2 == 0 {
		return fmt.Sprintf("%016x%08X%s", w.seq, 10+w.seq%3, queue.TicketVersion)
	}
	return fmt.Sprintf("%016x%08x%s", w.seq, w.seq%3, queue.TicketVersion)
}

// candidateID returns a fresh waiter id of an election's candidate,
// with the tag of one of a few Clients in lower or upper case.
func (w *world) candidateID() string {
	w.seq++
	if w.seq%2 == 0 {
		return fmt.Sprintf("%016x%08X%s", w.seq, 10+w.seq%3, queue.CandidateVersion)
	}
	return fmt.Sprintf("%016x%08x%s", w.seq, w.seq%3, queue.CandidateVersion)
}

// owner picks the owner of a call on lock m: mostly its holder.
func (w *world) owner(m *queue.Model, a byte) string {
	if h := m.State().Hold; h != nil && a%4 != 0 {
		return h.Owner
	}
	return owners[int(a/4)%len(owners)]
}

// multi reports whether the lock byte of an op on several locks picks a
// MultiLock, and which locks: one of every set of two or three of them.
// On one lock it never does.
func (w *world) multi(b byte) (locks []int, ok bool) {
	if len(w.sets) == 0 || b%2 != 0 {
		return nil, false
	}
	return w.sets[int(b/2)%len(w.sets)], true
}

// pick returns the lock a single-lock call of an op with lock byte b is
// made on.
func (w *world) pick(b byte) int { return int(b/2) % len(w.names) }

// at fills in the lock of a single-lock call.
func (w *world) at(c *call, lock int) {
	c.lock = lock
	if len(w.names) > 1 {
		c.names = w.names[lock]
	}
}

// onMulti fills in the locks of a MultiLock's call.
func (w *world) onMulti(c *call, locks []int) {
	c.locks = locks
	names := make([]string, len(locks))
	for i, l := range locks {
		names[i] = w.names[l]
	}
	c.names = strings.Join(names, ",")
}

// resolve turns an op into a call against the current state of the
// models of the locks (in key order); ok is false when the op does
// nothing here.
func (w *world) resolve(ms []*queue.Model, o op) (c call, ok bool) {
	c.kind = o.kind
	switch o.kind {
	case opPoll:
		wt := w.waiters[int(o.a)%slots]
		if wt == nil || wt.dead {
			wt = &waiter{owner: owners[int(o.b)%len(owners)], lease: leases[int(o.b/4)%len(leases)] * w.scale,
				ttl: waiterTTLs[int(o.b/16)%len(waiterTTLs)] * w.scale}
			lease := time.Duration(wt.lease) * time.Millisecond
			if locks, ok := w.multi(o.lock); ok {
				wt.locks, wt.entry = locks, queue.Entry(w.ticketID(), lease, wt.owner)
			} else if (o.a/slots)%3 == 1 {
				wt.lock, wt.entry = w.pick(o.lock), queue.Entry(w.candidateID(), lease, wt.owner)
				wt.value = value(o.a / (3 * slots))
			} else {
				wt.lock, wt.entry = w.pick(o.lock), queue.Entry(w.id(), lease, wt.owner)
				if o.b >= 250 {
					wt.entry = "not-hex:" + wt.entry // malformed: pruned at the head
				}
			}
			w.waiters[int(o.a)%slots] = wt
		}
		c.owner, c.entry, c.lease, c.ttl, c.mode = wt.owner, wt.entry, wt.lease, wt.ttl, queue.ModeWait
		if queue.IsCandidate(wt.entry) {
			// A candidate polls with its value; at times with another
			// (which its grant takes only when that very poll is
			// granted), or with none.
			c.campaign, c.value = true, wt.value
			switch o.b % 8 {
			case 0:
				c.campaign, c.value = false, ""
			case 1:
				c.value = value(o.b / 8)
			}
		}
		if wt.locks != nil {
			c.kind = opMulti
			w.onMulti(&c, wt.locks)
		} else {
			c.id = w.id()
			w.at(&c, wt.lock)
		}
	case opTry, opReenter:
		c.owner, c.lease, c.mode = owners[int(o.a)%len(owners)], leases[int(o.b)%len(leases)]*w.scale, queue.ModeTry
		c.ttl = waiterTTLs[int(o.b/8)%len(waiterTTLs)] * w.scale
		lease := time.Duration(c.lease) * time.Millisecond
		if locks, ok := w.multi(o.lock); ok && o.kind == opTry {
			c.kind, c.entry = opMulti, queue.Entry(w.ticketID(), lease, c.owner)
			w.onMulti(&c, locks)
			return c, true
		}
		w.at(&c, w.pick(o.lock))
		if o.kind == opTry && (o.a/4)%4 == 1 {
			// A candidate's first attempt, which takes a free lock
			// nobody waits for with its value.
			c.campaign, c.value = true, value(o.a/16)
			c.id, c.entry = w.id(), queue.Entry(w.candidateID(), lease, c.owner)
			return c, true
		}
		if o.kind == opReenter {
			c.owner = w.owner(ms[c.lock], o.a)
			if o.b%3 != 0 {
				c.mode = queue.ModeReenter
			}
			// A fixed lease: re-entry keeps the expiry. A try with lease
			// 0 that finds the lock free takes it for 0 ms, and its token
			// counter lives 1 ms: on a real server, whose clock runs on,
			// it may be gone before the differ reads it, so there only
			// re-entries have lease 0.
			if o.b%2 == 0 && (c.mode == queue.ModeReenter || !w.timeless) {
				c.lease = 0
			}
			lease = time.Duration(c.lease) * time.Millisecond
		}
		c.id, c.entry = w.id(), queue.Entry(w.id(), lease, c.owner)
	case opRelease, opRenew:
		w.at(&c, w.pick(o.lock))
		c.id, c.owner, c.lease = w.id(), w.owner(ms[c.lock], o.a), leases[int(o.b)%len(leases)]*w.scale
		if o.kind == opRelease && o.b%2 == 0 {
			c.lease = 0
		}
		if o.kind == opRelease {
			// Released by one of the Clients whose tags the waiter ids
			// carry (see id), or by none: a hand-over to a waiter of the
			// releasing Client is answered, not published.
			c.own = releasers[int(o.b/2)%len(releasers)]
			// On several locks, one release in three is of a level of
			// two or three holds at once, each by its lock's holder
			// mostly (a MultiLock's Unlock).
			if locks, ok := w.multi(o.lock); ok && o.a%3 == 1 {
				c.kind, c.lock, c.names = opReleaseAll, 0, ""
				w.onMulti(&c, locks)
				for _, l := range locks {
					c.owners = append(c.owners, w.owner(ms[l], o.a/3))
				}
			}
		}
	case opCancel:
		wt := w.waiters[int(o.a)%slots]
		if wt == nil || wt.dead {
			c = w.lastCancel // a re-sent cancel
			return c, c.kind == opCancel || c.kind == opCancelTicket
		}
		w.waiters[int(o.a)%slots] = nil
		c.owner, c.entry = wt.owner, wt.entry
		if wt.locks != nil {
			c.kind = opCancelTicket
			w.onMulti(&c, wt.locks)
		} else {
			w.at(&c, wt.lock)
		}
		w.lastCancel = c
	case opDie:
		if wt := w.waiters[int(o.a)%slots]; wt != nil {
			wt.dead = true
		}
		return c, false
	case opForce:
		w.at(&c, w.pick(o.lock))
		return c, o.a < 64 // rarer than the others
	case opAdvance:
		c.d = w.advance(ms, o)
		return c, !w.timeless
	case opProclaim:
		// Mostly the holder, under the entry its hold was given to (which
		// a give-back may have cleared); else someone in line, or a
		// candidate that never was.
		w.at(&c, w.pick(o.lock))
		c.owner, c.value = w.owner(ms[c.lock], o.a), value(o.b)
		h := ms[c.lock].State().Hold
		wt := w.waiters[int(o.a/8)%slots]
		switch {
		case h != nil && o.a%8 != 0:
			c.entry = h.Entry
		case wt != nil && wt.locks == nil:
			c.owner, c.entry = wt.owner, wt.entry
		default:
			c.entry = queue.Entry(w.candidateID(), time.Duration(leases[0]*w.scale)*time.Millisecond, c.owner)
		}
	case opResend:
		if len(w.history) == 0 {
			return c, false
		}
		return w.history[len(w.history)-1-int(o.a)%len(w.history)], true
	}
	return c, true
}

// advance picks how long time passes: a small step, or exactly to one of
// the next instants at which something of any lock expires, or 1 ms
// either side.
func (w *world) advance(ms []*queue.Model, o op) int64 {
	var at []int64
	now := ms[0].Now()
	for _, m := range ms {
		s := m.State()
		if s.Hold != nil && s.Hold.ExpiresAt != 0 {
			at = append(at, s.Hold.ExpiresAt)
		}
		for _, d := range s.Deadlines {
			at = append(at, d)
		}
		for _, r := range s.Receipts {
			at = append(at, r.ExpiresAt)
		}
		for _, l := range s.Tickets {
			at = append(at, l.ExpiresAt)
		}
		if s.LastToken > 0 {
			at = append(at, s.TokenEnd)
		}
	}
	if o.a%2 == 0 || len(at) == 0 {
		return advances[int(o.b)%len(advances)]
	}
	slices.Sort(at)
	t := at[int(o.b)%len(at)] + int64(o.a/2%3) - 1
	return max(t-now, 0)
}

// done records what a call's answer means for the pool: a waiter that was
// granted returns from Lock, and acquires and releases may be re-sent.
func (w *world) done(c call, granted bool) {
	if (c.kind == opPoll || c.kind == opMulti) && granted {
		for i, wt := range w.waiters {
			if wt != nil && wt.entry == c.entry {
				w.waiters[i] = nil
			}
		}
	}
	switch c.kind {
	case opPoll, opTry, opReenter, opRelease, opReleaseAll, opMulti, opProclaim:
		w.history = append(w.history, c)
		if len(w.history) > historyLen {
			w.history = w.history[1:]
		}
	}
}
