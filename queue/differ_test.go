package queue

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
)

// differ applies each call to the model and to the real scripts and
// compares the reply, the whole state of the lock and the wake messages
// after every step, then checks the invariants of docs/algorithm.md.
type differ struct {
	t     testing.TB
	ctx   context.Context
	model *Model
	rig   *rig
	world *world
	tol   int64  // ms of slack on times (a real server's clock moves)
	about string // how to reproduce the run, printed on failure
	log   []string
	prev  State
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
		o, ok := nextOp(src)
		if !ok {
			return
		}
		c, ok := d.world.resolve(d.model, o)
		if !ok {
			continue
		}
		if d.world.timeless {
			// The model's clock follows the server's, which we cannot stop.
			now, err := d.rig.now(d.ctx)
			if err != nil {
				d.fail("TIME: %v", err)
			}
			d.model.Advance(max(now-d.model.Now(), 0))
		}
		d.step(c)
	}
}

// step applies one call to both sides and compares them.
func (d *differ) step(c call) {
	d.t.Helper()
	d.log = append(d.log, fmt.Sprintf("%4d  %v", len(d.log)+1, c))
	_, hadReceipt := d.model.receipts[c.id]
	var want, got any
	var err error
	handsOver := false
	switch c.kind {
	case opPoll, opTry, opReenter:
		w := d.model.Acquire(c.id, c.owner, c.entry, c.lease, c.ttl, c.mode)
		var g Reply
		g, err = d.rig.acquire(d.ctx, c.id, c.owner, c.entry, c.lease, c.ttl, c.mode)
		if d.tol > 0 && !w.Granted && !g.Granted && abs(w.Hint-g.Hint) <= d.tol {
			g.Hint = w.Hint
		}
		want, got, handsOver = w, g, !hadReceipt
		d.world.done(c, w.Granted)
	case opRelease:
		w := d.model.Release(c.id, c.owner, c.lease)
		want, handsOver = w, w == 0 && !hadReceipt
		got, err = d.rig.release(d.ctx, c.id, c.owner, c.lease)
		d.world.done(c, false)
	case opRenew:
		want = d.model.Renew(c.owner, c.lease)
		got, err = d.rig.renew(d.ctx, c.owner, c.lease)
	case opCancel:
		want, handsOver = d.model.Cancel(c.owner, c.entry), true
		got, err = d.rig.cancel(d.ctx, c.owner, c.entry)
	case opForce:
		want, handsOver = d.model.ForceUnlock(), true
		got, err = d.rig.forceUnlock(d.ctx)
	case opAdvance:
		d.model.Advance(c.d)
		d.rig.advance(c.d)
	}
	if err != nil {
		d.fail("the script failed: %v", err)
	}
	if want != got {
		d.fail("reply: model %+v, scripts %+v", want, got)
	}
	d.log[len(d.log)-1] += fmt.Sprintf(" -> %+v", want)

	s, msgs, err := d.rig.state(d.ctx)
	if err != nil {
		d.fail("reading the state: %v", err)
	}
	m := d.model.State()
	if diff := diffState(m, s, d.tol); diff != "" {
		d.fail("state differs (model vs scripts):\n%s", diff)
	}
	if wantMsgs := d.model.Drain(); !slices.Equal(wantMsgs, msgs) {
		d.fail("wake messages: model %q, scripts %q", wantMsgs, msgs)
	}
	if err := checkInvariants(d.prev, s, handsOver); err != nil {
		d.fail("invariant broken: %v\nstate: %+v", err, s)
	}
	d.prev = s
}

// diffState lists the differences between two states, with tol ms of
// slack on every time; "" when they agree.
func diffState(want, got State, tol int64) string {
	var b strings.Builder
	near := func(x, y int64) bool { return abs(x-y) <= tol }
	if !near(want.Now, got.Now) {
		fmt.Fprintf(&b, "now: %d vs %d\n", want.Now, got.Now)
	}
	switch w, g := want.Hold, got.Hold; {
	case w == nil && g == nil:
	case w == nil || g == nil:
		fmt.Fprintf(&b, "hold: %+v vs %+v\n", w, g)
	default:
		if w.Owner != g.Owner || w.Count != g.Count || w.Token != g.Token || w.Entry != g.Entry ||
			!near(w.ExpiresAt, g.ExpiresAt) || (w.ExpiresAt == 0) != (g.ExpiresAt == 0) {
			fmt.Fprintf(&b, "hold: %+v vs %+v (ttl %d vs %d)\n", *w, *g, w.ExpiresAt-want.Now, g.ExpiresAt-got.Now)
		}
	}
	if !slices.Equal(want.Queue, got.Queue) {
		fmt.Fprintf(&b, "queue: %q vs %q\n", want.Queue, got.Queue)
	}
	if !maps.EqualFunc(want.Deadlines, got.Deadlines, near) {
		fmt.Fprintf(&b, "deadlines: %v vs %v\n", want.Deadlines, got.Deadlines)
	}
	if want.LastToken != got.LastToken {
		fmt.Fprintf(&b, "token counter: %d vs %d\n", want.LastToken, got.LastToken)
	}
	if !maps.EqualFunc(want.Receipts, got.Receipts, func(x, y Receipt) bool {
		return x.Answer == y.Answer && near(x.ExpiresAt, y.ExpiresAt)
	}) {
		fmt.Fprintf(&b, "receipts: %v vs %v\n", want.Receipts, got.Receipts)
	}
	return b.String()
}

// checkInvariants checks the invariants that hold after every script, in
// s, against the state before the step. handsOver says the step ran a
// script that hands a free lock to a live head.
func checkInvariants(prev, s State, handsOver bool) error {
	seen := map[string]bool{}
	for _, e := range s.Queue {
		if seen[e] {
			return fmt.Errorf("entry %q is queued twice", e)
		}
		seen[e] = true
		if _, ok := s.Deadlines[e]; !ok {
			return fmt.Errorf("entry %q is queued without a deadline", e)
		}
	}
	if len(s.Deadlines) != len(s.Queue) {
		return fmt.Errorf("%d deadlines for %d queued entries", len(s.Deadlines), len(s.Queue))
	}
	if s.LastToken < prev.LastToken {
		return fmt.Errorf("the token counter went back from %d to %d", prev.LastToken, s.LastToken)
	}
	if h := s.Hold; h != nil {
		if h.Count < 1 || h.Token < 1 || h.Token > s.LastToken {
			return fmt.Errorf("hold %+v with token counter %d", *h, s.LastToken)
		}
		if p := prev.Hold; p != nil && h.Token < p.Token {
			return fmt.Errorf("token %d granted after token %d", h.Token, p.Token)
		}
	}
	if handsOver && s.Hold == nil && len(s.Queue) > 0 {
		head := s.Queue[0]
		if _, _, ok := parseEntry(head); ok && s.Deadlines[head] > s.Now {
			return fmt.Errorf("the lock is free while %q (deadline %d) heads the queue", head, s.Deadlines[head])
		}
	}
	return nil
}

func abs(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}
