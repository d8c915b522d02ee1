package queue

import (
	"slices"
	"strconv"
)

// The parts of a lock's state that every kind of lock keeps alike, a
// Mutex (Model) and a weighted lock (WeightedModel): its line of waiters
// and their deadlines, its fencing counter, and the receipts of its calls.
// Their helpers are those of lua/lib.lua of the same names.

// line is a lock's line: the list P:{N}:queue, the zset P:{N}:deadline
// and the zset P:{N}:joined, and a Mutex's hash P:{N}:values. No key
// expires; a dead waiter stays until a script finds it at the head.
//
// A quorum lock's line is ordered (see QuorumModel): P:{N}:queue is a
// zset of entry -> ticket there, and queue keeps its members in the zset's
// order, (ticket, entry) ascending. The helpers below serve both shapes,
// as lib.lua's join, leave, line_head, line_pop and prune do.
type line struct {
	queue     []string         // oldest first; by (ticket, entry) when ordered
	deadlines map[string]int64 // entry -> server time (ms) by which it must poll again
	tickets   map[string]int64 // when ordered: entry -> its ticket, the zset's score; else nil
	joined    map[string]int64 // entry -> server time (ms) it joined the line
	// values is the hash P:{N}:values of an election: the value of each
	// candidate in line (see IsCandidate), by entry, from the call that
	// joins it to the line (keepValue) until it leaves the line (leave,
	// prune) or is granted (grantValue moves it into the hold; popHead
	// leaves it to that). A Mutex's line and a quorum lock's keep one, as
	// lib.lua's join and qlib.lua's queue_join write it; nil for a
	// weighted lock's, whose waiters are never candidates: the scripts
	// forget a candidate's value in every line, but none is ever written
	// there.
	values map[string]string
}

func newLine() line { return line{deadlines: map[string]int64{}, joined: map[string]int64{}} }

// newMutexLine returns the line of a Mutex (Model), which may hold an
// election's candidates, and their values.
func newMutexLine() line {
	l := newLine()
	l.values = map[string]string{}
	return l
}

// newOrderedLine returns the line of a quorum lock, which may hold an
// election's candidates, and their values, as a Mutex's does.
func newOrderedLine() line {
	l := newMutexLine()
	l.tickets = map[string]int64{}
	return l
}

// keyLess reports whether the key (ticket t1, entry e1) comes before (t2,
// e2): tickets by number, then entries by their bytes, as a zset orders
// equal scores (qlib.lua's key_less).
func keyLess(t1 int64, e1 string, t2 int64, e2 string) bool {
	if t1 != t2 {
		return t1 < t2
	}
	return e1 < e2
}

// lrem is LREM queue 1 entry: the oldest occurrence of entry leaves the
// queue.
func (l *line) lrem(entry string) {
	if i := slices.Index(l.queue, entry); i >= 0 {
		l.queue = slices.Delete(l.queue, i, i+1)
	}
	delete(l.tickets, entry)
}

// popHead is line_pop: LPOP queue (ZREM of the head in an ordered line)
// followed by ZREM deadline head and ZREM joined head.
func (l *line) popHead() string {
	head := l.queue[0]
	l.queue = l.queue[1:]
	delete(l.deadlines, head)
	delete(l.tickets, head)
	if l.keepsJoined(head) {
		delete(l.joined, head)
	}
	return head
}

// keepsJoined is lib.lua's keeps_joined: whether the joined set of the
// line holds the time of joining of entry. A MultiLock ticket's is in its
// key instead (see TicketList), but in an ordered line, which writes
// every entry's.
func (l *line) keepsJoined(entry string) bool { return l.tickets != nil || !isTicket(entry) }

// join puts entry at the end of the line with the waiter deadline now +
// ttl, and now as its time of joining (see keepsJoined), or, for an entry already in line,
// moves its deadline there (a heartbeat). It returns the entry's place in
// line when it joined (1 for the head), 0 for a heartbeat.
func (l *line) join(entry string, now, ttl int64) int {
	place := 0
	if _, queued := l.deadlines[entry]; !queued {
		l.queue = append(l.queue, entry)
		place = len(l.queue)
		if l.keepsJoined(entry) {
			l.joined[entry] = now
		}
	}
	l.deadlines[entry] = now + ttl
	return place
}

