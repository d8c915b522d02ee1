package queue_test

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/fairlock/fairlock/queue"
)

// differ applies each call to the model and to the real scripts and
// compares the reply, the whole state of every lock and the wake messages
// after every step, then checks the invariants of docs/algorithm.md, and
// those of tickets (see checkTickets).
//
// On a real server (tol > 0) the scripts read a clock a few ms ahead of
// the model's, and a fresh grant's token follows the clock, so tokens
// cannot match exactly there. The differ then pairs each token the
// scripts issue with the model's token of the same grant (one grant per
// lock and step at most), checks that the two are within tol ms of clock
// (tol * queue.TokensPerMs) of each other, and compares the rest exactly
// after putting the model's token in place of the scripts' one
// everywhere: the reply, the hold, the counter, the receipts and the wake
// messages.
type differ struct {
	t      testing.TB
	ctx    context.Context
	server *queue.Server
	rig    *rig
	world  *world
	tol    int64             // ms of slack on times (a real server's clock moves)
	tokens []map[int64]int64 // when tol > 0, for each lock: the scripts' token -> the model's
	about  string            // how to reproduce the run, printed on failure
	log    []string
	prev   []queue.State    // the scripts' state of each lock after the last step
	prevM  []queue.State    // the model's state of each lock after the last step
	top    []int64          // for each lock, the highest token any of the scripts' states showed
	sets   map[string][]int // each ticket's locks, by entry
}

// newDiffer returns a differ of the rig's locks and a model of them on a
// server whose clock reads now. tol > 0 says the rig is on a real server.
func newDiffer(t testing.TB, r *rig, w *world, now, tol int64, about string) *differ {
	n := len(r.locks)
	d := &differ{t: t, ctx: context.Background(), server: queue.NewServer(now, r.receiptTTL), rig: r, world: w,
		tol: tol, about: about, prev: make([]queue.State, n), prevM: make([]queue.State, n), top: make([]int64, n),
		sets: map[string][]int{}}
	if tol > 0 {
		for range n {
			d.tokens = append(d.tokens, map[int64]int64{0: 0})
		}
	}
	return d
}

// model returns the model of the rig's i-th lock.
func (d *differ) model(i int) *queue.Model { return d.server.Lock(d.rig.locks[i].Lock) }

// models returns the model of each of the rig's locks.
func (d *differ) models() []*queue.Model {
	ms := make([]*queue.Model, len(d.rig.locks))
	for i := range ms {
		ms[i] = d.model(i)
	}
	return ms
}

// shownCalls is how many of the last calls a failure prints.
const shownCalls = 100

// fail stops the run with the calls that led to the failure.
func (d *differ) fail(format string, args ...any) {
	d.t.Helper()
	shown := d.log[max(len(d.log)-shownCalls, 0):]
	d.t.Fatalf("%s\nafter %d calls, the last %d:\n%s\n%s", fmt.Sprintf(format, args...),
		len(d.log), len(shown), strings.Join(shown, "\n"), d.about)
}

// run decodes ops from src until it runs out or steps calls were made.
func (d *differ) run(src source, steps int) {
	d.t.Helper()
	for len(d.log) < steps {
		o, ok := d.world.next(src)
		if !ok {
			return
		}
		c, ok := d.world.resolve(d.models(), o)
		if !ok {
			continue
		}
		d.step(c)
	}
}

// step applies one call to both sides and compares them.
func (d *differ) step(c call) {
	d.t.Helper()
	res, err := d.apply(d.rig, c)
	if err != nil {
		d.fail("the script failed: %v", err)
	}
	d.compare(c, res, false)
}

// result is what one step did: the replies of the model and of the
// scripts, and on which locks the step's script handed a free lock to its
// live head (see checkSettled).
type result struct {
	want, got any
	// handed: the script ran hand_over on these locks when they were
	// free, and on the locks of a ticket that hand_over found at a head.
	handed []int
	// readied: the script ran ticket_ready on these locks (a MultiLock
	// that waits), which hands a free one to a live head that waits for
	// it alone, and leaves one headed by another ticket as it is.
	readied []int
	ticket  string // the entry of the ticket that looked at readied
}

