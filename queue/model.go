package queue

import (
	"maps"
	"regexp"
	"slices"
	"strconv"
)

// Model is a reference model of the lock's scripts in plain Go: the same
// keys, the same steps and the same answers, with an explicit clock. It is
// written to be read next to docs/algorithm.md, and the tests run it side
// by side with the scripts to check that they agree after every step.
//
// A Model is one lock of a Server: the locks of one Redis server share
// its clock, and a MultiLock's ticket waits in the lines of several of
// them at once (see Server). NewModel makes a lock alone on a server of
// its own, which is all the calls of one lock need.
//
// Time is in milliseconds of the server's clock and moves only when
// Advance is called. A hold, the token counter, a receipt or a ticket's
// key is gone once the clock reaches the time at which it expires, as a
// key whose PEXPIRE (or PX) has run down to 0 (a real Redis server keeps
// such a key for that last millisecond, and drops it once its clock
// passes the expiry).
//
// A waiter that dies simply stops calling: nothing in the model marks it.
// Its entry stays in the queue with the deadline of its last poll, and is
// dropped by the first script that finds it at the head once that
// deadline has passed (or it expires as a hold that was handed to it).
//
// Entries are never empty (Entry never makes one); the model uses "" for
// a hold whose entry field was cleared.
//
// A Mutex's line may hold an election's candidates (entries for which
// IsCandidate holds; see Election): their values wait beside the line
// until a grant moves one into the hold, and every change of the
// leadership is told on the lock's leader channel (see take, Campaign
// and Proclaim). A lock that no candidate ever calls has neither.
//
// A Model is not safe for concurrent use.
type Model struct {
	srv *Server // the server the lock lives on: its clock, its other locks
	key string  // the hash key P:{N}, which the keys of tickets name

	hold     *HoldState // the hash P:{N}; nil when the lock is free
	line                // P:{N}:queue, P:{N}:deadline, P:{N}:joined and P:{N}:values
	counter             // the counter P:{N}:token
	receipts receipts   // the keys P:{N}:call:<id>, by call id
}

// HoldState is the hold of a lock: the fields of its hash and its expiry.
type HoldState struct {
	Owner     string // owner id of the holder
	Count     int    // levels held; at least 1
	Token     int64  // fencing token of the grant
	Entry     string // waiter entry the hold was given to; "" when cleared
	Since     int64  // server time (ms) at which it was granted
	ExpiresAt int64  // server time (ms) at which the hold expires; 0: never
	// Value is the field 'value': the value of an election's leadership,
	// which a candidate's grant writes (see take) and Proclaim changes;
	// HasValue says whether the hash has the field at all, for a value may
	// be empty, and a grant to an entry that is no candidate writes none.
	Value    string
	HasValue bool
}

// lead makes the hold a leadership whose value is value: the field
// 'value' that a candidate's grant writes (present, however empty).
func (h *HoldState) lead(value string) { h.Value, h.HasValue = value, true }

// proclaim is the step of proclaim.lua that every deployment shares: the
// hold, when it is owner's under entry, takes value as its value, and
// proclaim reports whether it did. A hold whose entry was cleared is
// nobody's (the script reads the field as absent, which no argument
// equals). Like the script, it asks no more than that: a hold given to
// an entry that is no candidate takes a value too.
func (h *HoldState) proclaim(owner, entry, value string) bool {
	if h.Entry == "" || h.Owner != owner || h.Entry != entry {
		return false
	}
	h.lead(value)
	return true
}

// Receipt is what one call that changed a hold left behind: its answer,
// as the scripts store it ("<token>:<count>" for acquire, "<count>" for
// release), and when the receipt expires.
type Receipt struct {
	Answer    string
	ExpiresAt int64 // server time (ms)
}

// TicketList is the key of a MultiLock's ticket, P:ticket:<waiter id>
// (see Keys.TicketKey): the server time it joined its lines, the hash
// keys of its locks, in key order, and when the key expires (with the
// ticket's waiter deadline; a ticket whose key is gone is dead).
type TicketList struct {
	Joined    int64 // server time (ms)
	Locks     []string
	ExpiresAt int64 // server time (ms); 0: never
}

// State is everything the model holds of one lock at one instant.
type State struct {
	Now       int64
	Hold      *HoldState            // nil when the lock is free
	Queue     []string              // oldest first
	Deadlines map[string]int64      // entry -> server time (ms)
	Joined    map[string]int64      // entry -> server time (ms) it joined the line
	LastToken int64                 // the fencing counter; 0 when there is none
	TokenEnd  int64                 // when LastToken > 0: server time (ms) at which the counter expires
	Receipts  map[string]Receipt    // by call id
	Tickets   map[string]TicketList // the tickets whose keys name the lock, by waiter id
	Values    map[string]string     // the values of the candidates in line, by entry (P:{N}:values)
}

