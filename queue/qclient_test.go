package queue_test

import (
	"fmt"
	"strconv"
	"time"

	"github.com/fairlock/fairlock/queue"
)

// The clients of a run on several masters (see sim): each Lock call
// follows the protocol of the quorum Client (package fair's qwaiter and
// QHold). Its doorway is a try on every master; with no majority held it
// draws a bakery ticket above every C and master clock the doorway read,
// and joins every master, again after each answer's hint. It keeps a view
// per master: held under a token until a time its evidence proves, or
// not. A master held while a smaller key waits there (the answer says so,
// or an inquiry woke it) is given back (a yield). Once a majority holds
// for long enough to count, it holds: the watchdog renews on every
// master, and the commit round takes the largest token of its holds to
// every master, again with a larger one a master names, until a majority
// took it. Then it works a little and releases on every master.

// view is what a Lock call knows of its hold on one master.
type view struct {
	held    bool
	token   int64
	until   int64 // while held: the hold lasts at least until then (µs)
	floor   int64 // the largest K an answer that found no hold carried
	yielded int64 // the largest token given back here
}

// Phases of a Lock call.
const (
	pDoorway = iota
	pWaiting
	pHolding
	pDone
)

// lockCall is one Lock call: what the history records of it, and the
// client's state of it.
type lockCall struct {
	id     int
	client *simClient
	owner  string
	entry  string
	value  string // the value a candidate's call campaigns with; "" for a call of another client
	ticket int64

	// History (µs; -1 when it did not happen).
	doorway, granted, ended, gaveUp, crashed int64
	joins, losses                            map[int][]int64 // per master: joins it ran (not refused), times it lost its place
	token                                    int64           // the committed token; 0 when none
	commitStart, commitAck                   int64           // the committed round: when it began, when a majority had run it

	// Protocol.
	phase        int
	paused       bool // its client is paused (see pauseHolder)
	views        []view
	tries        int   // try answers
	maxC, maxNow int64 // doorway reads
	firstJoin    []int64
	lastAnswered []int64 // per master: send time of the latest join answered
	lastJoin     []int64 // per master: send time of the latest join sent
	round        int64   // the token of the commit round under way
	roundOK      int     // its masters that took it
	roundReplies int
	roundAbove   int64 // the largest token of a hold above it
	roundAck     int64 // when the last of roundOK ran it
	valid        int64 // while it holds: until when it believes it does
}

// simClient is a process that makes one Lock call after another, each
// with an owner id of its own. A client whose id is even campaigns in an
// election: its Lock calls are candidates, each with a value of its own.
type simClient struct {
	id      int
	owner   string
	crashed bool
}

// candidate reports whether the client campaigns.
func (cl *simClient) candidate() bool { return cl.id%2 == 0 }

// startLock starts a Lock call of client cl: its doorway.
func (s *sim) startLock(cl *simClient) {
	if cl.crashed || s.now >= s.cfg.calls {
		return
	}
	s.ids++
	n := s.cfg.masters
	c := &lockCall{id: s.ids, client: cl, doorway: s.now, granted: -1, ended: -1, gaveUp: -1, crashed: -1,
		joins: map[int][]int64{}, losses: map[int][]int64{}, views: make([]view, n),
		firstJoin: make([]int64, n), lastAnswered: make([]int64, n), lastJoin: make([]int64, n)}
	c.owner = cl.owner + "-" + strconv.Itoa(s.ids)
	version := queue.WakeVersion
	if cl.candidate() {
		version, c.value = queue.CandidateVersion, "the leader is "+c.owner+"\n"
	}
	c.entry = queue.Entry(fmt.Sprintf("%016x%08x%s", s.ids, cl.id, version), simLease*time.Millisecond, c.owner)
	s.calls = append(s.calls, c)
	s.byEntry[c.entry] = c
	id := fmt.Sprintf("%016x", s.rnd.Uint64())
	for i := range n {
		s.send(request{kind: rTry, call: c, master: i, id: id})
	}
	if s.rnd.Float64() < s.cfg.giveUp {
		s.at(s.now+5000+s.rnd.Int64N(80_000), func() {
			if c.phase == pDoorway || c.phase == pWaiting {
				s.cancel(c)
			}
		})
	}
	if s.rnd.Float64() < s.cfg.crash {
		s.at(s.now+s.rnd.Int64N(150_000), func() { s.crash(c) })
	}
}

// next starts the client's next Lock call after a pause.
func (s *sim) next(c *lockCall) {
	s.at(s.now+s.rnd.Int64N(20_000), func() { s.startLock(c.client) })
}

