package queue

import (
	"strconv"
	"strings"
)

// Acquire modes: ModeTry never enqueues, ModeWait enqueues or heartbeats,
// ModeReenter only adds a level to a hold the owner still has. The scripts
// treat any other mode as ModeTry.
const (
	ModeTry     = "try"
	ModeWait    = "wait"
	ModeReenter = "reenter"
)

// Reply is the answer of one acquire.
type Reply struct {
	Granted bool  // the caller holds the lock after the call
	Token   int64 // when granted: the fencing token
	Count   int   // when granted: the owner's levels after the call
	Hint    int64 // when not granted in wait mode: poll again in this many ms
	Joined  bool  // when not granted: this call appended the entry to the queue
	// Position, when Joined, is the entry's place in line once appended:
	// the length of the queue, 1 for the head. Entries of dead waiters
	// ahead count until they reach the head and are dropped.
	Position int
	// ServerTime, when not granted in wait mode, is the server's time
	// when the call ran, in µs.
	ServerTime int64
	// Tokens, for a grant of several locks at once (a MultiLock's), are
	// the fencing tokens of each, in key order; Token is the first.
	Tokens []int64
}

// Acquire is acquire.lua: owner's Lock call with waiter entry entry takes
// the lock, re-enters it, or waits in line for it. lease is the hold's
// expiry after the call in ms (0 keeps the expiry of a re-entered hold),
// waiterTTL how long a queued waiter keeps its place without polling, and
// mode ModeTry or ModeWait. call is the call's id: a re-entry leaves a
// receipt under it, and a re-entry whose receipt exists already ran and
// answers what it answered then. A grant needs no receipt: a call under
// the entry a hold was given to claims it, with the same token and count.
//
// An election's candidate (an entry for which IsCandidate holds) calls
// Campaign, which gives its value; called here, without one, it joins
// the line with no value beside it, and its grant writes the one it
// joined with, or "" (see take).
func (m *Model) Acquire(call, owner, entry string, lease, waiterTTL int64, mode string) Reply {
	// 1. The owner holds the lock. Take the entry out of the queue if it is
	// there, and extend the lease unless it is fixed (lease 0).
	if m.hold != nil && m.hold.Owner == owner {
		if m.hold.Entry != entry {
			// A re-entry. If this very call ran before, answer from its
			// receipt. A receipt that is not an acquire's (call ids are
			// unique, so never in use) makes the script answer {1} alone.
			if r, ok := m.receipts[call]; ok {
				token, count, _ := strings.Cut(r.Answer, ":")
				t, err1 := strconv.ParseInt(token, 10, 64)
				c, err2 := strconv.Atoi(count)
				if err1 != nil || err2 != nil {
					return Reply{Granted: true}
				}
				return Reply{Granted: true, Token: t, Count: c}
			}
		}
		m.leave(entry)
		if lease > 0 {
			m.expireHold(lease)
		}
		if m.hold.Entry == entry {
			// The lock was given to this very entry: a hand-over the
			// waiter missed or polled before, or the call's own grant,
			// re-sent. It claims the hold, and the count stays.
			return Reply{Granted: true, Token: m.hold.Token, Count: m.hold.Count}
		}
		// A re-entry: one more level of the same hold.
		m.hold.Count++
		return m.reentered(call, m.hold.Token, m.hold.Count)
	}

	// A re-entry whose owner no longer holds the lock must not turn into a
	// fresh grant: the hold it meant to extend is gone. A free lock still
	// goes to the live head of the queue, as in step 2.
	if mode == ModeReenter {
		if m.hold == nil {
			m.handOver("")
		}
		return Reply{}
	}

	// 2. The lock is free. If nobody live is ahead of the caller, it takes
	// the lock: a fresh grant. Otherwise the lock is free while someone
	// else is first in line (its holder's lease ran out and nobody was
	// told): hand it to that head now, and go on as if it were held.
	if m.hold == nil {
		head, _, ok := m.prune()
		if !ok || head == entry {
			if ok {
				m.popHead()
			}
			return Reply{Granted: true, Token: m.take(owner, entry, lease), Count: 1}
		}
		m.handOver("")
	}

	// 3. Someone else holds the lock. Try mode answers busy: it never
	// enqueues, and never takes a lock someone is waiting for.
	if mode != ModeWait {
		return Reply{}
	}
	// Wait mode joins the line, or keeps its place there: the deadline
	// moves to now + waiterTTL at every poll (the waiter's heartbeat).
	// Poll again right after the hold expires (expiry publishes nothing),
	// and at least three times per waiter TTL.
	now := m.srv.now
	position := m.join(entry, now, waiterTTL)
	return Reply{Hint: pollHint([]*Model{m}, waiterTTL), Joined: position > 0, Position: position, ServerTime: now * 1000}
}

