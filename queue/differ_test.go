package queue_test

import (
	"context"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/fairlock/fairlock/queue"
)

// differ applies each call to the model and to the real scripts and
// compares the reply, the whole state of the lock and the wake messages
// after every step, then checks the invariants of docs/algorithm.md.
//
// On a real server (tol > 0) the scripts read a clock a few ms ahead of
// the model's, and a fresh grant's token follows the clock, so tokens
// cannot match exactly there. The differ then pairs each token the
// scripts issue with the model's token of the same grant (one grant per
// step at most), checks that the two are within tol ms of clock
// (tol * queue.TokensPerMs) of each other, and compares the rest exactly after
// putting the model's token in place of the scripts' one everywhere: the
// reply, the hold, the counter, the receipts and the wake messages.
type differ struct {
	t      testing.TB
	ctx    context.Context
	model  *queue.Model
	rig    *rig
	world  *world
	tol    int64           // ms of slack on times (a real server's clock moves)
	tokens map[int64]int64 // when tol > 0: the scripts' token -> the model's
	about  string          // how to reproduce the run, printed on failure
	log    []string
	prev   queue.State // the scripts' state after the last step
	prevM  queue.State // the model's state after the last step
	top    int64       // the highest token any of the scripts' states showed
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
		d.step(c)
	}
}

// step applies one call to both sides and compares them.
func (d *differ) step(c call) {
	d.t.Helper()
	want, got, handsOver, err := d.apply(d.rig, c)
	if err != nil {
		d.fail("the script failed: %v", err)
	}
	d.compare(want, got, handsOver, false)
}

// apply applies c to the model, and to the scripts through r, and returns
// both replies; handsOver says that the call ran a script that hands a
// free lock to a live head.
func (d *differ) apply(r *rig, c call) (want, got any, handsOver bool, err error) {
	d.t.Helper()
	if d.world.timeless {
		// The model's clock follows the server's, which we cannot stop.
		now, err := r.now(d.ctx)
		if err != nil {
			d.fail("TIME: %v", err)
		}
		d.model.Advance(max(now-d.model.Now(), 0))
	}
	d.log = append(d.log, fmt.Sprintf("%4d  %v", len(d.log)+1, c))
	_, hadReceipt := d.model.State().Receipts[c.id]
	switch c.kind {
	case opPoll, opTry, opReenter:
		w := d.model.Acquire(c.id, c.owner, c.entry, c.lease, c.ttl, c.mode)
		var g queue.Reply
		g, err = r.acquire(d.ctx, c.id, c.owner, c.entry, c.lease, c.ttl, c.mode)
		if d.tol > 0 && !w.Granted && !g.Granted && abs(w.Hint-g.Hint) <= d.tol {
			g.Hint = w.Hint
		}
		if !w.Granted && !g.Granted && abs(w.ServerTime/1000-g.ServerTime/1000) <= d.tol {
			g.ServerTime = w.ServerTime // the model's clock has ms only
		}
		want, got, handsOver = w, g, !hadReceipt
		d.world.done(c, w.Granted)
	case opRelease:
		w := d.model.ReleaseFrom(c.id, c.owner, c.own, c.lease)
		var g queue.Released
		g, err = r.release(d.ctx, c.id, c.owner, c.own, c.lease)
		want, got, handsOver = w, g, w.Count == 0 && !hadReceipt
		d.world.done(c, false)
	case opRenew:
		want = d.model.Renew(c.owner, c.lease)
		got, err = r.renew(d.ctx, c.owner, c.lease)
	case opCancel:
		want, handsOver = d.model.Cancel(c.owner, c.entry), true
		got, err = r.cancel(d.ctx, c.owner, c.entry)
	case opForce:
		want, handsOver = d.model.ForceUnlock(), true
		got, err = r.forceUnlock(d.ctx)
	case opAdvance:
		d.model.Advance(c.d)
		r.advance(c.d)
	}
	return want, got, handsOver, err
}

