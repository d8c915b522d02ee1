package queue

import (
	"maps"
	"slices"
)

// QuorumModel is a reference model of the scripts of a quorum lock on one
// of its masters (qtry, qjoin, qcancel, qrelease, qrenew, qcommit and
// qforce, after lua/qlib.lua, and proclaim.lua on a quorum's election), in
// plain Go, as Model is of a Mutex's: the same keys, the same steps and
// the same answers. A lock held on N masters is N of them, each on a
// Server of its own.
//
// Its line is ordered by ticket, (ticket, entry) ascending, the same
// order on every master; its hold records the holder's ticket and the
// head the holder was last asked to yield to. Besides a Mutex's keys it
// keeps the largest ticket written here (C), and tombstones of the Lock
// calls that gave up or released, by waiter id.
//
// Two clocks are at work. Keys expire on the server's clock (Server.Now,
// ms), which Advance moves. The scripts read TIME plus the skew their
// caller names (µs): a waiter's deadline, a token's clock term and the
// time answered or published are on that clock. So are the expiries of
// the token counter that next_token sets, as an absolute time (SET ...
// PXAT, Redis 7 and later), and the time until which a counter raised
// above the clock term is kept (outlast). A skew of 0 makes the two
// clocks one.
//
// The values the callers write (tickets, committed tokens) are positive
// and below 2^53, where a Redis zset score and a Lua number are exact.
// Entries are well formed, with a hex waiter id (see Entry).
//
// A quorum lock's line may hold an election's candidates, as a Mutex's
// may (see Model): their values wait beside the line (P:{N}:q:values),
// the grant of a master's hold to a candidate moves its value into the
// hold, and every change of a master's hold of a candidate is told on
// the lock's leader channel, <key>:leader: a grant, a new value (QProclaim),
// a committed token (QCommit), and a hold that ends (a release, a cancel,
// a yield, a forced removal), whether or not a hand-over follows. Which
// leadership a majority of the masters holds is for their readers to
// work out; each master tells of its own hold.
//
// A QuorumModel is not safe for concurrent use.
type QuorumModel struct {
	srv *Server
	key string // the hash key P:{N}:q

	hold     *QuorumHold      // the hash P:{N}:q; nil when there is none
	line                      // the zsets P:{N}:q:queue and P:{N}:q:deadline, and the hash P:{N}:q:values
	token    counter          // K, the key P:{N}:q:token
	ticket   counter          // C, the key P:{N}:q:ticket
	gone     map[string]int64 // the tombstones P:{N}:q:gone:<waiter id>: server time (ms) each expires
	receipts receipts         // the keys P:{N}:q:call:<id>, by call id

	flaws quorumFlaw // steps left out on purpose; none but in the checkers' tests
}

// QuorumHold is the hold of a quorum lock on one master: the fields of
// its hash and its expiry.
type QuorumHold struct {
	HoldState
	Ticket   int64  // the holder's ticket, when Ticketed
	Ticketed bool   // false for a hold taken by a try, until its entry joins: its key is then above every waiter's
	Inquired string // the head the holder was last asked to yield to; "" when never
	// Expires is the field expires: the scripts' time (ms) its grant set
	// it to expire at, which later calls only move later (a lower bound
	// of ExpiresAt, on the scripts' clock); 0 when not written.
	Expires int64
	// Vseq is the field vseq: the sequence number of the leader's
	// Proclaim call that wrote Value (QProclaim), so that a reading of
	// a majority takes the latest value; HasVseq says whether the hash
	// has the field. A candidate's grant writes 0; any other grant none,
	// and one that writes over the hash of a hold that has just ended (a
	// release's hand-over) leaves the ended hold's, as it leaves every
	// field it does not write (Value too).
	Vseq    int64
	HasVseq bool
	// Term is the field term of a candidate's hold: the token a commit
	// (QCommit) made the leadership's term, 0 when none was committed
	// here yet; HasTerm says whether the hash has the field (a
	// candidate's grant writes 0).
	Term    int64
	HasTerm bool
}