// Campaign is acquire.lua called with value (ARGV[8]; the binding
// lua.Scripts.Campaign): Acquire of an election's candidate entry, whose
// call campaigns with value. It runs as Acquire does, but for two steps:
// when the call joins the entry to the line, value is written beside it
// (a heartbeat writes none, so the value the entry joined with stays;
// see join), and when the call itself is granted, the leadership takes
// value, whatever the entry joined with (see take). A grant the call
// makes to another entry (the free lock handed to the head) takes that
// entry's own value. For an entry that is no candidate, value is
// ignored, as the script ignores ARGV[8].
func (m *Model) Campaign(call, owner, entry string, lease, waiterTTL int64, mode, value string) Reply {
	defer m.srv.campaign(entry, value)()
	return m.Acquire(call, owner, entry, lease, waiterTTL, mode)
}

// Proclaim is proclaim.lua: the leadership of owner, granted to the
// candidate entry entry, takes value as its value, and the election's
// observers are told (tellLeader); the hold's expiry stays. It returns
// false, having written nothing, when the hold is not owner's under
// entry: the lock is free, another owner holds it, it was given to
// another entry, or its entry was cleared (a level of a shared owner
// given back; the script reads the field as absent, which no argument
// equals). Like the script, it asks no more than that: a hold given to
// an entry that is no candidate takes a value too.
func (m *Model) Proclaim(owner, entry, value string) bool {
	if m.hold == nil || !m.hold.proclaim(owner, entry, value) {
		return false
	}
	m.tellLeader()
	return true
}

// reentered writes the receipt of a re-entry and answers granted.
func (m *Model) reentered(call string, token int64, count int) Reply {
	m.receipts.keep(call, strconv.FormatInt(token, 10)+":"+strconv.Itoa(count), m.srv.now, m.srv.receiptTTL)
	return Reply{Granted: true, Token: token, Count: count}
}

// Release is release.lua: owner gives up one level of its hold. The levels
// that remain get lease ms more (0 keeps the expiry: a fixed lease is never
// extended); at the last level the lock goes straight to the next live
// waiter, and when nobody takes over a leadership that ends, the
// election's observers are told (handOn). It returns the levels the
// owner still holds, or -1 when it does not hold the lock. A call whose
// receipt exists answers from it.
func (m *Model) Release(call, owner string, lease int64) int {
	return m.ReleaseFrom(call, owner, "", lease).Count
}

// Released is the answer of a release: the levels the owner still holds
// (0: the hold is over), or -1 when it did not hold the lock; and, when
// the lock was handed to waiters of the releasing Client itself, the wake
// message of each, in the order of their grants, which was not published
// (a local hand-off), else none. A Mutex's release hands over to one
// waiter at most; a weighted lock's may grant several.
type Released struct {
	Count int
	Wakes []string
}

// ReleaseFrom is Release made by the Client with tag own (see handOver):
// a hand-over to a waiter of that Client publishes nothing and answers
// the wake message. A re-sent call answers what the first one answered,
// wake message included.
func (m *Model) ReleaseFrom(call, owner, own string, lease int64) Released {
	// 0. The call already ran: answer what it answered. (An acquire's
	// receipt would make the script answer nil; call ids are unique, so
	// that never happens, and the model answers 0.)
	if r, ok := m.receipts[call]; ok {
		return releasedOf(r.Answer)
	}
	// 1. Not the owner: not held, and no receipt.
	if m.hold == nil || m.hold.Owner != owner {
		return Released{Count: -1}
	}
	// 2. One level less. Levels remain: extend the lease.
	m.hold.Count--
	count := m.hold.Count
	var wake string
	if count > 0 {
		if lease > 0 {
			m.expireHold(lease)
		}
	} else {
		// 3. The last level: the hold ends, and the lock is handed over at
		// once, so it is never free between two holders.
		entry := m.hold.Entry
		m.hold = nil
		wake = m.handOn(entry, own)
	}
	answer := strconv.Itoa(count)
	if wake != "" {
		answer += " " + wake
	}
	m.receipts.keep(call, answer, m.srv.now, m.srv.receiptTTL)
	if wake == "" {
		return Released{Count: count}
	}
	return Released{Count: count, Wakes: []string{wake}}
}

