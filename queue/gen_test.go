package queue_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/fairlock/fairlock/queue"
)

// The generator turns bytes into realistic calls on one lock: a few owners
// (one with a ':' in its id), a few waiting Lock calls that poll, stop
// polling (die) or give up, fast-path tries, re-entries, releases,
// renewals, force-unlocks, calls re-sent under the same call id, and time
// passing by small steps or exactly to (and around) the next deadline or
// expiry. The bytes come from a seeded generator or from the fuzzer, and
// the calls are resolved against the model's state as they are made.

var (
	owners     = []string{"ann", "bob", "c:d", "eve"}
	leases     = []int64{10, 25, 60, 200}
	waiterTTLs = []int64{10, 12, 30, 90}
	advances   = []int64{0, 1, 2, 3, 5, 8, 13, 30, 100}
)

const (
	slots      = 6  // waiting Lock calls alive at once
	historyLen = 8  // recent calls that may be re-sent
	receiptTTL = 50 // ms, in model units
)

// A source yields bytes; ok is false when it has run out.
type source interface{ next() (b byte, ok bool) }

type randSource struct{ r *rand.Rand }

func (s randSource) next() (byte, bool) { return byte(s.r.Uint32()), true }

func newRandSource(seed uint64) randSource {
	return randSource{rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

type bytesSource struct{ b []byte }

func (s *bytesSource) next() (byte, bool) {
	if len(s.b) == 0 {
		return 0, false
	}
	b := s.b[0]
	s.b = s.b[1:]
	return b, true
}

// An op is one decoded choice: what kind of call, and two argument bytes.
type op struct{ kind, a, b byte }

// Op kinds, by weight: the kind is kinds[first byte % len(kinds)].
const (
	opPoll    = iota // a waiting Lock call polls (acquire, wait mode)
	opTry            // the fast path of a Lock call (acquire, try mode)
	opReenter        // a holder re-enters (acquire, try mode, maybe lease 0)
	opRelease
	opRenew
	opCancel  // a waiting Lock call gives up
	opDie     // a waiting Lock call stops polling for good
	opForce   // force-unlock
	opAdvance // time passes
	opResend  // a recent acquire or release is re-sent under its call id
)

var kinds = []byte{
	opPoll, opPoll, opPoll, opPoll, opTry, opReenter, opRelease, opRelease,
	opRenew, opCancel, opDie, opForce, opAdvance, opAdvance, opAdvance, opResend,
}

// nextOp decodes one op; ok is false when the source ran out.
func nextOp(src source) (o op, ok bool) {
	var b [3]byte
	for i := range b {
		if b[i], ok = src.next(); !ok {
			return op{}, false
		}
	}
	return op{kind: kinds[int(b[0])%len(kinds)], a: b[1], b: b[2]}, true
}

// call is one concrete call, as applied to the model and the scripts.
type call struct {
	kind         byte
	id           string
	owner, entry string
	lease, ttl   int64
	mode         string
	own          string // opRelease: the releasing Client's tag, "" for none
	d            int64  // opAdvance: ms
}

func (c call) String() string {
	switch c.kind {
	case opPoll, opTry, opReenter:
		return fmt.Sprintf("acquire(call=%s owner=%s entry=%s lease=%d waiterTTL=%d mode=%s)",
			c.id, c.owner, c.entry, c.lease, c.ttl, c.mode)
	case opRelease:
		return fmt.Sprintf("release(call=%s owner=%s own=%q lease=%d)", c.id, c.owner, c.own, c.lease)
	case opRenew:
		return fmt.Sprintf("renew(owner=%s lease=%d)", c.owner, c.lease)
	case opCancel:
		return fmt.Sprintf("cancel(owner=%s entry=%s)", c.owner, c.entry)
	case opForce:
		return "forceunlock()"
	case opAdvance:
		return fmt.Sprintf("advance(%d ms)", c.d)
	}
	return "none"
}

// waiter is one waiting Lock call of the pool.
type waiter struct {
	owner, entry string
	lease, ttl   int64
	dead         bool // stopped polling; a new call takes its slot
}

// world is the generator's side of the run: the pool of waiting calls
// and the calls that may be re-sent. scale multiplies every duration (a
// real server's clock cannot be moved, so there everything lasts long).
type world struct {
	scale      int64
	timeless   bool // time never advances: advance ops are skipped
	seq        int
	waiters    [slots]*waiter
	history    []call
	lastCancel call
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

func (w *world) owner(m *queue.Model, a byte) string {
	if h := m.State().Hold; h != nil && a%4 != 0 {
		return h.Owner // mostly the holder
	}
	return owners[int(a/4)%len(owners)]
}

// resolve turns an op into a call against the model's current state; ok
// is false when the op does nothing here.
func (w *world) resolve(m *queue.Model, o op) (c call, ok bool) {
	c.kind = o.kind
	switch o.kind {
	case opPoll:
		wt := w.waiters[int(o.a)%slots]
		if wt == nil || wt.dead {
			wt = &waiter{owner: owners[int(o.b)%len(owners)], lease: leases[int(o.b/4)%len(leases)] * w.scale,
				ttl: waiterTTLs[int(o.b/16)%len(waiterTTLs)] * w.scale}
			wt.entry = queue.Entry(w.id(), time.Duration(wt.lease)*time.Millisecond, wt.owner)
			if o.b >= 250 {
				wt.entry = "not-hex:" + wt.entry // malformed: pruned at the head
			}
			w.waiters[int(o.a)%slots] = wt
		}
		c.id, c.owner, c.entry, c.lease, c.ttl, c.mode = w.id(), wt.owner, wt.entry, wt.lease, wt.ttl, queue.ModeWait
	case opTry, opReenter:
		c.owner, c.lease, c.mode = owners[int(o.a)%len(owners)], leases[int(o.b)%len(leases)]*w.scale, queue.ModeTry
		if o.kind == opReenter {
			c.owner = w.owner(m, o.a)
			if o.b%2 == 0 {
				c.lease = 0 // a fixed lease: re-entry keeps the expiry
			}
			if o.b%3 != 0 {
				c.mode = queue.ModeReenter
			}
		}
		c.id, c.ttl = w.id(), waiterTTLs[int(o.b/8)%len(waiterTTLs)]*w.scale
		c.entry = queue.Entry(w.id(), time.Duration(c.lease)*time.Millisecond, c.owner)
	case opRelease, opRenew:
		c.id, c.owner, c.lease = w.id(), w.owner(m, o.a), leases[int(o.b)%len(leases)]*w.scale
		if o.kind == opRelease && o.b%2 == 0 {
			c.lease = 0
		}
		if o.kind == opRelease {
			// Released by one of the Clients whose tags the waiter ids
			// carry (see id), or by none: a hand-over to a waiter of the
			// releasing Client is answered, not published.
			c.own = releasers[int(o.b/2)%len(releasers)]
		}
	case opCancel:
		wt := w.waiters[int(o.a)%slots]
		if wt == nil || wt.dead {
			c = w.lastCancel // a re-sent cancel
			return c, c.kind == opCancel
		}
		w.waiters[int(o.a)%slots] = nil
		c.owner, c.entry = wt.owner, wt.entry
		w.lastCancel = c
	case opDie:
		if wt := w.waiters[int(o.a)%slots]; wt != nil {
			wt.dead = true
		}
		return c, false
	case opForce:
		return c, o.a < 64 // rarer than the others
	case opAdvance:
		c.d = w.advance(m, o)
		return c, !w.timeless
	case opResend:
		if len(w.history) == 0 {
			return c, false
		}
		return w.history[len(w.history)-1-int(o.a)%len(w.history)], true
	}
	return c, true
}

// advance picks how long time passes: a small step, or exactly to one of
// the next instants at which something expires, or 1 ms either side.
func (w *world) advance(m *queue.Model, o op) int64 {
	var at []int64
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
	if s.LastToken > 0 {
		at = append(at, s.TokenEnd)
	}
	if o.a%2 == 0 || len(at) == 0 {
		return advances[int(o.b)%len(advances)]
	}
	slices.Sort(at)
	t := at[int(o.b)%len(at)] + int64(o.a/2%3) - 1
	return max(t-s.Now, 0)
}

// done records what a call's answer means for the pool: a waiter that was
// granted returns from Lock, and acquires and releases may be re-sent.
func (w *world) done(c call, granted bool) {
	if c.kind == opPoll && granted {
		for i, wt := range w.waiters {
			if wt != nil && wt.entry == c.entry {
				w.waiters[i] = nil
			}
		}
	}
	switch c.kind {
	case opPoll, opTry, opReenter, opRelease:
		w.history = append(w.history, c)
		if len(w.history) > historyLen {
			w.history = w.history[1:]
		}
	}
}