// crash stops c's client for good; a fresh client takes its place later.
func (s *sim) crash(c *lockCall) {
	if c.client.crashed || c.phase == pDone {
		return
	}
	c.client.crashed = true
	c.crashed = s.now
	if c.phase == pHolding && c.ended < 0 {
		c.ended = s.now
	}
	c.phase = pDone
	s.ids++
	fresh := &simClient{id: s.ids, owner: "c" + strconv.Itoa(s.ids)}
	s.at(s.now+500_000, func() { s.startLock(fresh) })
}

// pauseHolder stops c's client, which holds, for longer than its lease
// (a GC pause, a stopped process): it renews nothing and reads nothing,
// and its belief ends when its validity runs out. When it resumes, it
// releases, as a process that finds its lease lost does.
func (s *sim) pauseHolder(c *lockCall) {
	c.paused = true
	c.ended = c.valid
	s.at(s.now+simLease*1000+s.rnd.Int64N(simLease*1000), func() {
		c.paused = false
		s.release(c)
	})
}

// alive reports whether c still listens.
func alive(c *lockCall) bool { return c != nil && !c.client.crashed && !c.paused && c.phase != pDone }

// answered handles a master's answer to c.
func (s *sim) answered(a answer) {
	c, i := a.call, a.master
	if !alive(c) {
		return
	}
	rep := a.rep
	switch a.kind {
	case rTry:
		s.fact(c, i, rep, a.sent+simLease*1000-simMargin)
		if c.phase == pWaiting {
			s.grant(c) // a try granted late counts
		}
		if c.phase == pDoorway {
			c.tries++
			c.maxC, c.maxNow = max(c.maxC, rep.Ticket), max(c.maxNow, rep.Now)
			if c.tries >= s.q && !s.grant(c) {
				c.ticket = max(c.maxC+1, c.maxNow)
				c.phase = pWaiting
				for j := range s.masters {
					s.join(c, j, 0)
				}
			}
		}
	case rJoin:
		c.lastAnswered[i] = max(c.lastAnswered[i], a.sent)
		if rep.State < 0 {
			return
		}
		s.fact(c, i, rep, a.sent+min(simLease, simWTTL)*1000-simMargin)
		if c.phase == pWaiting && !s.grant(c) {
			if v := c.views[i]; rep.State == 1 && rep.Lower && v.held && v.token == rep.Token {
				s.yield(c, i)
			} else if a.sent == c.lastJoin[i] {
				s.at(s.now+rep.Hint*1000, func() {
					if c.phase == pWaiting && c.lastJoin[i] == a.sent && alive(c) {
						s.join(c, i, 0)
					}
				})
			}
		}
	case rRenew:
		s.fact(c, i, rep, a.sent+simLease*1000-simMargin)
	case rCommit:
		if a.token != c.round {
			return
		}
		c.roundReplies++
		switch rep.State {
		case 1:
			s.fact(c, i, rep, a.sent+simLease*1000-simMargin)
			c.roundOK++
			c.roundAck = max(c.roundAck, a.proc)
			if c.roundOK == s.q {
				c.token, c.commitAck = c.round, c.roundAck
				s.hold(c)
			}
		case 2:
			c.roundAbove = max(c.roundAbove, rep.Token)
		default:
			s.fact(c, i, rep, 0)
		}
		if c.roundReplies == len(s.masters) && c.roundOK < s.q {
			if c.roundAbove > c.round {
				s.commit(c, c.roundAbove)
			} else {
				s.release(c) // no majority took it: the hold is lost
			}
		}
	}
	s.checkValidity(c)
}

// fact takes in what an answer says of c's hold on master i: held under
// a token, which lasts at least until until; or not held, with K. The
// answers of one master come in the order it ran their calls, so the
// latest says how things are, but for a hold given back (its answer may
// come before the yield's).
func (s *sim) fact(c *lockCall, i int, rep queue.QuorumReply, until int64) {
	v := &c.views[i]
	switch rep.State {
	case 1:
		if rep.Token > v.yielded {
			if !v.held || v.token != rep.Token {
				v.held, v.token, v.until = true, rep.Token, until
			}
			v.until = max(v.until, until)
		}
	case 0:
		v.held = false
		v.floor = max(v.floor, rep.Counter)
	}
}

// pushed handles a wake message from master i: a grant under token, or
// an inquiry (a smaller key waits).
func (s *sim) pushed(c *lockCall, i int, grant bool, token int64) {
	if !alive(c) {
		return
	}
	if !grant {
		if c.phase == pWaiting && c.views[i].held {
			s.join(c, i, 0) // its answer tells whether a smaller key waits
		}
		return
	}
	since := c.lastAnswered[i]
	if since == 0 {
		since = c.firstJoin[i]
	}
	if since == 0 {
		return
	}
	// A grant at or below a token given back, or the counter of an
	// answer that found no hold, or the hold known, is stale.
	if v := &c.views[i]; token > v.yielded && token > v.floor && (!v.held || token > v.token) {
		v.held, v.token, v.until = true, token, since+min(simLease, simWTTL)*1000-simMargin
	}
	if c.phase == pWaiting || c.phase == pDoorway {
		s.grant(c)
	}
	s.checkValidity(c)
}

