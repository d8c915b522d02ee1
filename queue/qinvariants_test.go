package queue_test

import (
	"errors"
	"fmt"
	"math"

	"github.com/fairlock/fairlock/queue"
)

// The invariants of a quorum lock on one master, which the differ checks
// on the scripts' state after every call.

// checkQuorum checks s, the state after call c answered got, against the
// state before, prev. now is the ms the scripts read; top is the highest
// token counter seen since it last lapsed (a hold's token is at most the
// counter while there is one).
func checkQuorum(prev, s queue.QuorumState, c qcall, got any, now, top int64) error {
	if err := checkLine(s.Queue, s.Deadlines); err != nil {
		return err
	}
	if len(s.Tickets) != len(s.Queue) {
		return fmt.Errorf("%d tickets for %d queued entries", len(s.Tickets), len(s.Queue))
	}
	for _, e := range s.Queue {
		if _, ok := s.Gone[queue.WaiterIDOf(e)]; ok {
			return fmt.Errorf("entry %q is queued while its call is buried", e)
		}
	}
	// An election's values wait beside the line for the candidates in it
	// alone, and a candidate's grant moves its value into the hold.
	for entry := range s.Values {
		if _, queued := s.Tickets[entry]; !queued || !queue.IsCandidate(entry) {
			return fmt.Errorf("a value beside the line for %q, which is no candidate in line", entry)
		}
	}
	h := s.Hold
	if h != nil && queue.IsCandidate(h.Entry) && !h.HasValue {
		return fmt.Errorf("the leadership of %q has no value", h.Entry)
	}
	if h != nil && h.Owner != "" {
		if h.Count < 1 || h.Token < 1 || (s.Counter > 0 && h.Token > s.Counter) {
			return fmt.Errorf("hold %+v with token counter %d", *h, s.Counter)
		}
		if _, ok := s.Deadlines[h.Entry]; ok {
			return fmt.Errorf("the holder %q waits in line too", h.Entry)
		}
		if _, ok := s.Gone[queue.WaiterIDOf(h.Entry)]; ok {
			return fmt.Errorf("the holder %q is buried", h.Entry)
		}
	}
	r, _ := got.(queue.QuorumReply)
	switch {
	case (c.kind == qJoin || c.kind == qYield) && r.State >= 0 && s.Ticket < c.ticket:
		return fmt.Errorf("the ticket %d was not written back: C is %d", c.ticket, s.Ticket)
	case c.kind == qCommit && r.State == 1 && (h == nil || h.Token != c.t || s.Counter < c.t):
		return fmt.Errorf("the token %d was committed, and the hold is %+v with token counter %d", c.t, h, s.Counter)
	case c.kind == qRelease && r.State == 1 && r.Count == 0 && c.t > 0 && !hadReceipt(prev, c) && s.Counter < c.t:
		return fmt.Errorf("the committed token %d was released, and the token counter is %d", c.t, s.Counter)
	case c.kind == qProclaim && got == true && (h == nil || !h.HasVseq || h.Vseq < c.t ||
		prevVseq(prev) < c.t && (h.Vseq != c.t || h.Value != c.value)):
		// A Proclaim under a number above the hold's writes its value; one
		// not above it (it came after a later one) writes nothing.
		return fmt.Errorf("the value %q was proclaimed under vseq %d, and the hold is %s", c.value, c.t, qholdText(h))
	}
	if err := checkGrant(prev, s, c, now, top); err != nil {
		return err
	}
	if settles(prev, c, r) {
		return checkQuorumSettled(s)
	}
	return nil
}

// hadReceipt reports whether c found its receipt, from an earlier run.
func hadReceipt(prev queue.QuorumState, c qcall) bool {
	_, ok := prev.Receipts[c.id]
	if c.last {
		// A last release's receipt is its entry's tombstone.
		_, buried := prev.Gone[queue.WaiterIDOf(c.entry)]
		ok = ok || buried
	}
	return ok
}