// joinByTicket is join on an ordered line: an entry that is not in line
// takes its place by ticket (ZADD, which moves an entry that is in the
// zset to its new score), one in line only moves its deadline, and keeps
// its place whatever ticket it names. An ordered line keeps no time of
// joining (its ticket tells it). It returns the entry's place in line
// when it joined (1 for the head), 0 for a heartbeat.
func (l *line) joinByTicket(entry string, now, ttl, ticket int64) int {
	place := 0
	if _, queued := l.deadlines[entry]; !queued {
		l.lrem(entry)
		i := 0
		for i < len(l.queue) && keyLess(l.tickets[l.queue[i]], l.queue[i], ticket, entry) {
			i++
		}
		l.queue = slices.Insert(l.queue, i, entry)
		l.tickets[entry] = ticket
		place = i + 1
	}
	l.deadlines[entry] = now + ttl
	return place
}

// leave takes entry out of the line: out of the deadline set, and, when it
// was there, out of the queue (the only step whose cost grows with the
// line, paid once by a waiter that gives up).
func (l *line) leave(entry string) {
	if _, queued := l.deadlines[entry]; queued {
		delete(l.deadlines, entry)
		l.lrem(entry)
		if l.keepsJoined(entry) {
			delete(l.joined, entry)
		}
		l.forgetValue(entry)
	}
}

// forgetValue is lib.lua's forget_value: a candidate that leaves the line
// without being granted takes its value away.
func (l *line) forgetValue(entry string) {
	if IsCandidate(entry) {
		delete(l.values, entry)
	}
}

// keepValue writes the value of the candidate whose call the running
// script is (c; nil for none) beside the line, when entry, which has just
// joined it, is that candidate's: a join of lib.lua and a queue_join of
// qlib.lua. A heartbeat writes none (its caller does not call this), so
// the value an entry joined with stays until the entry leaves the line
// or is granted.
func (l *line) keepValue(c *candidacy, entry string) {
	if c != nil && c.entry == entry {
		l.values[entry] = c.value
	}
}

// grantValue returns the value a grant to entry gives its hold, and
// whether the grant is a leadership at all (entry is a candidate): the
// value of the call that runs, when the call is the candidate's own (c),
// else the one the entry joined the line with, or "" when it joined with
// none. The value leaves the values beside the line either way. It is
// the step lib.lua's granted_value makes for take and the quorum's grants.
func (l *line) grantValue(c *candidacy, entry string) (value string, ok bool) {
	if !IsCandidate(entry) {
		return "", false
	}
	value = l.values[entry]
	if c != nil && c.entry == entry {
		value = c.value
	}
	delete(l.values, entry)
	return value, true
}

// prune drops waiters from the head of the line while the head has no
// deadline, a deadline at or before now, is malformed, or is not alive
// (alive says whether a well-formed head lives on: a ticket whose list is
// gone is dead), and returns the live head and its deadline; ok is false
// when the line is empty. Dead waiters further back stay until they reach
// the head. A dead candidate's value goes with it.
func (l *line) prune(now int64, alive func(head string) bool) (head string, deadline int64, ok bool) {
	for len(l.queue) > 0 {
		head := l.queue[0]
		deadline, has := l.deadlines[head]
		_, _, wellFormed := parseEntry(head)
		if has && deadline > now && wellFormed && alive(head) {
			return head, deadline, true
		}
		l.popHead()
		l.forgetValue(head)
	}
	return "", 0, false
}

// counter is a lock's fencing counter, the key P:{N}:token: the latest
// token, and when the key expires.
type counter struct {
	lastToken int64 // 0 when the key is gone
	tokenEnd  int64 // when lastToken > 0: server time (ms) at which the key expires
}

// tokensPerMs is how many fencing tokens one millisecond of the server's
// clock is worth: a fresh grant's token is at least now * tokensPerMs.
const tokensPerMs = 1000