// QuorumState is everything a QuorumModel holds at one instant.
type QuorumState struct {
	Now       int64            // the server's clock (ms)
	Hold      *QuorumHold      // nil when there is no hold
	Queue     []string         // by (ticket, entry)
	Tickets   map[string]int64 // entry -> its ticket in the line
	Deadlines map[string]int64 // entry -> the scripts' time (ms) by which it must join again
	Counter   int64            // K, the token counter; 0 when there is none
	CounterAt int64            // when Counter > 0: server time (ms) at which it expires
	Ticket    int64            // C, the largest ticket written; 0 when there is none
	TicketAt  int64            // when Ticket > 0: server time (ms) at which it expires
	Gone      map[string]int64 // waiter id -> server time (ms) at which its tombstone expires
	Receipts  map[string]Receipt
	Values    map[string]string // the values of the candidates in line, by entry (P:{N}:q:values)
}

// QuorumReply is the answer of one quorum script, as lua.QReply reads it;
// which fields are set depends on the script (see each method).
type QuorumReply struct {
	State   int   // -1 gone, 0 not held, 1 held, 2 (qcommit) held under a larger token
	Token   int64 // the hold's token
	Count   int   // the owner's levels
	Ticket  int64 // C
	Now     int64 // the scripts' time in µs
	Counter int64 // K
	Lower   bool  // a smaller key waits while the caller holds
	Hint    int64 // ms until the next join
}

// quorumFlaw names steps of the scripts that a QuorumModel leaves out on
// purpose, so that the tests can show that the checkers of a run on
// several masters catch what each step is there for (see export_test.go).
// No script has a flaw.
type quorumFlaw uint

const (
	// flawNoWriteBack: a join does not write its ticket into C, so a
	// later doorway may draw a smaller ticket (the bakery's write-back).
	flawNoWriteBack quorumFlaw = 1 << iota
	// flawNoCommitRaise: a commit does not raise K to the token.
	flawNoCommitRaise
	// flawNoReleaseRaise: a release does not raise K to the committed
	// token.
	flawNoReleaseRaise
	// flawHandOverWhileHeld: a hand-over does not look for a hold, and
	// gives the lock to the head over it.
	flawHandOverWhileHeld
)

// Quorum returns the model of the quorum lock whose hash key is key (its
// Keys.Lock, made by Quorum) on the server.
func (s *Server) Quorum(key string) *QuorumModel {
	q, ok := s.quorums[key]
	if !ok {
		q = &QuorumModel{srv: s, key: key, line: newOrderedLine(), gone: map[string]int64{}, receipts: receipts{}}
		s.quorums[key] = q
	}
	return q
}

// NewQuorumModel returns the model of a quorum lock that has never been
// used, alone on a master whose clock reads now (ms); its hash key is "".
func NewQuorumModel(now int64) *QuorumModel {
	return NewServer(now, 1).Quorum("")
}

// Now returns the server's clock (ms).
func (m *QuorumModel) Now() int64 { return m.srv.now }

// Advance lets d ms pass on the server's clock (see Server.Advance).
func (m *QuorumModel) Advance(d int64) { m.srv.Advance(d) }

// Clone returns a copy of the lock, alone on a server of its own whose
// clock reads the same, with the wake messages not yet drained.
func (m *QuorumModel) Clone() *QuorumModel {
	s := NewServer(m.srv.now, m.srv.receiptTTL)
	s.published = slices.Clone(m.srv.published)
	c := s.Quorum(m.key)
	if m.hold != nil {
		h := *m.hold
		c.hold = &h
	}
	c.line = line{queue: slices.Clone(m.queue), deadlines: maps.Clone(m.deadlines), tickets: maps.Clone(m.tickets),
		joined: map[string]int64{}, values: maps.Clone(m.values)}
	c.token, c.ticket = m.token, m.ticket
	c.gone, c.receipts = maps.Clone(m.gone), maps.Clone(m.receipts)
	c.flaws = m.flaws
	return c
}

// expire drops what has expired by the server's clock: the hold, the
// counters, tombstones and receipts.
func (m *QuorumModel) expire() {
	now := m.srv.now
	if m.hold != nil && m.hold.ExpiresAt != 0 && now >= m.hold.ExpiresAt {
		m.hold = nil
	}
	m.token.expire(now)
	m.ticket.expire(now)
	m.receipts.expire(now)
	for id, at := range m.gone {
		if now >= at {
			delete(m.gone, id)
		}
	}
}

