package queue_test

import (
	"container/heap"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"

	"github.com/fairlock/fairlock/queue"
)

// A run of the quorum lock on N masters, each a QuorumModel with a clock
// of its own, by a few simulated clients (see qclient_test.go) that
// follow the quorum Client's protocol: the doorway, a bakery ticket,
// joins and heartbeats, yields to a smaller key, grants by push, a
// watchdog that renews, the commit round of the token, and release. Some
// calls give up, some clients crash, some holders pause past their lease.
// Half the clients are an election's candidates, whose tries and joins
// carry the value each Lock call campaigns with: the same protocol, whose
// grants are leaderships. Every message has its own delay: the calls and
// answers between one Lock call and one master keep their order, as on
// one connection, and wake messages cross them. The run records a history
// (see qclaims_test.go) for the checkers of mutual exclusion, of the
// order of committed tokens, of bakery FIFO and of the leaderships'
// values.
//
// Time is in µs of one true clock; a master's clock is the true one plus
// its offset, in ms, as its scripts read it.

// The timings of a run, in ms: fairlock's scaled down a hundred times
// (the lease, the waiter TTL) and the lives of tombstones and receipts.
const (
	simLease   = 300
	simWTTL    = 100
	simTomb    = 100
	simReceipt = 100
	simMargin  = 2000              // µs taken off every evidence of a hold: a master's ms clock rounds down
	simBase    = 1_700_000_000_000 // ms: the masters' clocks at the start, less their offsets
)

// simConfig is the shape of a run.
type simConfig struct {
	masters, clients int
	calls            int64            // µs during which clients start Lock calls; then the run drains
	offset           int64            // µs: each master's clock is ahead by up to this
	giveUp, crash    float64          // chances that a Lock call gives up, that its client crashes during it
	pause            float64          // chance that a holder pauses past its lease once it has its token
	jumps            int64            // µs: each master's wall clock jumps forward by half a lease to a lease about this often; 0: never
	flaws            queue.QuorumFlaw // steps every master's scripts leave out
}

// Kinds of requests.
const (
	rTry = iota
	rJoin
	rCancel
	rRelease
	rRenew
	rCommit
)

// request is one script call on its way to a master.
type request struct {
	kind   int
	call   *lockCall
	master int
	id     string // call id (qtry, qrelease)
	ticket int64  // qjoin
	token  int64  // qjoin: the token yielded; qrelease: committed; qcommit: t
	sent   int64
}

// answer is a master's reply on its way back.
type answer struct {
	request
	rep  queue.QuorumReply
	proc int64 // when the master ran the script
}

type event struct {
	at  int64
	seq int
	do  func()
}

type events []event

func (e events) Len() int { return len(e) }
func (e events) Less(i, j int) bool {
	return e[i].at < e[j].at || e[i].at == e[j].at && e[i].seq < e[j].seq
}
func (e events) Swap(i, j int) { e[i], e[j] = e[j], e[i] }
func (e *events) Push(x any)   { *e = append(*e, x.(event)) }
func (e *events) Pop() any {
	old := *e
	x := old[len(old)-1]
	*e = old[:len(old)-1]
	return x
}

type simMaster struct {
	m       *queue.QuorumModel
	off     int64            // µs
	present map[string]int64 // entries that keep a place: deadline, 0 for the holder
	looked  int64            // when present was taken
}

// sim is one run.
type sim struct {
	cfg     simConfig
	q       int
	rnd     *rand.Rand
	now     int64
	seq     int
	queue   events
	masters []*simMaster
	calls   []*lockCall
	byEntry map[string]*lockCall
	fifo    map[[3]int]int64 // see inOrder
	ids     int              // Lock calls and clients made
	skipped int              // commits a majority's equal tokens made needless
	leads   leads            // what the masters' holds of candidates showed
}

// runSim runs the protocol with cfg from seed, and returns its history.
func runSim(cfg simConfig, seed uint64) history {
	s := &sim{cfg: cfg, q: cfg.masters/2 + 1, rnd: rand.New(rand.NewPCG(seed, seed^0x5eed)), byEntry: map[string]*lockCall{},
		fifo: map[[3]int]int64{}}
	for range cfg.masters {
		off := s.rnd.Int64N(cfg.offset + 1)
		m := queue.NewQuorumModel(simBase + off/1000)
		m.Break(cfg.flaws)
		s.masters = append(s.masters, &simMaster{m: m, off: off, present: map[string]int64{}})
	}
	if cfg.jumps > 0 {
		for i := range s.masters {
			s.at(s.rnd.Int64N(2*cfg.jumps), func() { s.jump(i) })
		}
	}
	for range cfg.clients {
		s.ids++
		c := &simClient{id: s.ids, owner: "c" + strconv.Itoa(s.ids)}
		s.at(s.rnd.Int64N(5000), func() { s.startLock(c) })
	}
	for s.queue.Len() > 0 {
		e := heap.Pop(&s.queue).(event)
		if e.at > cfg.calls+5_000_000 {
			break
		}
		s.now = e.at
		s.advance()
		e.do()
	}
	return history{q: s.q, calls: s.calls, skipped: s.skipped, leads: s.leads}
}

// at schedules f at time t.
func (s *sim) at(t int64, f func()) {
	s.seq++
	heap.Push(&s.queue, event{at: t, seq: s.seq, do: f})
}

