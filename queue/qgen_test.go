package queue_test

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/fairlock/fairlock/queue"
)

// The generator of the quorum scripts' differential runs turns bytes into
// the calls one master sees from a few Lock calls of a few owners: tries
// (the doorway), joins with their tickets (bakery tickets, tickets that
// tie, one ticket shared by two calls), heartbeats, yields (with the
// hold's token or a stale one), cancels and late joins of cancelled
// calls, re-entries, releases (committed token or none, last level or
// not), renewals, commits (the hold's token, a larger one, a smaller
// one), force-unlocks, calls re-sent under their call id, the scripts'
// clock jumping (the skew) and keys lapsing as their expiry would.
//
// A third of the Lock calls are an election's candidates, whose tries
// and joins carry their value (mostly the one they began with, at times
// another, or none), and the holder, a waiter or a stranger proclaims
// new values under sequence numbers that rise, repeat or go back.

// qkind is the kind of a quorum call.
type qkind byte

const (
	qTry     qkind = iota // a Lock call's doorway (qtry, mode try)
	qJoin                 // a Lock call joins or keeps its place (qjoin)
	qYield                // a Lock call gives its hold back (qjoin with a token)
	qCancel               // a Lock call gives up (qcancel)
	qRelease              // an owner gives up a level (qrelease)
	qReenter              // an owner adds a level (qtry, mode reenter or try)
	qRenew                // an owner renews (qrenew)
	qCommit               // an owner commits a token (qcommit)
	qForce                // qforce
	qAdvance              // the scripts' clock jumps (the skew grows)
	qLapse                // a key expires (deleted on the server)
	qResend               // a recent re-entry or release is sent again under its call id
	qNew                  // a Lock call stops; a new one takes its place

	qProclaim // an election's leader proclaims a value (proclaim.lua with a vseq)
)

// qkinds are the kinds of calls, by weight. A new kind goes at the end:
// the inputs written out in FuzzQuorumScriptsMatchModel name kinds by
// their index, which then stays theirs.
var qkinds = []qkind{
	qJoin, qJoin, qJoin, qJoin, qTry, qTry, qYield, qYield, qCancel, qRelease, qRelease,
	qReenter, qRenew, qCommit, qCommit, qForce, qAdvance, qAdvance, qLapse, qLapse, qResend, qNew,
	qProclaim,
}

var (
	qleases     = []int64{10_000, 60_000, 25_000} // ms
	qwaiterTTLs = []int64{30_000, 30_000, 15_000}
	qshortTTLs  = []int64{8_000, 20_000} // tombstones, receipts
)

const qslots = 5 // Lock calls alive at once

// qwaiter is one Lock call of the generator.
type qwaiter struct {
	owner, entry string
	value        string // a candidate's value (IsCandidate of entry)
	lease        int64
	ticket       int64 // 0 until it first joins
}

// qvalue picks a value for a candidate or a proclaim by b: one of value's
// (empty, words, a newline, the leader message, long, bytes that are no
// text), or one that is nearly empty, a lone space or a lone NUL.
func qvalue(b byte) string {
	switch b % 8 {
	case 6:
		return " "
	case 7:
		return "\x00"
	}
	return value(b / 8)
}

// qcall is one call of a run: a script with its arguments, a jump of the
// scripts' clock, or a key that lapses.
type qcall struct {
	kind                         qkind
	id, owner, entry, mode       string
	lease, ttl, ticket, yield, t int64 // t: qcommit's token, qrelease's committed token, qProclaim's sequence number
	tomb, receiptTTL             int64
	last                         bool
	value                        string // qtry, qjoin: a candidate's value ("": none); qProclaim: the new value
	d                            int64  // qAdvance: ms the scripts' clock jumps
	lapse, lapseID               string // qLapse: which key (queue.Lapse*), and its id
}

func (c qcall) String() string {
	switch c.kind {
	case qTry, qReenter:
		return fmt.Sprintf("qtry %s %s call=%s lease=%d ttl=%d %s%s", c.owner, c.entry, c.id, c.lease, c.ttl, c.mode, valueArg(c.value))
	case qJoin, qYield:
		return fmt.Sprintf("qjoin %s lease=%d ttl=%d ticket=%d yield=%d%s", c.entry, c.lease, c.ttl, c.ticket, c.yield, valueArg(c.value))
	case qProclaim:
		return fmt.Sprintf("proclaim %s %s value=%q vseq=%d", c.owner, c.entry, c.value, c.t)
	case qCancel:
		return fmt.Sprintf("qcancel %s ttl=%d tomb=%d", c.entry, c.ttl, c.tomb)
	case qRelease:
		return fmt.Sprintf("qrelease %s %s call=%s committed=%d lease=%d last=%t", c.owner, c.entry, c.id, c.t, c.lease, c.last)
	case qRenew:
		return fmt.Sprintf("qrenew %s lease=%d", c.owner, c.lease)
	case qCommit:
		return fmt.Sprintf("qcommit %s t=%d lease=%d", c.owner, c.t, c.lease)
	case qForce:
		return "qforce"
	case qAdvance:
		return fmt.Sprintf("the scripts' clock jumps %d ms", c.d)
	case qLapse:
		return strings.TrimSpace("lapse " + c.lapse + " " + c.lapseID)
	}
	return fmt.Sprintf("kind %d", c.kind)
}