// next draws a fresh token for a hold that lasts ttl ms from now (the
// server's time in ms), as next_token does: max(counter + 1, now *
// tokensPerMs), which becomes the counter. The clock term keeps tokens
// rising when the counter is lost or stale (a restart without
// persistence, a failover), as long as the clock moves forward.
//
// The counter expires with the hold it was taken for, ttl ms from now,
// but never sooner than 1 ms from now: while fewer than tokensPerMs
// grants come in one ms (as on a real server), every token issued at now
// is below (now + 1) * tokensPerMs, so a grant that finds the counter
// gone, at now + 1 or later, takes a higher token from the clock alone.
// A counter above the clock term (a clock that went back) lasts until the
// clock term has passed it (outlast in lua/lib.lua).
func (c *counter) next(now, ttl int64) int64 {
	return c.take(c.lastToken+1 > now*tokensPerMs, now, max(ttl, 1))
}

// drawQuorum is qlib.lua's draw_token, a quorum lock's: counter + 1 while
// there is a counter, the clock term when there is none, which becomes
// the counter, kept at least keep ms. The expiry is an absolute time
// (SET ... PXAT), so a quorum script whose clock is skewed sets it on its
// skewed clock; the caller drops a counter whose expiry is already past
// on the server's own clock (see expire).
func (c *counter) drawQuorum(now, ttl, keep int64) int64 {
	return c.take(c.lastToken > 0, now, max(ttl, keep))
}

// take makes the counter's next value the token: counter + 1 when
// counted, else the clock term; the key expires keep ms after now, or
// when the clock term has passed a counter above it.
func (c *counter) take(counted bool, now, keep int64) int64 {
	if counted {
		c.lastToken++
		c.tokenEnd = max(now+keep, outlast(c.lastToken))
	} else {
		c.lastToken, c.tokenEnd = now*tokensPerMs, now+keep
	}
	return c.lastToken
}

// raise is qlib.lua's raise (a quorum lock's write-back of a ticket or a
// token): the counter becomes at least value, which is positive, and
// lasts keep ms (1 at least) from now, the scripts' time in ms, or until
// the clock term has passed it, whichever is later (SET ... PX, which
// counts on the server's clock: at keyNow, the server's time in ms).
func (c *counter) raise(value, now, keyNow, keep int64) {
	c.lastToken = max(c.lastToken, value)
	c.tokenEnd = keyNow + max(now+max(keep, 1), outlast(c.lastToken)) - now
}

// outlast is lib.lua's outlast: the first ms whose clock term is above
// value, a counter's value.
func outlast(value int64) int64 { return value/tokensPerMs + 1 }

// expire drops the counter once the clock reaches its expiry.
func (c *counter) expire(now int64) {
	if c.lastToken > 0 && now >= c.tokenEnd {
		c.lastToken, c.tokenEnd = 0, 0
	}
}

// receipts are the keys P:{N}:call:<id> of a lock, by call id.
type receipts map[string]Receipt

// keep is keep_receipt: answer is kept under call for ttl ms from now.
func (r receipts) keep(call, answer string, now, ttl int64) {
	r[call] = Receipt{Answer: answer, ExpiresAt: now + ttl}
}

// expire drops the receipts whose expiry the clock has reached.
func (r receipts) expire(now int64) {
	for call, rc := range r {
		if now >= rc.ExpiresAt {
			delete(r, call)
		}
	}
}

// wakeMessage is the wake message of a grant to entry under token at now
// (ms), as wake writes it: "<entry> <token>", followed by " <time in µs>"
// for an entry that is Timed (the model's clock has ms only).
func wakeMessage(entry string, token, now int64) string { return wakeMessageUs(entry, token, now*1000) }

// wakeMessageUs is wakeMessage at us, the server's time in µs.
func wakeMessageUs(entry string, token, us int64) string {
	msg := entry + " " + strconv.FormatInt(token, 10)
	if Timed(entry) {
		msg += " " + strconv.FormatInt(us, 10)
	}
	return msg
}