// delay draws a message's one-way delay (µs): mostly below 1.5 ms, now
// and then tens of ms.
func (s *sim) delay() int64 {
	d := 50 + s.rnd.Int64N(1450)
	if s.rnd.IntN(100) < 3 {
		d += 5000 + s.rnd.Int64N(35_000)
	}
	return d
}

// advance brings every master's clock to now, and notes the places
// their expiries took.
func (s *sim) advance() {
	for i, ms := range s.masters {
		ms.m.Advance(simBase + (s.now+ms.off)/1000 - ms.m.Now())
		s.places(i, nil, -1)
	}
}

// places notes, on master i, every entry that lost its place since the
// last look: pruned, its deadline passed, a hold handed to it expired or
// was taken. One that left by the script of its own call that ran (kind)
// gave up or released; a yield keeps its place.
func (s *sim) places(i int, by *lockCall, kind int) {
	ms := s.masters[i]
	now := ms.m.Now()
	cur := map[string]int64{}
	ms.m.Places(func(e string, deadline int64) {
		if deadline == 0 || deadline > now {
			cur[e] = deadline
		}
	})
	for e, deadline := range ms.present {
		if _, ok := cur[e]; ok {
			continue
		}
		c := s.byEntry[e]
		if c == by && (kind == rCancel || kind == rRelease) {
			continue
		}
		at := s.now
		if deadline != 0 && deadline <= now {
			// It died at its deadline, after the last look.
			at = max(min(at, (deadline-simBase)*1000-ms.off), ms.looked)
		}
		c.losses[i] = append(c.losses[i], at)
	}
	ms.present, ms.looked = cur, s.now
}

// leads is what a run saw of the masters' holds of candidates: how many
// scripts left one, how many changes of them the masters told, and the
// first hold whose value was not its candidate's, if any.
type leads struct {
	held, told int
	wrong      error
}

// lead looks at master i's hold after a script ran there: a candidate's
// hold carries the value its Lock call campaigns with, whether its own
// call was granted or it was handed the lock as the head of the line
// (from beside the line, where its joins wrote it). The run proclaims
// nothing, so no other value is ever due.
func (s *sim) lead(i int) {
	entry, value, ok := s.masters[i].m.Leadership()
	if !ok || !queue.IsCandidate(entry) {
		return
	}
	s.leads.held++
	if c := s.byEntry[entry]; s.leads.wrong == nil && value != c.value {
		s.leads.wrong = fmt.Errorf("values: master %d's hold of call %d has the value %q, not %q", i, c.id, value, c.value)
	}
}

// jump steps master i's wall clock forward, which the quorum lock
// assumes never happens: its keys expire early, and its tokens and
// tickets run ahead of the other masters'.
func (s *sim) jump(i int) {
	if s.now >= s.cfg.calls {
		return
	}
	s.masters[i].off += (simLease/2 + s.rnd.Int64N(simLease/2)) * 1000
	s.advance()
	s.at(s.now+s.rnd.Int64N(2*s.cfg.jumps), func() { s.jump(i) })
}

// send puts r on its way to its master.
func (s *sim) send(r request) {
	r.sent = s.now
	s.at(s.inOrder(r.call, r.master, 0), func() { s.run(r) })
}

// inOrder returns when a message sent now between call c and master i
// arrives: after its delay, but not before the one sent there last in the
// same direction (to: 0, from: 1), as on one connection. Wake messages
// come on connections of their own, in no order with the answers.
func (s *sim) inOrder(c *lockCall, i, dir int) int64 {
	k := [3]int{c.id, i, dir}
	at := max(s.now+s.delay(), s.fifo[k]+1)
	s.fifo[k] = at
	return at
}

// run runs r's script on its master, and sends back the answer and the
// wake messages.
func (s *sim) run(r request) {
	m := s.masters[r.master].m
	c := r.call
	owner := c.owner
	a := answer{request: r, proc: s.now}
	switch r.kind {
	case rTry:
		a.rep = m.QTry(r.id, owner, c.entry, simLease, simWTTL, queue.ModeTry, simReceipt, 0, c.value)
	case rJoin:
		a.rep = m.QJoin(owner, c.entry, simLease, simWTTL, r.ticket, r.token, 0, c.value)
		if a.rep.State >= 0 {
			c.joins[r.master] = append(c.joins[r.master], s.now)
		}
	case rCancel:
		m.QCancel(c.entry, simWTTL, simTomb, 0)
	case rRelease:
		a.rep = m.QRelease(r.id, owner, c.entry, r.token, simLease, true, simWTTL, simTomb, simReceipt, 0)
	case rRenew:
		a.rep = m.QRenew(owner, simLease)
	case rCommit:
		a.rep = m.QCommit(owner, r.token, simLease, simWTTL, 0)
	}
	s.places(r.master, c, r.kind)
	s.lead(r.master)
	for _, w := range m.Drain() {
		if w.Leader {
			s.leads.told++ // the observers of an election, which the run has none of, would read the holds now
			continue
		}
		entry, rest, grant := strings.Cut(w.Message, " ")
		to := s.byEntry[entry]
		var token int64
		if grant {
			tok, _, _ := strings.Cut(rest, " ")
			token, _ = strconv.ParseInt(tok, 10, 64)
		}
		i := r.master
		s.at(s.now+s.delay(), func() { s.pushed(to, i, grant, token) })
	}
	if r.kind != rCancel && r.kind != rRelease {
		s.at(s.inOrder(c, r.master, 1), func() { s.answered(a) })
	}
}