// State returns a copy of the model's state.
func (m *QuorumModel) State() QuorumState {
	s := QuorumState{
		Now:       m.srv.now,
		Queue:     slices.Clone(m.queue),
		Tickets:   maps.Clone(m.tickets),
		Deadlines: maps.Clone(m.deadlines),
		Counter:   m.token.lastToken,
		CounterAt: m.token.tokenEnd,
		Ticket:    m.ticket.lastToken,
		TicketAt:  m.ticket.tokenEnd,
		Gone:      maps.Clone(m.gone),
		Receipts:  maps.Clone(m.receipts),
		Values:    maps.Clone(m.values),
	}
	if m.hold != nil {
		h := *m.hold
		s.Hold = &h
	}
	return s
}

// Drain returns the messages published on the lock's wake channels and
// on its leader channel since they were last drained, in the order they
// were published, and forgets them: a message on the leader channel has
// Leader set (its Message is LeaderMessage).
func (m *QuorumModel) Drain() []Wake { return m.srv.drain(m.key) }

// qclock is the clock of one script run: the scripts' time in ms and in
// µs (TIME plus the skew), and how long counters are kept at least (the
// waiter TTL: quorum_lock's keep).
type qclock struct {
	now, us, keep int64
}

// begin returns the clock of a script run whose caller names skew (µs)
// and the waiter TTL waiterTTL.
func (m *QuorumModel) begin(waiterTTL, skew int64) qclock {
	us := m.srv.now*1000 + skew
	return qclock{now: floorDiv(us, 1000), us: us, keep: waiterTTL}
}

// held is quorum_hold: the hold, or nil when there is none or its hash
// has no owner (see handOver).
func (m *QuorumModel) held() *QuorumHold {
	if m.hold == nil || m.hold.Owner == "" {
		return nil
	}
	return m.hold
}

// expireHold is PEXPIRE on the hold: it lasts ttl ms more; a ttl that is
// not positive deletes it.
func (m *QuorumModel) expireHold(ttl int64) {
	if ttl <= 0 {
		m.hold = nil
		return
	}
	m.hold.ExpiresAt = m.srv.now + ttl
}

// hint is qlib.lua's quorum_hint: the poll hint of a waiter, from the
// expiry the hold's grant recorded while that is ahead of the scripts'
// time now, else from the key's (PTTL).
func (m *QuorumModel) hint(waiterTTL, now int64) int64 {
	h := m.held()
	if h == nil {
		return hintOf(waiterTTL)
	}
	left := h.Expires - now
	if left <= 0 {
		left = m.pttl()
	}
	return hintOf(waiterTTL, left)
}

// pttl is PTTL on the hold: ms left, -1 when it never expires, -2 when
// there is no hold.
func (m *QuorumModel) pttl() int64 {
	switch {
	case m.hold == nil:
		return -2
	case m.hold.ExpiresAt == 0:
		return -1
	}
	return m.hold.ExpiresAt - m.srv.now
}

// bury writes the tombstone of entry's Lock call, for ttl ms (1 at least).
func (m *QuorumModel) bury(entry string, ttl int64) {
	m.gone[WaiterIDOf(entry)] = m.srv.now + max(ttl, 1)
}

// buried reports whether entry's Lock call has a tombstone.
func (m *QuorumModel) buried(entry string) bool {
	_, ok := m.gone[WaiterIDOf(entry)]
	return ok
}

// prune is lib.lua's prune on the ordered line, at the scripts' time now.
// No list of a MultiLock's ticket is ever kept under a quorum lock's
// base, so an entry that looks like a ticket is dead.
func (m *QuorumModel) prune(now int64) (head string, deadline int64, ok bool) {
	return m.line.prune(now, func(head string) bool { return !isTicket(head) })
}