// valueArg shows a candidate's value among a call's arguments: nothing
// when the call sends none.
func valueArg(v string) string {
	if v == "" {
		return ""
	}
	return fmt.Sprintf(" value=%q", v)
}

// qworld is the generator's side of a run: the Lock calls, the cancelled
// ones that may still join late, and the calls that may be re-sent.
type qworld struct {
	ids     *world // draws waiter and call ids
	calls   [qslots]*qwaiter
	gone    []*qwaiter // cancelled or released calls
	history []qcall    // recent re-entries and releases
	vseq    int64      // the latest proclaim's sequence number
}

func newQWorld() *qworld { return &qworld{ids: newWorld(1, false, "q")} }

// call returns the Lock call of slot a, made anew from b when the slot
// is empty: a third of them an election's candidates, each with a value.
func (w *qworld) call(a, b byte) *qwaiter {
	i := int(a) % qslots
	if w.calls[i] == nil {
		lease := qleases[int(b)%len(qleases)]
		owner := owners[int(b/4)%len(owners)]
		q := &qwaiter{owner: owner, lease: lease}
		if (b/16)%3 == 1 {
			q.entry, q.value = queue.Entry(w.ids.candidateID(), time.Duration(lease)*time.Millisecond, owner), qvalue(a/8+b)
		} else {
			q.entry = queue.Entry(w.ids.id(), time.Duration(lease)*time.Millisecond, owner)
		}
		w.calls[i] = q
	}
	return w.calls[i]
}

// valueOf returns the value a try or a join of Lock call q sends by b: a
// candidate's own mostly, at times another, or none (lua.Call.WithValue
// sends none for "": its grant then takes the value the entry joined
// with, or ""); none for other calls.
func valueOf(q *qwaiter, b byte) string {
	if !queue.IsCandidate(q.entry) {
		return ""
	}
	switch b % 8 {
	case 0:
		return ""
	case 1:
		return qvalue(b / 8)
	}
	return q.value
}

// ticket returns the ticket of Lock call c, drawn at its first join: the
// bakery's, above C and the scripts' clock (now, ms, as the doorway
// reads them); or a small one, which ties with others; or the ticket of
// another call (a tie broken by the entries).
func (w *qworld) ticket(c *qwaiter, s queue.QuorumState, now int64, b byte) int64 {
	if c.ticket != 0 {
		return c.ticket
	}
	switch b % 5 {
	case 0:
		c.ticket = 100 + int64(b/5%3)
	case 1:
		for _, o := range w.calls {
			if o != nil && o != c && o.ticket != 0 {
				c.ticket = o.ticket
			}
		}
	}
	if c.ticket == 0 {
		c.ticket = max(s.Ticket+1, now*1000)
	}
	return c.ticket
}

// end drops the Lock call of entry from the slots: it gave up or released.
func (w *qworld) end(entry string) {
	for i, c := range w.calls {
		if c != nil && c.entry == entry {
			w.calls[i] = nil
			w.gone = append(w.gone, c)
			if len(w.gone) > qslots {
				w.gone = w.gone[1:]
			}
		}
	}
}

// owner picks the owner of a call: mostly the holder's.
func (w *qworld) owner(s queue.QuorumState, a byte) string {
	if s.Hold != nil && s.Hold.Owner != "" && a%4 != 0 {
		return s.Hold.Owner
	}
	return owners[int(a/4)%len(owners)]
}

// next decodes the next op from src: its kind, then two argument bytes.
func (w *qworld) next(src source) (o op, ok bool) {
	var b [3]byte
	for i := range b {
		if b[i], ok = src.next(); !ok {
			return op{}, false
		}
	}
	return op{kind: byte(qkinds[int(b[0])%len(qkinds)]), a: b[1], b: b[2]}, true
}

