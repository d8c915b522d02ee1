package queue

import (
	"fmt"
	"strconv"
)

// The quorum lock's scripts on one master, each the model of the script
// of the same name (lua/q*.lua): arguments in the script's order, without
// the keys and the wake channel. Times are in ms, skew in µs.
//
// The tries and joins of an election's candidate carry its value last
// (ARGV[9]), as lua.Call.WithValue adds it: "" sends none, and the
// scripts then campaign with no value of the call's own (a value beside
// the line, or "", becomes the leadership's at a grant). A value given
// for an entry that is no candidate is ignored, as the scripts ignore it.

// QTry is qtry.lua: owner's Lock call with entry takes the free lock
// (mode ModeTry: the doorway), claims a grant made to entry, or adds a
// level to a hold of owner (ModeReenter, or a try under another entry).
// The answer has State, Token, Count, Ticket (C), Now (µs) and Counter
// (K).
//
// A re-entry keeps a receipt "<token> <count>" under call, and a call
// that finds its receipt answers from it. A fresh try never passes a live
// waiter: when the lock is free while one waits, the lock goes to the
// head and the try is refused. lease 0 keeps the expiry of the hold.
//
// A candidate's grant, its own or the head's, is a leadership (see take);
// value is its call's (see above).
func (m *QuorumModel) QTry(call, owner, entry string, lease, waiterTTL int64, mode string, receiptTTL, skew int64, value string) QuorumReply {
	defer m.campaign(entry, value)()
	c := m.begin(waiterTTL, skew)
	answer := func(state int, token int64, count int) QuorumReply {
		return QuorumReply{State: state, Token: token, Count: count, Ticket: m.ticket.lastToken, Now: c.us, Counter: m.token.lastToken}
	}
	if r, ok := m.receipts[call]; ok {
		var token int64
		var count int
		if _, err := fmt.Sscanf(r.Answer, "%d %d", &token, &count); err != nil {
			panic("queue: a qtry call id that another script used: " + r.Answer)
		}
		return answer(1, token, count)
	}
	if m.buried(entry) {
		return answer(-1, 0, 0)
	}
	h := m.held()
	if h != nil && h.Owner == owner {
		if h.Entry == entry && mode == ModeTry {
			// A grant to this very call: a try sent again, or a hand-over.
			count, token := h.Count, h.Token
			if lease > 0 {
				m.expireHold(lease)
			}
			return answer(1, token, count)
		}
		h.Count++
		count, token := h.Count, h.Token
		if lease > 0 {
			m.expireHold(lease)
		}
		m.receipts.keep(call, strconv.FormatInt(token, 10)+" "+strconv.Itoa(count), m.srv.now, receiptTTL)
		return answer(1, token, count)
	}
	if h != nil || mode != ModeTry {
		return answer(0, 0, 0)
	}
	if _, _, ok := m.prune(c.now); ok {
		m.settle(c)
		return answer(0, 0, 0)
	}
	return answer(1, m.take(owner, entry, lease, c), 1)
}