// take makes owner the holder under a fresh token (drawn as draw_token
// does, with the run's keep), records the entry it was given to, and lets the
// hold expire after ttl ms. HSET writes over a hash that is there (that
// of a hold that has just ended: see handOver), emptying the head it
// was asked to yield to, and keeps its other fields.
//
// A candidate's grant is a leadership, as a Mutex's (see Model.take):
// its value moves from beside the line, or from the call that runs when
// the call is the candidate's own, into the hold (granted_value in lib.lua), and the
// election's observers are told, before the hold's PEXPIRE: a hold
// given a lease of 0 ms is told all the same, and gone at once.
func (m *QuorumModel) take(owner, entry string, ttl int64, c qclock) int64 {
	token := m.token.drawQuorum(c.now, ttl, c.keep)
	m.token.expire(m.srv.now)
	if m.hold == nil {
		m.hold = &QuorumHold{}
	}
	m.hold.Owner, m.hold.Count, m.hold.Token, m.hold.Entry, m.hold.Since = owner, 1, token, entry, c.now
	m.hold.Expires, m.hold.Inquired = c.now+ttl, ""
	if value, ok := m.grantValue(m.srv.candidacy, entry); ok {
		m.hold.lead(value)
		m.hold.Vseq, m.hold.HasVseq = 0, true // no Proclaim yet: not an ended leadership's
		m.hold.Term, m.hold.HasTerm = 0, true // no term committed yet
		m.tellLeader()
	}
	m.expireHold(ttl)
	return token
}

// tellLeader is lib.lua's tell_leader on the lock: it publishes
// LeaderMessage on its leader channel, <key>:leader.
func (m *QuorumModel) tellLeader() { m.srv.publishLeader(m.key) }

// ended is lib.lua's tell_ended: the hold here, given to entry ("" for
// none known), has ended, and its end is told when it was a candidate's.
// A hand-over that follows tells again, of its own grant.
func (m *QuorumModel) ended(entry string) {
	if IsCandidate(entry) {
		m.tellLeader()
	}
}

// join is qlib.lua's queue_join: entry joins the ordered line with
// ticket, or moves its deadline (a heartbeat); an entry that joins as
// the candidate of the call that runs has its value written beside the
// line, as a Mutex's join writes it.
func (m *QuorumModel) join(entry string, now, ttl, ticket int64) {
	if m.joinByTicket(entry, now, ttl, ticket) > 0 {
		m.keepValue(m.srv.candidacy, entry)
	}
}

// blocked reports whether a live waiter with a smaller key than the hold
// h heads the line, and returns that head; it prunes the line's dead head
// on the way.
func (m *QuorumModel) blocked(h *QuorumHold, now int64) (bool, string) {
	head, _, ok := m.prune(now)
	if !ok {
		return false, ""
	}
	if !h.Ticketed {
		return true, head
	}
	return keyLess(m.tickets[head], head, h.Ticket, h.Entry), head
}

// handOver is quorum_hand_over: the free lock goes to the live head of
// the line, for its lease but no longer than its waiter deadline, and the
// hold records the head's ticket. The head is told with "<entry> <token>"
// (and " <time in µs>" for an entry that is Timed), after the leader
// channel when its grant is a leadership (see take).
//
// ended says that the hash still holds a hold that has just ended (a
// release's): the new hold is written over it (see take), and the hash
// goes when nobody lives in line. Otherwise the lock is free, and its
// hash is gone.
//
// A head whose entry names a lease of 0 is handed a hold that PEXPIRE
// deletes at once, with its ticket. Entry never makes such an entry.
func (m *QuorumModel) handOver(c qclock, ended bool) {
	head, deadline, ok := m.prune(c.now)
	if !ok {
		if ended {
			m.hold = nil
		}
		return
	}
	ticket := m.tickets[head]
	m.popHead()
	owner, lease, _ := parseEntry(head)
	token := m.take(owner, head, min(lease, deadline-c.now), c)
	if m.hold != nil {
		m.hold.Ticket, m.hold.Ticketed = ticket, true
	}
	m.srv.publish(m.key, wakeMessageUs(head, token, c.us))
}

// inquire asks the holder h to yield when a smaller key heads the line,
// once per head: it publishes the holder's entry alone. It reports
// whether a smaller key waits.
func (m *QuorumModel) inquire(h *QuorumHold, c qclock) bool {
	lower, head := m.blocked(h, c.now)
	if lower && h.Inquired != head {
		h.Inquired = head
		m.srv.publish(m.key, h.Entry)
	}
	return lower
}

// settle runs after every change: the free lock goes to the head, which
// then heads the line (so nobody waits before it), or a holder that
// blocks a smaller key is asked to yield.
func (m *QuorumModel) settle(c qclock) {
	if h := m.held(); h != nil && m.flaws&flawHandOverWhileHeld == 0 {
		m.inquire(h, c)
		return
	}
	m.handOver(c, false)
}