// resolve turns the bytes of an op into a call against the model's state
// s, whose scripts' clock reads now (ms); ok is false when it makes none.
func (w *qworld) resolve(o op, s queue.QuorumState, now int64) (c qcall, ok bool) {
	c = qcall{kind: qkind(o.kind), ttl: qwaiterTTLs[int(o.b/32)%len(qwaiterTTLs)],
		tomb: qshortTTLs[int(o.a/16)%2], receiptTTL: qshortTTLs[int(o.b/16)%2]}
	h := s.Hold
	switch c.kind {
	case qTry:
		q := w.call(o.a, o.b)
		c.id, c.owner, c.entry, c.lease, c.mode = w.ids.id(), q.owner, q.entry, q.lease, queue.ModeTry
		c.value = valueOf(q, o.b)
	case qJoin, qYield:
		q := w.call(o.a, o.b)
		if c.kind == qJoin && o.a >= 240 && len(w.gone) > 0 {
			q = w.gone[int(o.b)%len(w.gone)] // a join that arrives after its call went
		}
		c.owner, c.entry, c.lease = q.owner, q.entry, q.lease
		c.value = valueOf(q, o.a)
		c.ticket = w.ticket(q, s, now, o.b)
		if o.b >= 248 {
			c.ticket += 7 // a join that names another ticket than before
		}
		if c.kind == qYield {
			c.yield = 12345
			if h != nil && h.Entry == q.entry {
				c.yield = h.Token - int64(o.b%4/3) // now and then a stale token
			}
		}
	case qCancel:
		q := w.call(o.a, o.b)
		c.entry = q.entry
		w.end(q.entry)
	case qRelease:
		c.id, c.owner = w.ids.id(), w.owner(s, o.a)
		c.lease = []int64{0, 60_000}[o.b%2]
		c.entry, c.last = w.entryOf(c.owner, s, o.b), true
		if h != nil && h.Owner == c.owner {
			c.last = h.Count == 1 || o.b%7 == 0
			switch o.b / 2 % 3 {
			case 1:
				c.t = h.Token
			case 2:
				c.t = h.Token + int64(o.b%5)*1000
			}
		}
		if c.last {
			w.end(c.entry)
		}
		w.remember(c)
	case qReenter:
		c.id, c.owner = w.ids.id(), w.owner(s, o.a)
		c.lease = []int64{0, 60_000, 10_000}[o.b%3]
		c.entry, c.mode = queue.Entry(w.ids.id(), time.Minute, c.owner), queue.ModeReenter
		if o.b/3%3 == 0 {
			c.mode = queue.ModeTry // a try of the holder under another entry: a level too
		} else if o.b/3%3 == 1 && h != nil {
			c.entry = h.Entry
		}
		w.remember(c)
	case qRenew:
		c.owner, c.lease = w.owner(s, o.a), qleases[int(o.b)%len(qleases)]
	case qCommit:
		c.owner, c.lease = w.owner(s, o.a), []int64{0, 60_000}[o.b%2]
		c.t = 1_700_000_000_000_000
		if h != nil {
			c.t = h.Token + []int64{0, 1, 1000, 7_000_000, -1}[o.b/2%5]
		}
	case qForce:
		return c, o.a < 32
	case qAdvance:
		c.d = []int64{c.ttl / 4, c.ttl / 2, c.ttl, 2 * c.ttl, 3_600_000}[o.b%5]
	case qLapse:
		return w.lapse(c, s, o)
	case qResend:
		if len(w.history) == 0 {
			return c, false
		}
		return w.history[len(w.history)-1-int(o.a)%len(w.history)], true
	case qNew:
		w.calls[int(o.a)%qslots] = nil
		return c, false
	case qProclaim:
		w.proclaim(&c, s, o)
	}
	return c, true
}

// proclaim makes c a proclaim: mostly the holder's, under the entry its
// hold was given to; else a Lock call's, or a candidate's that never
// was. Its sequence number mostly rises, as a leader's Proclaim calls
// number theirs, and now and then repeats or goes back.
func (w *qworld) proclaim(c *qcall, s queue.QuorumState, o op) {
	c.value = qvalue(o.b)
	switch h, q := s.Hold, w.calls[int(o.a/4)%qslots]; {
	case h != nil && o.a%4 != 0:
		c.owner, c.entry = h.Owner, h.Entry
	case q != nil:
		c.owner, c.entry = q.owner, q.entry
	default:
		c.owner = owners[int(o.a/4)%len(owners)]
		c.entry = queue.Entry(w.ids.candidateID(), time.Minute, c.owner)
	}
	switch o.a / 16 % 8 {
	case 0:
		c.t = w.vseq
	case 1:
		c.t = max(w.vseq-3, 0)
	default:
		w.vseq++
		c.t = w.vseq
	}
}

// entryOf returns the entry a release of owner names: the hold's when
// owner holds, else the entry of one of its Lock calls, or a fresh one.
func (w *qworld) entryOf(owner string, s queue.QuorumState, b byte) string {
	if s.Hold != nil && s.Hold.Owner == owner && b%8 != 0 {
		return s.Hold.Entry
	}
	for _, c := range w.calls {
		if c != nil && c.owner == owner {
			return c.entry
		}
	}
	return queue.Entry(w.ids.id(), time.Minute, owner)
}

// remember keeps c to be re-sent.
func (w *qworld) remember(c qcall) {
	w.history = append(w.history, c)
	if len(w.history) > 6 {
		w.history = w.history[1:]
	}
}

// lapse picks a key of the lock that is there to lapse.
func (w *qworld) lapse(c qcall, s queue.QuorumState, o op) (qcall, bool) {
	var ids []string
	switch o.a % 5 {
	case 0:
		c.lapse = queue.LapseHold
		return c, s.Hold != nil
	case 1:
		c.lapse = queue.LapseCounter
		return c, s.Counter != 0
	case 2:
		c.lapse = queue.LapseTicket
		return c, s.Ticket != 0
	case 3:
		c.lapse = queue.LapseGone
		for id := range s.Gone {
			ids = append(ids, id)
		}
	default:
		c.lapse = queue.LapseReceipt
		for id := range s.Receipts {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return c, false
	}
	slices.Sort(ids)
	c.lapseID = ids[int(o.b)%len(ids)]
	return c, true
}