// apply applies c to the model, and to the scripts through r, and returns
// both replies and the locks the call hands over.
func (d *differ) apply(r *rig, c call) (res result, err error) {
	d.t.Helper()
	if d.world.timeless {
		// The model's clock follows the server's, which we cannot stop.
		now, err := r.now(d.ctx)
		if err != nil {
			d.fail("TIME: %v", err)
		}
		d.server.Advance(max(now-d.server.Now(), 0))
	}
	d.log = append(d.log, fmt.Sprintf("%4d  %v", len(d.log)+1, c))
	m, on := d.model(c.lock), r.on(c.lock)
	_, hadReceipt := m.State().Receipts[c.id]
	one := []int{c.lock}
	switch c.kind {
	case opPoll, opTry, opReenter:
		var w, g queue.Reply
		if c.campaign {
			w = m.Campaign(c.id, c.owner, c.entry, c.lease, c.ttl, c.mode, c.value)
			g, err = on.campaign(d.ctx, c.id, c.owner, c.entry, c.lease, c.ttl, c.mode, c.value)
		} else {
			w = m.Acquire(c.id, c.owner, c.entry, c.lease, c.ttl, c.mode)
			g, err = on.acquire(d.ctx, c.id, c.owner, c.entry, c.lease, c.ttl, c.mode)
		}
		d.sameHints(w, &g)
		res.want, res.got = w, g
		if !hadReceipt {
			res.handed = one
		}
		d.world.done(c, w.Granted)
	case opMulti:
		d.sets[c.entry] = c.locks
		res.handed = d.givenBack(c)
		w := d.server.MultiAcquire(d.keysOf(c.locks), c.owner, c.entry, c.lease, c.ttl, c.mode)
		var g queue.Reply
		g, err = r.multiAcquire(d.ctx, d.rigKeys(c.locks), c.owner, c.entry, c.lease, c.ttl, c.mode)
		d.sameHints(w, &g)
		res.want, res.got = w, g
		if c.mode == queue.ModeWait {
			res.readied, res.ticket = c.locks, c.entry
		}
		d.world.done(c, w.Granted)
	case opRelease:
		w := m.ReleaseFrom(c.id, c.owner, c.own, c.lease)
		var g queue.Released
		g, err = on.release(d.ctx, c.id, c.owner, c.own, c.lease)
		res.want, res.got = w, g
		if w.Count == 0 && !hadReceipt {
			res.handed = one
		}
		d.world.done(c, false)
	case opReleaseAll:
		rs := make([]queue.ReleaseOf, len(c.locks))
		for k, l := range c.locks {
			rs[k] = queue.ReleaseOf{Lock: d.rig.locks[l].Lock, Call: c.id, Owner: c.owners[k], Lease: c.lease}
			if _, had := d.model(l).State().Receipts[c.id]; !had && d.model(l).State().Hold != nil {
				res.handed = append(res.handed, l) // a hold that may end here
			}
		}
		w := d.server.ReleaseAll(rs, c.own)
		var g []queue.Released
		g, err = r.releaseAll(d.ctx, d.rigKeys(c.locks), c.id, c.owners, c.own, c.lease)
		res.want, res.got = w, g
		kept := res.handed[:0]
		for _, l := range res.handed {
			if k := slices.Index(c.locks, l); w[k].Count == 0 {
				kept = append(kept, l)
			}
		}
		res.handed = kept
		d.world.done(c, false)
	case opRenew:
		res.want = m.Renew(c.owner, c.lease)
		res.got, err = on.renew(d.ctx, c.owner, c.lease)
	case opCancel:
		res.want, res.handed = m.Cancel(c.owner, c.entry), one
		res.got, err = on.cancel(d.ctx, c.owner, c.entry)
	case opCancelTicket:
		res.want, res.handed = d.server.CancelTicket(d.keysOf(c.locks), c.owner, c.entry), c.locks
		res.got, err = r.cancelTicket(d.ctx, d.rigKeys(c.locks), c.owner, c.entry)
	case opForce:
		res.want, res.handed = m.ForceUnlock(), one
		res.got, err = on.forceUnlock(d.ctx)
	case opProclaim:
		res.want = m.Proclaim(c.owner, c.entry, c.value)
		res.got, err = on.proclaim(d.ctx, c.owner, c.entry, c.value)
		d.world.done(c, false)
	case opAdvance:
		d.server.Advance(c.d)
		r.advance(c.d)
	}
	return res, err
}

// sameHints sets the hint and the server time of the scripts' reply g to
// the model's when the two are the same within the differ's tolerance:
// a real server's clock moves, and the model's clock has ms only.
func (d *differ) sameHints(w queue.Reply, g *queue.Reply) { sameHintsWithin(d.tol, w, g) }

// sameHintsWithin is sameHints with tol ms of tolerance.
func sameHintsWithin(tol int64, w queue.Reply, g *queue.Reply) {
	if tol > 0 && !w.Granted && !g.Granted && abs(w.Hint-g.Hint) <= tol {
		g.Hint = w.Hint
	}
	if !w.Granted && !g.Granted && abs(w.ServerTime/1000-g.ServerTime/1000) <= tol {
		g.ServerTime = w.ServerTime
	}
}

// givenBack returns the locks of a MultiLock call that the call gives
// back before it goes on: those still handed to its ticket, when the
// others no longer are.
func (d *differ) givenBack(c call) []int {
	var mine []int
	for _, i := range c.locks {
		if h := d.prevM[i].Hold; h != nil && h.Owner == c.owner && h.Entry == c.entry {
			mine = append(mine, i)
		}
	}
	if len(mine) == len(c.locks) {
		return nil
	}
	return mine
}