// QJoin is qjoin.lua: entry joins the line with ticket, keeps its place
// there (a heartbeat), or, when yield is the token of its hold here,
// gives the hold up and goes back in line by its ticket. The ticket is
// first written into C. A hold of the entry takes the ticket and lasts at
// least min(lease, waiterTTL) more. Then the lock settles (a hand-over, an
// inquiry). The answer has State (-1 when the entry's call is buried),
// Token, Lower, Hint, Counter (K) and Now (µs).
//
// A candidate that joins (again, after a yield) with value writes it
// beside the line (see join); its yield is told on the leader channel,
// before whatever the settling tells.
func (m *QuorumModel) QJoin(owner, entry string, lease, waiterTTL, ticket, yield, skew int64, value string) QuorumReply {
	defer m.campaign(entry, value)()
	c := m.begin(waiterTTL, skew)
	if m.buried(entry) {
		return QuorumReply{State: -1, Hint: 1, Counter: m.token.lastToken, Now: c.us}
	}
	if m.flaws&flawNoWriteBack == 0 {
		m.ticket.raise(ticket, c.now, m.srv.now, waiterTTL)
	}
	h := m.held()
	if h != nil && h.Entry == entry && yield != 0 && h.Token == yield {
		m.hold, h = nil, nil
		m.ended(entry)
	}
	lower := false
	if h != nil && h.Entry == entry {
		h.Ticket, h.Ticketed = ticket, true
		if keep := min(lease, waiterTTL); m.pttl() < keep {
			m.expireHold(keep)
		}
		lower = m.inquire(h, c)
	} else {
		m.join(entry, c.now, waiterTTL, ticket)
		switch {
		case h == nil:
			m.settle(c)
		case !h.Ticketed || keyLess(ticket, entry, h.Ticket, h.Entry):
			// The entry's key is below the holder's: it may head the
			// line now. A larger key changes nothing before the holder.
			m.inquire(h, c)
		}
	}
	var r QuorumReply
	if h := m.held(); h != nil && h.Entry == entry {
		r = QuorumReply{State: 1, Token: h.Token, Lower: lower, Hint: max(floorDiv(min(lease, waiterTTL), 3), 1)}
	} else {
		r = QuorumReply{Hint: m.hint(waiterTTL, c.now)}
	}
	r.Counter, r.Now = m.token.lastToken, c.us
	return r
}

// QCancel is qcancel.lua: entry's Lock call gives up. The entry leaves
// the line (a candidate's value with it) and is buried for tomb ms, a
// hold of it is given up (told, a candidate's), and the lock settles. It
// reports whether a hold was given up.
func (m *QuorumModel) QCancel(entry string, waiterTTL, tomb, skew int64) bool {
	c := m.begin(waiterTTL, skew)
	m.leave(entry)
	m.bury(entry, tomb)
	dropped := false
	if h := m.held(); h != nil && h.Entry == entry {
		m.hold, dropped = nil, true
		m.ended(entry)
	}
	m.settle(c)
	return dropped
}

// QRelease is qrelease.lua: owner gives up one level. Levels left keep
// the hold (lease ms more; 0 keeps its expiry), with a receipt of the
// count under call. At the last one the hold ends, K is raised to
// committed (when not 0, and K is below it), the entry leaves the line,
// entry and the hold's entry are buried for tomb ms, and the lock
// settles. An owner that does not hold here only leaves the line and is
// buried, when last. The answer has State (1 when the owner held here)
// and Count; a call that finds its receipt answers from it, and a last
// one that finds entry buried (the tombstone is its receipt) answers
// State 1, Count 0.
//
// A hold that ends is handed over in place: the next hold is written
// over its hash (see handOver), whose grant is told first when it is a
// leadership, and then the end of the hold, when it was a candidate's.
func (m *QuorumModel) QRelease(call, owner, entry string, committed, lease int64, last bool, waiterTTL, tomb, receiptTTL, skew int64) QuorumReply {
	if r, ok := m.receipts[call]; ok {
		count, err := strconv.Atoi(r.Answer)
		if err != nil {
			panic("queue: a qrelease call id that another script used: " + r.Answer)
		}
		return QuorumReply{State: 1, Count: count}
	}
	if last && m.buried(entry) {
		return QuorumReply{State: 1}
	}
	c := m.begin(waiterTTL, skew)
	h := m.held()
	if h == nil || h.Owner != owner {
		if last {
			m.leave(entry)
			m.bury(entry, tomb)
			m.settle(c)
		}
		return QuorumReply{}
	}
	h.Count--
	if h.Count > 0 {
		if lease > 0 {
			m.expireHold(lease)
		}
		m.receipts.keep(call, strconv.Itoa(h.Count), m.srv.now, receiptTTL)
		return QuorumReply{State: 1, Count: h.Count}
	}
	// K at or above the committed token already (a commit here raised
	// it) is kept until the clock term has passed it: nothing to write.
	// Raised first, the token a hand-over draws is above it, as the
	// script draws it above the committed token.
	if committed != 0 && m.token.lastToken < committed && m.flaws&flawNoReleaseRaise == 0 {
		m.token.raise(committed, c.now, m.srv.now, waiterTTL)
	}
	m.leave(entry)
	m.bury(entry, tomb)
	over := h.Entry // h is the hash, which the hand-over writes over
	if over != entry {
		m.bury(over, tomb)
	}
	m.handOver(c, true)
	m.ended(over)
	return QuorumReply{State: 1}
}