// compare checks a step: the replies, the state, the wake messages and
// the invariants. refused says the server refused the step's PUBLISH:
// then there is no reply from the scripts to compare, and the scripts
// must have sent no wake message where the model sent one.
func (d *differ) compare(want, got any, handsOver, refused bool) {
	d.t.Helper()
	s, msgs, err := d.rig.state(d.ctx)
	if err != nil {
		d.fail("reading the state: %v", err)
	}
	m := d.model.State()
	wantMsgs := d.model.Drain()
	seen := s
	if d.tokens != nil {
		d.pairTokens(m, s)
		seen, msgs, got = d.translate(s, msgs, got)
	}
	seen = d.sameReceiptTimes(m, seen)
	if w, ok := want.(queue.Released); ok {
		if g, ok := got.(queue.Released); ok && w.Wake != "" && g.Wake != "" {
			g.Wake = d.sameTimes([]string{w.Wake}, []string{g.Wake})[0]
			got = g
		}
	}
	if !refused && !reflect.DeepEqual(want, got) {
		d.fail("reply: model %+v, scripts %+v", want, got)
	}
	d.log[len(d.log)-1] += fmt.Sprintf(" -> %+v", want)
	if diff := diffState(m, seen, d.tol); diff != "" {
		d.fail("state differs (model vs scripts):\n%s", diff)
	}
	switch {
	case refused && (len(wantMsgs) == 0 || len(msgs) > 0):
		d.fail("a refused PUBLISH: the model woke %q, the scripts %q", wantMsgs, msgs)
	case !refused && !slices.Equal(wantMsgs, d.sameTimes(wantMsgs, msgs)):
		d.fail("wake messages: model %q, scripts %q", wantMsgs, msgs)
	}
	if err := checkInvariants(d.prev, s, d.top, handsOver); err != nil {
		d.fail("invariant broken: %v\nstate: %+v", err, s)
	}
	d.prev, d.prevM = s, m
	d.top = max(d.top, s.LastToken)
	if s.Hold != nil {
		d.top = max(d.top, s.Hold.Token)
	}
}

// sameTimes returns msgs with the time of each wake message that has one
// replaced by the time of the model's message at the same place, when
// the two are the same ms (within the differ's tolerance): the model's
// clock has ms only, the scripts' µs.
func (d *differ) sameTimes(want, msgs []string) []string {
	if len(want) != len(msgs) {
		return msgs
	}
	out := slices.Clone(msgs)
	for i := range out {
		wHead, wAt, wOK := cutTime(want[i])
		gHead, gAt, gOK := cutTime(out[i])
		if wOK && gOK && wHead == gHead && abs(wAt/1000-gAt/1000) <= d.tol {
			out[i] = want[i]
		}
	}
	return out
}

// sameReceiptTimes returns s with the time in the wake message of each
// release receipt ("0 <wake message>", a local hand-off) replaced by the
// time of the model's receipt of the same call, when the two are the same
// ms (see sameTimes).
func (d *differ) sameReceiptTimes(m, s queue.State) queue.State {
	var receipts map[string]queue.Receipt
	for id, r := range s.Receipts {
		want, ok := m.Receipts[id]
		wCount, wMsg, wOK := strings.Cut(want.Answer, " ")
		gCount, gMsg, gOK := strings.Cut(r.Answer, " ")
		if !ok || !wOK || !gOK || wCount != gCount {
			continue
		}
		if same := d.sameTimes([]string{wMsg}, []string{gMsg})[0]; same != gMsg {
			if receipts == nil {
				receipts = maps.Clone(s.Receipts)
			}
			r.Answer = gCount + " " + same
			receipts[id] = r
		}
	}
	if receipts != nil {
		s.Receipts = receipts
	}
	return s
}

// cutTime splits a wake message "<entry> <token> <µs>" into what comes
// before the time, and the time; ok is false for a message without one.
func cutTime(msg string) (head string, at int64, ok bool) {
	i := strings.LastIndexByte(msg, ' ')
	if i < 0 || strings.Count(msg, " ") != 2 {
		return "", 0, false
	}
	at, err := strconv.ParseInt(msg[i+1:], 10, 64)
	return msg[:i], at, err == nil
}

// pairTokens records the token of this step's fresh grant, if both sides
// made one: the model's m.LastToken stands for the scripts' s.LastToken.
// A grant made by one side only is left unpaired, and the comparison of
// the counters reports it.
func (d *differ) pairTokens(m, s queue.State) {
	d.t.Helper()
	if m.LastToken == d.prevM.LastToken || s.LastToken == d.prev.LastToken {
		return
	}
	if abs(m.LastToken-s.LastToken) > d.tol*queue.TokensPerMs {
		d.fail("token: model %d, scripts %d: more than %d ms of clock apart", m.LastToken, s.LastToken, d.tol)
	}
	d.tokens[s.LastToken] = m.LastToken
}