// releasedOf reads a release's receipt: "<count>", or "<count> <wake
// message>", whose messages a weighted lock's release joins with "\n"
// (an owner id has no control character).
func releasedOf(answer string) Released {
	count, wakes, ok := strings.Cut(answer, " ")
	n, _ := strconv.Atoi(count)
	if !ok {
		return Released{Count: n}
	}
	return Released{Count: n, Wakes: strings.Split(wakes, "\n")}
}

// Renew is renew.lua: the hold lasts lease ms more if owner holds it. It
// returns false when owner does not hold the lock: its lease was lost. It
// needs no receipt, since renewing twice is harmless.
func (m *Model) Renew(owner string, lease int64) bool {
	if m.hold == nil || m.hold.Owner != owner {
		return false
	}
	m.expireHold(lease)
	return true
}

// Cancel is cancel.lua: the Lock call of owner with waiter entry entry
// gives up and leaves nothing behind. If the lock was handed to that entry
// meanwhile, that level is released, which hands the lock on; if the lock
// is free, it goes to the live head. It returns true when a level handed
// to the entry was given back. A re-sent cancel finds nothing more to do.
// (Server.CancelTicket is the same script for the locks of a ticket.)
func (m *Model) Cancel(owner, entry string) bool {
	return m.srv.cancel([]*Model{m}, owner, entry)
}

// ForceUnlock is forceunlock.lua: the hold is removed whoever owns it, and
// the lock goes to the next live waiter. It returns whether there was a
// hold. The former holder's Client is told first (Revoked), when the
// hold has an entry; and a leadership removed with nobody to take it
// over is told on the leader channel (handOn).
func (m *Model) ForceUnlock() bool {
	removed := m.hold != nil
	entry := ""
	if removed {
		entry = m.hold.Entry
	}
	if entry != "" {
		m.srv.publish(m.key, Revoked(entry))
	}
	m.hold = nil
	m.handOn(entry, "")
	return removed
}

// floorDiv is Lua's math.floor(a / b) for b > 0.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// ReleaseOf is one hold's part of a ReleaseAll: owner gives up one level
// of its hold of the lock whose hash key is Lock, under call id Call,
// with Lease for the levels that remain (0 keeps the expiry).
type ReleaseOf struct {
	Lock  string
	Call  string
	Owner string
	Lease int64
}

// ReleaseAll is release.lua for several holds of the server at once (a
// MultiLock's Unlock), made by the Client with tag own: each releases one
// level as ReleaseFrom does and keeps its own receipt, but every hold that
// ends is ended before any lock is handed over, as if they were released
// at one instant, and the hand-overs then run in the order of rs, each on
// a lock that is still free (a ticket granted by an earlier one may hold
// it; that lock is not handed on, and nothing is told of the hold that
// ended there). It returns each release's answer, in the order of rs.
func (s *Server) ReleaseAll(rs []ReleaseOf, own string) []Released {
	out := make([]Released, len(rs))
	var over []int
	ended := make([]string, len(rs)) // the entry each hold that is over was given to
	for i, r := range rs {
		m := s.Lock(r.Lock)
		if rec, ok := m.receipts[r.Call]; ok {
			out[i] = releasedOf(rec.Answer)
			continue
		}
		if m.hold == nil || m.hold.Owner != r.Owner {
			out[i] = Released{Count: -1}
			continue
		}
		m.hold.Count--
		if m.hold.Count > 0 {
			if r.Lease > 0 {
				m.expireHold(r.Lease)
			}
			out[i] = Released{Count: m.hold.Count}
			m.receipts.keep(r.Call, strconv.Itoa(m.hold.Count), s.now, s.receiptTTL)
			continue
		}
		ended[i] = m.hold.Entry
		m.hold = nil
		over = append(over, i)
	}
	for _, i := range over {
		m := s.Lock(rs[i].Lock)
		var wake string
		if m.hold == nil {
			wake = m.handOn(ended[i], own)
		}
		answer := "0"
		out[i] = Released{}
		if wake != "" {
			answer += " " + wake
			out[i].Wakes = []string{wake}
		}
		m.receipts.keep(rs[i].Call, answer, s.now, s.receiptTTL)
	}
	return out
}
