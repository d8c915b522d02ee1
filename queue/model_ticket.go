package queue

import "slices"

// MultiAcquire is multiacquire.lua: owner's MultiLock call with the ticket
// entry (a waiter entry whose waiter id ends with TicketVersion) takes
// every lock of keys at once (hash keys, at least two, in key order), or
// waits in all their lines at once. lease is each hold's expiry after the
// call in ms, waiterTTL how long the queued ticket keeps its place
// without polling, and mode ModeTry (never enqueue) or anything else
// (wait: enqueue or heartbeat).
//
// The answer is a grant of every lock (Tokens, one per lock in the order
// of keys; Token is the first, Count 1) or of none: a call never leaves
// the caller holding some of the locks. A ticket is granted only when it
// heads every one of its lines and none of its locks is held, so the
// oldest ticket is never passed, and a ticket holds nothing while it
// waits. A re-sent call answers as the first did: a grant made by the
// first is claimed, and a join made by the first is found in line and
// becomes a heartbeat.
func (s *Server) MultiAcquire(keys []string, owner, entry string, lease, waiterTTL int64, mode string) Reply {
	locks := s.locksOf(keys)

	// 1. Every lock was given to this ticket (a hand-over, or this very
	// call re-sent): claim them, with the full lease from now. When only
	// some of them still are (the others' holds ran out before the
	// claim), give those back: the ticket's grant is lost, and the call
	// goes on as a fresh one.
	tokens := make([]int64, len(locks))
	mine := make([]bool, len(locks))
	for i, l := range locks {
		mine[i] = l.hold != nil && l.hold.Owner == owner && l.hold.Entry == entry
		if mine[i] {
			tokens[i] = l.hold.Token
		}
	}
	if !slices.Contains(mine, false) {
		for _, l := range locks {
			l.expireHold(lease)
		}
		return granted(tokens)
	}
	for i, l := range locks {
		if mine[i] {
			l.giveBack()
		}
	}

	// 2. Try: every lock free with nobody live in its line. It stops at
	// the first lock that is held or awaited, and hands nothing over.
	if mode == ModeTry {
		for _, l := range locks {
			if l.hold != nil {
				return Reply{}
			}
			if _, _, ok := l.prune(); ok {
				return Reply{}
			}
		}
		for i, l := range locks {
			tokens[i] = l.take(owner, entry, lease)
		}
		return granted(tokens)
	}

	// 3. Wait: keep the ticket's place in every line (its heartbeat), or
	// join every line at its end, writing the ticket's key (the time it
	// joined and its locks); the key expires with the ticket's deadline.
	// Then take every lock, for the full lease, if the ticket is ready.
	//
	// The ticket keeps its places only while its key is there; else it
	// left every line (a grant, a cancel) or is dead, and may be pruned
	// from some lines and not from others. It then leaves every line and
	// joins each anew: the places of a ticket are always those one call
	// gave it, so two tickets stand in the same order in every line they
	// share. (One that kept an old place in some lines and rejoined
	// others could stand behind another ticket in one line and ahead of
	// it in another; each would head a line the other waits in, and
	// neither would ever be granted.)
	placed := s.hasTicket(entry)
	if !placed {
		for _, l := range locks {
			l.leave(entry)
		}
	}
	joined := 0
	for _, l := range locks {
		joined = max(joined, l.join(entry, s.now, waiterTTL))
	}
	id := WaiterIDOf(entry)
	if !placed {
		s.tickets[id] = TicketList{Joined: s.now, Locks: slices.Clone(keys)}
	}
	s.expireTicket(id, waiterTTL)
	if s.ticketReady(locks, entry, nil) {
		return granted(s.grantTicket(locks, entry, lease, true))
	}
	return Reply{Hint: pollHint(locks, waiterTTL), Joined: joined > 0, Position: joined, ServerTime: s.now * 1000}
}

// granted is the answer of a grant of every lock of a MultiLock call.
func granted(tokens []int64) Reply {
	return Reply{Granted: true, Token: tokens[0], Count: 1, Tokens: tokens}
}

// expireTicket is PEXPIRE on the key of the ticket id: it lasts ttl ms
// more; a ttl that is not positive deletes it. A key that is gone stays
// gone.
func (s *Server) expireTicket(id string, ttl int64) {
	list, ok := s.tickets[id]
	switch {
	case !ok:
	case ttl <= 0:
		delete(s.tickets, id)
	default:
		list.ExpiresAt = s.now + ttl
		s.tickets[id] = list
	}
}

// giveBack releases the level of the hold that was handed to an entry
// which gives it up: with other levels left (a shared owner's), the hold
// forgets the entry, so that giving it up again releases nothing more;
// at the last level the lock goes to the next live waiter, and a
// leadership given back with nobody to take it over is told (handOn, as
// cancel.lua runs it; multiacquire.lua's give-back runs hand_over, which
// is the same there: a ticket is never a candidate).
func (m *Model) giveBack() {
	m.hold.Count--
	if m.hold.Count > 0 {
		m.hold.Entry = ""
		return
	}
	entry := m.hold.Entry
	m.hold = nil
	m.handOn(entry, "")
}

// CancelTicket is cancel.lua for a MultiLock's ticket: owner's call with
// the ticket entry gives up the lines of every lock of keys (hash keys,
// in key order) and drops the ticket's key; a lock handed to the ticket
// meanwhile is given back, and a free lock goes to its live head. It
// returns true when a level handed to the ticket was given back. A
// re-sent call finds nothing more to do.
func (s *Server) CancelTicket(keys []string, owner, entry string) bool {
	return s.cancel(s.locksOf(keys), owner, entry)
}

// cancel is cancel.lua, for the one lock of a Lock call or the locks of a
// ticket.
func (s *Server) cancel(locks []*Model, owner, entry string) bool {
	for _, l := range locks {
		l.leave(entry)
	}
	if len(locks) > 1 {
		delete(s.tickets, WaiterIDOf(entry))
	}
	released := false
	for _, l := range locks {
		switch {
		case l.hold != nil && l.hold.Owner == owner && l.hold.Entry == entry:
			released = true
			l.giveBack()
		case l.hold == nil:
			l.handOver("")
		}
	}
	return released
}