// checkGrant checks a grant the step made: its token is above every
// token seen before, and it went to the
// smallest live key in line (a hand-over), or to a try that found nobody
// live in line.
func checkGrant(prev, s queue.QuorumState, c qcall, now, top int64) error {
	h, p := s.Hold, prev.Hold
	if h == nil || h.Owner == "" {
		return nil
	}
	if p != nil && p.Owner != "" && p.Entry == h.Entry && (p.Token == h.Token || c.kind == qCommit) {
		return nil
	}
	// A token is the counter's next, which may be below the clock's term
	// (draw_token); the model, which the scripts match, draws the clock's
	// term when there is no counter.
	if h.Token <= top {
		return fmt.Errorf("token %d granted after token %d, at %d ms", h.Token, top, now)
	}
	// The keys that could be granted: the live waiters before the step,
	// less one that left by it, and one that joined (or yielded) by it.
	keys := map[string]int64{}
	for _, e := range prev.Queue {
		if prev.Deadlines[e] > now && !isQuorumTicket(e) {
			keys[e] = prev.Tickets[e]
		}
	}
	switch c.kind {
	case qCancel, qRelease:
		delete(keys, c.entry)
	case qJoin, qYield:
		// An entry still in line, dead or alive, keeps its ticket there.
		if t, ok := prev.Tickets[c.entry]; ok {
			keys[c.entry] = t
		} else {
			keys[c.entry] = c.ticket
		}
	case qTry, qReenter:
		// A try takes the lock only when nobody lives in line; else the
		// lock goes to the head, which may be the try's own entry.
		if _, queued := keys[c.entry]; h.Entry == c.entry && c.mode == queue.ModeTry && !queued {
			if len(keys) > 0 {
				return fmt.Errorf("a try took the lock past the live waiters %v", keys)
			}
			return nil
		}
	}
	t, ok := keys[h.Entry]
	if !ok {
		return fmt.Errorf("the lock went to %q, which was not waiting: %v", h.Entry, keys)
	}
	for e, et := range keys {
		if e != h.Entry && (et < t || et == t && e < h.Entry) {
			return fmt.Errorf("the lock went to %q (ticket %d) past %q (ticket %d)", h.Entry, t, e, et)
		}
	}
	return nil
}

// isQuorumTicket reports whether e looks like a MultiLock's ticket, which
// a quorum lock's line holds as dead.
func isQuorumTicket(e string) bool { return queue.IsTicket(e) }

// settles reports whether c's script settled the lock (ran its hand-over
// and inquiry last).
func settles(prev queue.QuorumState, c qcall, r queue.QuorumReply) bool {
	switch c.kind {
	case qJoin, qYield:
		return r.State >= 0
	case qCancel, qForce:
		return true
	case qRelease:
		return !hadReceipt(prev, c) && (r.State == 0 && c.last || r.State == 1 && r.Count == 0)
	}
	return false
}

// checkQuorumSettled checks a settled lock: a free lock has nobody in line
// (the live head was handed it, the dead ones pruned), and a holder with
// a larger key than the head was asked to yield to it.
func checkQuorumSettled(s queue.QuorumState) error {
	h := s.Hold
	if h == nil {
		if len(s.Queue) > 0 {
			return fmt.Errorf("the lock is free while %q waits", s.Queue)
		}
		return nil
	}
	if h.Owner == "" || len(s.Queue) == 0 {
		return nil
	}
	head := s.Queue[0]
	ticket := int64(math.MaxInt64)
	if h.Ticketed {
		ticket = h.Ticket
	}
	if (s.Tickets[head] < ticket || s.Tickets[head] == ticket && head < h.Entry) && h.Inquired != head {
		return errors.New("the holder " + h.Entry + " blocks " + head + " and was not asked to yield")
	}
	return nil
}

// prevVseq is the vseq of the hold before a call, -1 when it had none.
func prevVseq(prev queue.QuorumState) int64 {
	if prev.Hold == nil || !prev.Hold.HasVseq {
		return -1
	}
	return prev.Hold.Vseq
}