// all returns the indices of every lock of the rig.
func (d *differ) all() []int {
	idx := make([]int, len(d.rig.locks))
	for i := range idx {
		idx[i] = i
	}
	return idx
}

// keysOf returns the hash keys of the locks of the given indices.
func (d *differ) keysOf(locks []int) []string {
	keys := make([]string, len(locks))
	for i, l := range locks {
		keys[i] = d.rig.locks[l].Lock
	}
	return keys
}

// rigKeys returns the keys of the locks of the given indices.
func (d *differ) rigKeys(locks []int) []queue.Keys {
	keys := make([]queue.Keys, len(locks))
	for i, l := range locks {
		keys[i] = d.rig.locks[l]
	}
	return keys
}

// compare checks a step: the replies, the state of every lock, the wake
// messages and the invariants. refused says the server refused the
// step's PUBLISH: then there is no reply from the scripts to compare, and
// the scripts must have sent no wake message where the model sent one.
func (d *differ) compare(c call, res result, refused bool) {
	d.t.Helper()
	ss, msgs, err := d.rig.states(d.ctx)
	if err != nil {
		d.fail("reading the state: %v", err)
	}
	ms := make([]queue.State, len(ss))
	for i := range ms {
		ms[i] = d.model(i).State()
	}
	wantMsgs := d.server.Drain()
	seen := slices.Clone(ss)
	got := res.got
	if d.tokens != nil {
		for i := range ss {
			d.pairTokens(i, ms[i], ss[i])
		}
		seen, msgs, got = d.translate(c, seen, msgs, got)
	}
	for i := range seen {
		seen[i] = d.sameReceiptTimes(ms[i], seen[i])
	}
	if w, ok := res.want.(queue.Released); ok {
		if g, ok := got.(queue.Released); ok && len(w.Wakes) == len(g.Wakes) && len(g.Wakes) > 0 {
			g.Wakes = d.sameTimes(w.Wakes, g.Wakes)
			got = g
		}
	}
	if ws, ok := res.want.([]queue.Released); ok {
		if gs, ok := got.([]queue.Released); ok && len(gs) == len(ws) {
			gs = slices.Clone(gs)
			for k := range gs {
				if len(ws[k].Wakes) == len(gs[k].Wakes) && len(gs[k].Wakes) > 0 {
					gs[k].Wakes = d.sameTimes(ws[k].Wakes, gs[k].Wakes)
				}
			}
			got = gs
		}
	}
	if !refused && !reflect.DeepEqual(res.want, got) {
		d.fail("reply: model %+v, scripts %+v", res.want, got)
	}
	d.log[len(d.log)-1] += fmt.Sprintf(" -> %+v", res.want)
	for i := range ms {
		if diff := diffState(ms[i], seen[i], d.tol); diff != "" {
			d.fail("state of %s differs (model vs scripts):\n%s", d.rig.locks[i].Name, diff)
		}
	}
	msgs = d.sameWakeTimes(wantMsgs, msgs)
	switch {
	case refused && (len(wantMsgs) == 0 || len(msgs) > 0):
		d.fail("a refused PUBLISH: the model woke %s, the scripts %s", shown(wantMsgs), shown(msgs))
	case !refused && !slices.Equal(wantMsgs, msgs):
		d.fail("wake messages: model %s, scripts %s", shown(wantMsgs), shown(msgs))
	}
	for i, s := range ss {
		if err := checkLock(d.prev[i], s, d.top[i]); err != nil {
			d.fail("invariant broken on %s: %v\nstate: %+v", d.rig.locks[i].Name, err, s)
		}
	}
	if err := checkSettled(ss, d.keysOf(d.all()), res); err != nil {
		d.fail("invariant broken: %v\nstates: %+v", err, ss)
	}
	if err := checkTickets(d.prev, ss, d.keysOf(d.all()), d.sets); err != nil {
		d.fail("invariant broken: %v\nstates: %+v", err, ss)
	}
	d.prev, d.prevM = ss, ms
	for i, s := range ss {
		d.top[i] = max(d.top[i], s.LastToken)
		if s.Hold != nil {
			d.top[i] = max(d.top[i], s.Hold.Token)
		}
	}
}

// index returns the index of each of the rig's locks by its hash key.
func (d *differ) index() map[string]int {
	idx := make(map[string]int, len(d.rig.locks))
	for i, k := range d.rig.locks {
		idx[k.Lock] = i
	}
	return idx
}

// shown lists published messages for a failure: each quoted, after the
// hash key of its lock, and marked when it went out on the lock's leader
// channel.
func shown(msgs []queue.Wake) string {
	each := make([]string, len(msgs))
	for i, w := range msgs {
		on := w.Lock
		if w.Leader {
			on += " (leader)"
		}
		each[i] = fmt.Sprintf("%s %q", on, w.Message)
	}
	return "[" + strings.Join(each, ", ") + "]"
}

func abs(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}