// NewModel returns the model of a lock that has never been used, alone on
// a server whose clock reads now (ms); its hash key is "". Receipts of
// acquire and release calls live for receiptTTL ms, which must be
// positive (SET refuses other values).
func NewModel(now, receiptTTL int64) *Model {
	return NewServer(now, receiptTTL).Lock("")
}

// Now returns the model's clock (ms): its server's.
func (m *Model) Now() int64 { return m.srv.now }

// Advance lets d ms pass on the clock of the lock's server, for every lock
// of it (see Server.Advance).
func (m *Model) Advance(d int64) { m.srv.Advance(d) }

// expire drops what has expired by the server's clock: the hold, the token
// counter and receipts.
func (m *Model) expire() {
	now := m.srv.now
	if m.hold != nil && m.hold.ExpiresAt != 0 && now >= m.hold.ExpiresAt {
		m.hold = nil
	}
	m.counter.expire(now)
	m.receipts.expire(now)
}

// State returns a copy of the model's state.
func (m *Model) State() State {
	s := State{
		Now:       m.srv.now,
		Queue:     slices.Clone(m.queue),
		Deadlines: maps.Clone(m.deadlines),
		Joined:    maps.Clone(m.joined),
		LastToken: m.lastToken,
		TokenEnd:  m.tokenEnd,
		Receipts:  maps.Clone(m.receipts),
		Tickets:   map[string]TicketList{},
		Values:    maps.Clone(m.values),
	}
	if m.hold != nil {
		h := *m.hold
		s.Hold = &h
	}
	for id, l := range m.srv.tickets {
		if slices.Contains(l.Locks, m.key) {
			s.Tickets[id] = TicketList{Joined: l.Joined, Locks: slices.Clone(l.Locks), ExpiresAt: l.ExpiresAt}
		}
	}
	return s
}

// Drain returns the messages published on the lock's wake channels and
// on its leader channel since they were last drained, oldest first, and
// forgets them. A message on the leader channel is LeaderMessage, which
// no wake message of a Mutex is: those name an entry and a token, or
// begin with "held:".
func (m *Model) Drain() []string {
	var msgs []string
	for _, w := range m.srv.drain(m.key) {
		msgs = append(msgs, w.Message)
	}
	return msgs
}

// expireHold is PEXPIRE on the hold: it lasts ttl ms more. A ttl that is
// not positive deletes the hold at once, as Redis does.
func (m *Model) expireHold(ttl int64) {
	if ttl <= 0 {
		m.hold = nil
		return
	}
	m.hold.ExpiresAt = m.srv.now + ttl
}

// pttl is PTTL on the hold: ms left, -1 when it never expires, -2 when
// there is no hold.
func (m *Model) pttl() int64 {
	switch {
	case m.hold == nil:
		return -2
	case m.hold.ExpiresAt == 0:
		return -1
	}
	return m.hold.ExpiresAt - m.srv.now
}

// pollHint returns how many ms a waiter in the lines of locks should wait
// before it polls again: right after the first of their holds expires
// (expiry publishes nothing), and at least three times per waiter TTL
// (the heartbeat that keeps its place).
func pollHint(locks []*Model, waiterTTL int64) int64 {
	pttls := make([]int64, len(locks))
	for i, l := range locks {
		pttls[i] = l.pttl()
	}
	return hintOf(waiterTTL, pttls...)
}

// hintOf is lib.lua's poll_hint on holds whose PTTLs are pttls: a third
// of the waiter TTL, or right after the first hold that expires sooner.
func hintOf(waiterTTL int64, pttls ...int64) int64 {
	hint := floorDiv(waiterTTL, 3)
	for _, pttl := range pttls {
		if pttl >= 0 && pttl+1 < hint {
			hint = pttl + 1
		}
	}
	return max(hint, 1)
}

// luaEntry is the pattern lib.lua matches an entry against: hex digits,
// the lease in decimal digits, and an owner of at least one character
// (which may hold ':' and anything else).
var luaEntry = regexp.MustCompile(`(?s)^[0-9A-Fa-f]+:([0-9]+):(.+)$`)