// join sends c's join to master i, giving back the hold under yield (0:
// none).
func (s *sim) join(c *lockCall, i int, yield int64) {
	if c.firstJoin[i] == 0 {
		c.firstJoin[i] = s.now
	}
	c.lastJoin[i] = s.now
	s.send(request{kind: rJoin, call: c, master: i, ticket: c.ticket, token: yield})
}

// yield gives c's hold on master i back to a smaller key.
func (s *sim) yield(c *lockCall, i int) {
	v := &c.views[i]
	v.yielded = max(v.yielded, v.token)
	v.held = false
	s.join(c, i, v.token)
}

// validity returns until when c holds a majority, by its evidence.
func (s *sim) validity(c *lockCall) int64 {
	var until []int64
	for _, v := range c.views {
		if v.held {
			until = append(until, v.until)
		}
	}
	if len(until) < s.q {
		return 0
	}
	sortDesc(until)
	return until[s.q-1]
}

// grant grants c when a majority holds for it long enough to count, and
// starts the hold: the watchdog and the commit round.
func (s *sim) grant(c *lockCall) bool {
	if c.phase != pDoorway && c.phase != pWaiting {
		return false
	}
	if s.validity(c) <= s.now+min(simLease, simWTTL)*1000/3 {
		return false
	}
	c.phase, c.granted, c.valid = pHolding, s.now, s.validity(c)
	s.at(c.valid, func() { s.checkValidity(c) })
	s.renew(c)
	var t int64
	for _, v := range c.views {
		if v.held {
			t = max(t, v.token)
		}
	}
	same := 0
	for _, v := range c.views {
		if v.held && v.token == t {
			same++
		}
	}
	if same >= s.q {
		// A majority drew t itself (fair/qhold.go's Token): committed
		// without a round, as of now.
		c.token, c.commitStart, c.commitAck = t, s.now, s.now
		s.skipped++
		s.hold(c)
		return true
	}
	s.commit(c, t)
	return true
}

// hold runs c's hold once its token is committed: its holder pauses, or
// releases it within 10 ms.
func (s *sim) hold(c *lockCall) {
	if s.rnd.Float64() < s.cfg.pause {
		s.pauseHolder(c)
	} else {
		s.at(s.now+s.rnd.Int64N(10_000), func() { s.release(c) })
	}
}

// renew renews c's hold on every master, now and every third of a lease.
func (s *sim) renew(c *lockCall) {
	if c.phase != pHolding || !alive(c) {
		return
	}
	for i := range s.masters {
		s.send(request{kind: rRenew, call: c, master: i})
	}
	s.at(s.now+simLease*1000/3, func() { s.renew(c) })
}

// commit starts a commit round of token t.
func (s *sim) commit(c *lockCall, t int64) {
	c.round, c.roundOK, c.roundReplies, c.roundAbove, c.roundAck = t, 0, 0, 0, 0
	c.commitStart = s.now
	for i := range s.masters {
		s.send(request{kind: rCommit, call: c, master: i, token: t})
	}
}

// checkValidity ends c's belief when the validity it believed has
// passed, or when what it learned leaves it no majority held past now;
// else it takes the validity its views give now, and looks again then.
func (s *sim) checkValidity(c *lockCall) {
	if c.phase != pHolding || !alive(c) {
		return
	}
	if c.valid <= s.now {
		c.ended = c.valid
		s.release(c)
		return
	}
	until := s.validity(c)
	if until <= s.now {
		c.ended = s.now
		s.release(c)
		return
	}
	if until != c.valid {
		s.at(until, func() { s.checkValidity(c) })
	}
	c.valid = until
}

// release ends c's hold: its belief ends, and every master is told.
func (s *sim) release(c *lockCall) {
	if !alive(c) {
		return
	}
	if c.ended < 0 {
		c.ended = s.now
	}
	c.phase = pDone
	id := fmt.Sprintf("%016x", s.rnd.Uint64())
	for i := range s.masters {
		s.send(request{kind: rRelease, call: c, master: i, id: id, token: c.token})
	}
	s.next(c)
}

// cancel gives c up on every master.
func (s *sim) cancel(c *lockCall) {
	c.gaveUp = s.now
	c.phase = pDone
	for i := range s.masters {
		s.send(request{kind: rCancel, call: c, master: i})
	}
	s.next(c)
}

// sortDesc sorts x in decreasing order.
func sortDesc(x []int64) {
	for i := 1; i < len(x); i++ {
		for j := i; j > 0 && x[j] > x[j-1]; j-- {
			x[j], x[j-1] = x[j-1], x[j]
		}
	}
}