// translate returns the scripts' state, wake messages and reply with
// every token replaced by the model's token of the same grant. A token
// without a pair stays as it is, so the comparison shows it.
func (d *differ) translate(s queue.State, msgs []string, reply any) (queue.State, []string, any) {
	tok := func(t int64) int64 {
		if mt, ok := d.tokens[t]; ok {
			return mt
		}
		return t
	}
	text := func(t string) string {
		n, err := strconv.ParseInt(t, 10, 64)
		if err != nil {
			return t
		}
		return strconv.FormatInt(tok(n), 10)
	}
	s.LastToken = tok(s.LastToken)
	if s.Hold != nil {
		h := *s.Hold
		h.Token = tok(h.Token)
		s.Hold = &h
	}
	wake := func(msg string) string {
		entry, rest, _ := strings.Cut(msg, " ") // "<entry> <token>", then maybe " <µs>"
		if token, at, timed := strings.Cut(rest, " "); timed {
			return entry + " " + text(token) + " " + at
		} else if rest != "" {
			return entry + " " + text(rest)
		}
		return msg
	}
	receipts := make(map[string]queue.Receipt, len(s.Receipts))
	for id, r := range s.Receipts {
		if count, msg, ok := strings.Cut(r.Answer, " "); ok { // a release's "0 <wake message>"
			r.Answer = count + " " + wake(msg)
		} else if t, count, ok := strings.Cut(r.Answer, ":"); ok { // an acquire's "<token>:<count>"
			r.Answer = text(t) + ":" + count
		}
		receipts[id] = r
	}
	s.Receipts = receipts
	out := make([]string, len(msgs))
	for i, msg := range msgs {
		out[i] = wake(msg)
	}
	if r, ok := reply.(queue.Reply); ok && r.Granted {
		r.Token = tok(r.Token)
		reply = r
	}
	if r, ok := reply.(queue.Released); ok && r.Wake != "" {
		r.Wake = wake(r.Wake)
		reply = r
	}
	return s, out, reply
}

// diffState lists the differences between two states, with tol ms of
// slack on every time; "" when they agree.
func diffState(want, got queue.State, tol int64) string {
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
	// The model drops a key once its clock reaches the expiry, as
	// miniredis does; a real server keeps it through that last
	// millisecond. A counter lives 1 ms after a grant of a lease of 0,
	// so on a real server (tol > 0) the model may already have dropped a
	// counter the server still has in its last millisecond.
	lastMs := tol > 0 && want.LastToken == 0 && got.LastToken != 0 && got.TokenEnd <= want.Now+tol
	if want.LastToken != got.LastToken && !lastMs {
		fmt.Fprintf(&b, "token counter: %d vs %d\n", want.LastToken, got.LastToken)
	}
	if (!near(want.TokenEnd, got.TokenEnd) || (want.TokenEnd == 0) != (got.TokenEnd == 0)) && !lastMs {
		fmt.Fprintf(&b, "token counter expires at: %d vs %d (0: never or no counter)\n", want.TokenEnd, got.TokenEnd)
	}
	if !maps.EqualFunc(want.Receipts, got.Receipts, func(x, y queue.Receipt) bool {
		return x.Answer == y.Answer && near(x.ExpiresAt, y.ExpiresAt)
	}) {
		fmt.Fprintf(&b, "receipts: %v vs %v\n", want.Receipts, got.Receipts)
	}
	return b.String()
}

// checkInvariants checks the invariants that hold after every script, in
// s, against the state before the step and top, the highest token any
// earlier state showed (in the hold or the counter). handsOver says the
// step ran a script that hands a free lock to a live head.
//
// The counter expires, so it may be gone (0) while the lock is held, and
// a token is checked against top, not only against the counter: a fresh
// grant (a counter that changed to a token, a hold with another token
// than before) must be above every token issued before it.
func checkInvariants(prev, s queue.State, top int64, handsOver bool) error {
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
	if s.LastToken > 0 && s.LastToken != prev.LastToken && s.LastToken <= top {
		return fmt.Errorf("the token counter went from %d to %d, not above the earlier token %d", prev.LastToken, s.LastToken, top)
	}
	if s.LastToken > 0 && s.TokenEnd == 0 {
		return fmt.Errorf("the token counter %d never expires", s.LastToken)
	}
	if h := s.Hold; h != nil {
		if h.Count < 1 || h.Token < 1 || (s.LastToken > 0 && h.Token > s.LastToken) {
			return fmt.Errorf("hold %+v with token counter %d", *h, s.LastToken)
		}
		if p := prev.Hold; (p == nil || h.Token != p.Token) && h.Token <= top {
			return fmt.Errorf("token %d granted after token %d", h.Token, top)
		}
	}
	if handsOver && s.Hold == nil && len(s.Queue) > 0 {
		head := s.Queue[0]
		if _, _, ok := queue.ParseEntry(head); ok && s.Deadlines[head] > s.Now {
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