// parseEntry returns the owner and lease of a waiter entry as lib.lua's
// parse_entry reads it; ok is false for a malformed entry. It is more
// lenient than parseEntry: any run of hex digits is a waiter id.
func parseEntry(entry string) (owner string, lease int64, ok bool) {
	sub := luaEntry.FindStringSubmatch(entry)
	if sub == nil {
		return "", 0, false
	}
	// The scripts' numbers are doubles; leases too long for an int64 are
	// not modelled.
	lease, err := strconv.ParseInt(sub[1], 10, 64)
	if err != nil {
		return "", 0, false
	}
	return sub[2], lease, true
}

// prune is lib.lua's prune on the lock's line (see line.prune): it drops
// the dead waiters at the head, and returns the live head and its
// deadline; ok is false when the line is empty. A ticket's deadline is
// read as any waiter's; one whose lists have expired is dropped by a
// hand-over (see handOver).
func (m *Model) prune() (head string, deadline int64, ok bool) {
	return m.line.prune(m.srv.now, func(string) bool { return true })
}

// take makes owner the holder of the free lock under a fresh fencing
// token (counter.next), records the entry it was given to, and lets the
// hold expire after ttl ms. It returns the token.
//
// A candidate's grant is a leadership: the candidate's value moves from
// beside the line into the hold, and the election's observers are told
// (tellLeader). The value is the one the candidate's own call campaigns
// with when that call is granted (see Campaign), else the one it joined
// the line with, or "" when it joined with none. A leadership that is
// given a lease of 0 ms ends at once, told all the same, as PEXPIRE 0
// deletes the hold the script has just written.
func (m *Model) take(owner, entry string, ttl int64) int64 {
	token := m.counter.next(m.srv.now, ttl)
	m.hold = &HoldState{Owner: owner, Count: 1, Token: token, Entry: entry, Since: m.srv.now}
	if value, ok := m.grantValue(m.srv.candidacy, entry); ok {
		m.hold.lead(value)
		m.tellLeader()
	}
	m.expireHold(ttl)
	return token
}

// join is line.join on the lock's line, as lib.lua's join: a candidate
// whose own call joins it (see Campaign) writes its value beside the
// line. A heartbeat writes none: the value an entry joined with stays
// until the entry leaves the line or is granted.
func (m *Model) join(entry string, now, ttl int64) int {
	place := m.line.join(entry, now, ttl)
	if place > 0 {
		m.keepValue(m.srv.candidacy, entry)
	}
	return place
}

// tellLeader is lib.lua's tell_leader: it publishes LeaderMessage on the
// lock's leader channel, <key>:leader, when the leadership of the
// election whose lock it is changed.
func (m *Model) tellLeader() { m.srv.publishLeader(m.key) }

// handOver gives the free lock to the live head of the queue, if any. The
// head becomes the holder on the spot, so nobody can barge in between two
// holders, and is told with "<entry> <token>" on the wake channel, and
// " <time in µs>" after it for an entry that is Timed. The hold lasts the
// head's lease, but no longer than its waiter deadline: a dead head's hold
// expires like a dead waiter would.
//
// A head that is a ticket is granted every one of its locks if it is
// ready, or none (see Server.handOverTicket); the lock then stays free. A
// ticket whose key is gone is dead (the key expires
// with it): it leaves the line, and the next head is served.
//
// own is the tag of the Client that makes the call, or "": when the head
// waits in that Client (its TagOf is own), nothing is published, and the
// wake message is returned for the Client to hand over itself (a local
// hand-off). Otherwise wake is "". A ticket's hand-over is always
// published. granted reports whether anyone was handed the lock: a live
// head that is no ticket, or a ticket that was ready.
func (m *Model) handOver(own string) (granted bool, wake string) {
	head, deadline, ok := m.prune()
	for ok && isTicket(head) && !m.srv.hasTicket(head) {
		m.popHead()
		head, deadline, ok = m.prune()
	}
	if !ok {
		return false, ""
	}
	if isTicket(head) {
		return m.srv.handOverTicket(m, head), ""
	}
	m.popHead()
	owner, lease, _ := parseEntry(head)
	now := m.srv.now
	token := m.take(owner, head, min(lease, deadline-now))
	msg := wakeMessage(head, token, now)
	if own != "" && TagOf(head) == own {
		return true, msg
	}
	m.srv.publish(m.key, msg)
	return true, ""
}

// handOn is lib.lua's hand_on: handOver for the lock whose hold, given to
// entry ("" when not known: the hold had no entry), has just ended. When
// that hold was an election's leadership and nobody takes the lock over,
// the election's observers are told that it has no leader; a grant tells
// them itself (see take). It returns handOver's wake message.
func (m *Model) handOn(entry, own string) string {
	granted, wake := m.handOver(own)
	if !granted && IsCandidate(entry) {
		m.tellLeader()
	}
	return wake
}
