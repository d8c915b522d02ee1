package queue

import (
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Server is the model of the locks of one Redis server: one Model per
// lock, by the hash key P:{N} of the lock, all on the server's clock.
// The scripts of one lock reach the others only through tickets: a
// MultiLock's ticket is one waiter entry in the lines of several locks of
// the server at once, granted every one of them at once when it heads
// every line and none of them is held; until then it holds nothing, and a
// free lock it heads stays free (see MultiAcquire and lua/lib.lua). The
// weighted locks of the server (a Semaphore's, a RWMutex's) are each a
// WeightedModel, by their hash key P:{N}:<kind>, on the same clock, and
// the server's part of each quorum lock a QuorumModel, by its hash key
// P:{N}:q.
//
// A Server is not safe for concurrent use.
type Server struct {
	now        int64
	receiptTTL int64
	locks      map[string]*Model         // by hash key; a lock is made when first named
	weighted   map[string]*WeightedModel // weighted locks, by hash key P:{N}:<kind>; made when first named
	quorums    map[string]*QuorumModel   // quorum locks on this master, by hash key P:{N}:q; made when first named
	tickets    map[string]TicketList     // the keys P:ticket:<waiter id> of MultiLock tickets, by waiter id
	published  []Wake                    // wake and leader messages not yet drained, oldest first
	// candidacy is the candidate whose call the running script is, and
	// the value it campaigns with (see Model.Campaign), else nil: lib.lua's
	// candidacy, which acquire.lua sets for one run, and which every grant
	// (take) and join of that run looks at.
	candidacy *candidacy
}

// candidacy is an election's candidate entry and the value its call
// campaigns with.
type candidacy struct{ entry, value string }

// campaign makes the call of entry, which the next script runs, campaign
// with value, when entry is a candidate (the scripts ignore a value given
// for another entry), and returns what ends the run's candidacy: call it
// once the script has run (a script run's candidacy is lib.lua's, which
// begin clears).
func (s *Server) campaign(entry, value string) (end func()) {
	if !IsCandidate(entry) {
		return func() {}
	}
	s.candidacy = &candidacy{entry: entry, value: value}
	return func() { s.candidacy = nil }
}

// Wake is a wake message, and the lock on whose wake channels it was
// published (the lock's channel of the entry's Client; see Keys.WakeOf);
// or, when Leader is set, a message on the lock's leader channel,
// <hash key>:leader (an election's; see Model.tellLeader), whose Message
// is LeaderMessage.
type Wake struct {
	Lock    string // the lock's hash key
	Message string
	Leader  bool
}

// NewServer returns the model of a server whose clock reads now (ms), on
// which no lock has ever been used. Receipts of acquire and release calls
// live for receiptTTL ms, which must be positive (SET refuses other
// values).
func NewServer(now, receiptTTL int64) *Server {
	if receiptTTL <= 0 {
		panic("queue: NewServer with a receipt TTL that is not positive")
	}
	return &Server{now: now, receiptTTL: receiptTTL, locks: map[string]*Model{}, weighted: map[string]*WeightedModel{},
		quorums: map[string]*QuorumModel{}, tickets: map[string]TicketList{}}
}

// Lock returns the model of the lock whose hash key is key (its Keys.Lock).
func (s *Server) Lock(key string) *Model {
	m, ok := s.locks[key]
	if !ok {
		m = &Model{
			srv:      s,
			key:      key,
			line:     newMutexLine(),
			receipts: receipts{},
		}
		s.locks[key] = m
	}
	return m
}

// Weighted returns the model of the weighted lock (a Semaphore, a
// RWMutex) whose hash key is key (its Keys.Lock, made by Weighted).
func (s *Server) Weighted(key string) *WeightedModel {
	w, ok := s.weighted[key]
	if !ok {
		w = &WeightedModel{srv: s, key: key, leases: map[string]int64{}, line: newLine(), receipts: receipts{}}
		s.weighted[key] = w
	}
	return w
}

// locksOf returns the models of the locks whose hash keys are keys, in
// that order.
func (s *Server) locksOf(keys []string) []*Model {
	locks := make([]*Model, len(keys))
	for i, key := range keys {
		locks[i] = s.Lock(key)
	}
	return locks
}

// Now returns the server's clock (ms).
func (s *Server) Now() int64 { return s.now }

// Advance lets d ms pass. Tickets' keys, and in every lock holds, token
// counters and receipts whose expiry is reached are gone, and so are the
// hashes and holders sets of weighted locks, and the ticket counters and
// tombstones of quorum locks; nothing else happens, in particular nobody
// is told that a hold expired, and dead waiters stay in line until a
// script prunes them.
func (s *Server) Advance(d int64) {
	if d < 0 {
		panic("queue: Advance with a negative duration")
	}
	s.now += d
	for id, l := range s.tickets {
		if l.ExpiresAt != 0 && s.now >= l.ExpiresAt {
			delete(s.tickets, id)
		}
	}
	for _, m := range s.locks {
		m.expire()
	}
	for _, w := range s.weighted {
		w.expire()
	}
	for _, q := range s.quorums {
		q.expire()
	}
}

// publish sends msg on the wake channel of the lock key.
func (s *Server) publish(key, msg string) {
	s.published = append(s.published, Wake{Lock: key, Message: msg})
}

// publishLeader sends LeaderMessage on the leader channel of the lock key.
func (s *Server) publishLeader(key string) {
	s.published = append(s.published, Wake{Lock: key, Message: LeaderMessage, Leader: true})
}

// Drain returns the wake and leader messages published on every lock
// since the last Drain, oldest first, and forgets them.
func (s *Server) Drain() []Wake {
	msgs := s.published
	s.published = nil
	return msgs
}

// drain returns the wake and leader messages published on the lock key,
// oldest first, and forgets them.
func (s *Server) drain(key string) []Wake {
	var mine []Wake
	s.published = slices.DeleteFunc(s.published, func(w Wake) bool {
		if w.Lock == key {
			mine = append(mine, w)
			return true
		}
		return false
	})
	return mine
}

// luaTicket is the pattern of lib.lua's is_ticket: a waiter id of 24 hex
// digits (the call's 16 and its Client's tag) and the ticket version.
var luaTicket = regexp.MustCompile(`^[0-9A-Fa-f]{24}` + TicketVersion + `:`)

// isTicket reports whether entry is a MultiLock's ticket.
func isTicket(entry string) bool { return luaTicket.MatchString(entry) }

// hasTicket reports whether the key of the ticket entry is there: a
// ticket whose key has expired is dead.
func (s *Server) hasTicket(entry string) bool {
	_, ok := s.tickets[WaiterIDOf(entry)]
	return ok
}

// ticketLocks returns the locks of the ticket entry, one of which is m, as
// its key names them, in key order; nil when the ticket is dead.
func (m *Model) ticketLocks(entry string) []*Model {
	list, ok := m.srv.tickets[WaiterIDOf(entry)]
	if !ok {
		return nil
	}
	return m.srv.locksOf(list.Locks)
}

// ticketReady reports whether the ticket entry can be granted now: it
// heads the line of each of its locks, and none of them is held. When one
// is held it looks no further: the ticket is not ready, whatever the
// others are. Else it looks at the lines in key order and stops at the
// first that the ticket does not head, pruning those it passes; when the
// live head of the line it stops at is a waiter of that lock alone, the
// lock is handed to it (it was free only because nobody had handed it
// over yet: a holder's lease ran out).
//
// skip is a lock of the ticket that the caller found free with the ticket
// at its head, or nil: it is not looked at again.
func (s *Server) ticketReady(locks []*Model, entry string, skip *Model) bool {
	for _, l := range locks {
		if l != skip && l.hold != nil {
			return false
		}
	}
	for _, l := range locks {
		if l == skip {
			continue
		}
		head, _, ok := l.prune()
		if !ok || head != entry {
			if ok && !isTicket(head) {
				l.handOver("")
			}
			return false
		}
	}
	return true
}

// grantTicket gives every lock of the ticket entry, which heads each of
// their lines, to its owner, each under a fresh token, and drops the
// ticket's key. It returns the tokens, in the order of locks.
//
// When own, the ticket's own call takes them, and each hold lasts lease
// ms: its waiter is there to hold them. Otherwise (a hand-over, which may
// reach a waiter that is gone) each lasts the entry's lease, but no
// longer than the ticket's waiter deadline.
func (s *Server) grantTicket(locks []*Model, entry string, lease int64, own bool) []int64 {
	owner, entryLease, _ := parseEntry(entry)
	tokens := make([]int64, len(locks))
	for i, l := range locks {
		ttl := lease
		if !own {
			ttl = min(entryLease, l.deadlines[entry]-s.now)
		}
		l.popHead()
		tokens[i] = l.take(owner, entry, ttl)
	}
	delete(s.tickets, WaiterIDOf(entry))
	return tokens
}

// handOverTicket grants the ticket entry, the live head of the free lock
// m, every one of its locks if it is ready (see ticketReady), and
// publishes its wake message on its first lock: "<entry> <token of each
// lock, joined with commas> <time in µs>", from which its Client holds
// them all. It reports whether the ticket was granted.
func (s *Server) handOverTicket(m *Model, entry string) bool {
	locks := m.ticketLocks(entry)
	if locks == nil {
		return false
	}
	if !s.ticketReady(locks, entry, m) {
		return false
	}
	tokens := s.grantTicket(locks, entry, 0, false)
	each := make([]string, len(tokens))
	for i, t := range tokens {
		each[i] = strconv.FormatInt(t, 10)
	}
	msg := entry + " " + strings.Join(each, ",") + " " + strconv.FormatInt(s.now*1000, 10) // the model's clock has ms only
	s.publish(locks[0].key, msg)
	return true
}
