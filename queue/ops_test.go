package queue_test

import (
	"fmt"
	"math/rand/v2"
)

// The calls of a differential run, and the ops they are decoded from (see
// gen_test.go).

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

// An op is one decoded choice: what kind of call, two argument bytes, and
// on several locks a byte that picks the lock, or the locks of a MultiLock.
type op struct{ kind, a, b, lock byte }

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

	// Kinds of calls that no byte decodes to: a waiting call, a try or a
	// cancel (above) turns into one of these when it is a MultiLock's.
	opMulti        // multiacquire, wait or try mode
	opCancelTicket // a MultiLock's waiting call gives up

	// A kind of the runs of weighted locks alone (see wgen_test.go).
	opResize // a Semaphore's capacity changes

	// A release that no byte decodes to: a release turns into one of a
	// level of a hold of each of two or three locks at once (a
	// MultiLock's Unlock).
	opReleaseAll

	opProclaim // the holder of an election's leadership changes its value
)

// kinds are the kinds of ops, by weight. A new kind goes at the end: the
// inputs written out in FuzzScriptsMatchModel name kinds by their index,
// which then stays theirs (each first byte there is below len(kinds)).
var kinds = []byte{
	opPoll, opPoll, opPoll, opPoll, opTry, opReenter, opRelease, opRelease,
	opRenew, opCancel, opDie, opForce, opAdvance, opAdvance, opAdvance, opResend,
	opProclaim,
}

// next decodes one op: three bytes on one lock, four on several; ok is
// false when the source ran out.
func (w *world) next(src source) (o op, ok bool) {
	b := make([]byte, 3, 4)
	if len(w.names) > 1 {
		b = b[:4]
	}
	for i := range b {
		if b[i], ok = src.next(); !ok {
			return op{}, false
		}
	}
	o = op{kind: kinds[int(b[0])%len(kinds)], a: b[1], b: b[2]}
	if len(b) == 4 {
		o.lock = b[3]
	}
	return o, true
}

// call is one concrete call, as applied to the model and the scripts.
type call struct {
	kind         byte
	lock         int    // the index of the lock of a single-lock call
	locks        []int  // opMulti, opCancelTicket: the indices of the locks, in key order
	names        string // for the log: the lock's name, or the MultiLock's; "" on one lock
	id           string
	owner, entry string
	lease, ttl   int64
	mode         string
	campaign     bool     // opPoll, opTry: a candidate's acquire with its value (Campaign)
	value        string   // campaign: the candidate's value; opProclaim: the new value
	own          string   // opRelease, opReleaseAll: the releasing Client's tag, "" for none
	owners       []string // opReleaseAll: the owner of each lock's release, in the order of locks
	d            int64    // opAdvance: ms
}

func (c call) String() string {
	on := ""
	if c.names != "" {
		on = c.names + ": "
	}
	switch c.kind {
	case opPoll, opTry, opReenter:
		if c.campaign {
			return fmt.Sprintf("%scampaign(call=%s owner=%s entry=%s lease=%d waiterTTL=%d mode=%s value=%q)",
				on, c.id, c.owner, c.entry, c.lease, c.ttl, c.mode, c.value)
		}
		return fmt.Sprintf("%sacquire(call=%s owner=%s entry=%s lease=%d waiterTTL=%d mode=%s)",
			on, c.id, c.owner, c.entry, c.lease, c.ttl, c.mode)
	case opProclaim:
		return fmt.Sprintf("%sproclaim(owner=%s entry=%s value=%q)", on, c.owner, c.entry, c.value)
	case opMulti:
		return fmt.Sprintf("%smultiacquire(owner=%s entry=%s lease=%d waiterTTL=%d mode=%s)",
			on, c.owner, c.entry, c.lease, c.ttl, c.mode)
	case opRelease:
		return fmt.Sprintf("%srelease(call=%s owner=%s own=%q lease=%d)", on, c.id, c.owner, c.own, c.lease)
	case opReleaseAll:
		return fmt.Sprintf("%srelease(call=%s owners=%q own=%q lease=%d)", on, c.id, c.owners, c.own, c.lease)
	case opRenew:
		return fmt.Sprintf("%srenew(owner=%s lease=%d)", on, c.owner, c.lease)
	case opCancel, opCancelTicket:
		return fmt.Sprintf("%scancel(owner=%s entry=%s)", on, c.owner, c.entry)
	case opForce:
		return on + "forceunlock()"
	case opAdvance:
		return fmt.Sprintf("advance(%d ms)", c.d)
	}
	return "none"
}