// QRenew is qrenew.lua: owner's hold lasts lease ms more. The answer is
// State 1 with the hold's Token, or 0 with Counter (K). It reads no
// clock.
func (m *QuorumModel) QRenew(owner string, lease int64) QuorumReply {
	h := m.held()
	if h == nil || h.Owner != owner {
		return QuorumReply{Counter: m.token.lastToken}
	}
	token := h.Token
	m.expireHold(lease)
	return QuorumReply{State: 1, Token: token}
}

// QCommit is qcommit.lua: owner's hold, when its token is at most t,
// takes t as its token, and K is raised to t (kept max(lease, waiterTTL)
// ms, and until the clock term has passed it); the hold's expiry is left
// as it is. The answer is
// State 1 with Token t, 2 with the hold's larger Token, or 0 with Counter
// (K) when owner does not hold here. A candidate's hold whose token
// changes is told: the committed token is the leadership's term.
func (m *QuorumModel) QCommit(owner string, t, lease, waiterTTL, skew int64) QuorumReply {
	c := m.begin(waiterTTL, skew)
	h := m.held()
	if h == nil || h.Owner != owner {
		return QuorumReply{Counter: m.token.lastToken}
	}
	if h.Token > t {
		return QuorumReply{State: 2, Token: h.Token}
	}
	if m.flaws&flawNoCommitRaise == 0 {
		m.token.raise(t, c.now, m.srv.now, max(lease, waiterTTL))
	}
	if IsCandidate(h.Entry) && (h.Token != t || !h.HasTerm || h.Term != t) {
		// A leadership's term is its committed token, kept as its term.
		h.Term, h.HasTerm = t, true
		m.tellLeader()
	}
	h.Token = t
	return QuorumReply{State: 1, Token: t}
}

// QForce is qforce.lua: the hold goes, whoever owns it (a hash without
// an owner too), and the lock settles. It reports whether there was one.
// The holder's Client is told first (Revoked), then the election's
// observers, when the hold was a candidate's.
func (m *QuorumModel) QForce(waiterTTL, skew int64) bool {
	c := m.begin(waiterTTL, skew)
	removed := m.hold != nil
	if removed && m.hold.Entry != "" {
		m.srv.publish(m.key, Revoked(m.hold.Entry))
		m.ended(m.hold.Entry)
	}
	m.hold = nil
	m.settle(c)
	return removed
}

// QProclaim is proclaim.lua on this master of a quorum's election (the
// binding lua.Scripts.QProclaim): the hold, when it is owner's under
// entry, takes value as its value and seq, the sequence number of the
// leader's Proclaim calls, as its vseq, and the election's observers are
// told; the hold's expiry stays. A seq not above the hold's vseq (a call
// that arrives after a later one) writes nothing and is true. It returns
// false, having written nothing, when the hold is not owner's under entry
// (see HoldState.proclaim). It reads no clock.
func (m *QuorumModel) QProclaim(owner, entry, value string, seq int64) bool {
	if m.hold == nil || m.hold.Owner != owner || m.hold.Entry == "" || m.hold.Entry != entry {
		return false
	}
	if m.hold.HasVseq && m.hold.Vseq >= seq {
		return true // a later Proclaim's value is there already
	}
	m.hold.proclaim(owner, entry, value)
	m.hold.Vseq, m.hold.HasVseq = seq, true
	m.tellLeader()
	return true
}

// campaign is Server.campaign for a call of entry whose value is its
// ARGV[9]: "" is none (see the top of this file).
func (m *QuorumModel) campaign(entry, value string) (end func()) {
	if value == "" {
		return func() {}
	}
	return m.srv.campaign(entry, value)
}
