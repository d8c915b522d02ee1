package queue_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock/fairlock/queue"
)

// wdiffer is the differ of weighted locks: it applies each call to the
// model (a WeightedModel per lock of the rig) and to the scripts, and
// compares the replies, the whole state of every lock and the wake
// messages after every step, then checks the invariants of weighted locks
// (checkWeighted, checkFresh).
//
// On a real server (tol > 0) tokens follow the server's clock, which
// runs a few ms ahead of the model's, so the differ pairs each token the
// scripts issue with the model's token of the same grant (the same
// owner's hold, or the counter), checks that the two are within tol ms of
// clock of each other, and compares everything else exactly with the
// model's tokens in place of the scripts' (see differ).
type wdiffer struct {
	t      testing.TB
	ctx    context.Context
	server *queue.Server
	rig    *rig
	world  *wworld
	tol    int64
	tokens []map[int64]int64 // when tol > 0, for each lock: the scripts' token -> the model's
	paired []map[int64]bool  // when tol > 0, for each lock: the model's tokens that have a pair
	about  string
	log    []string
	prev   []queue.WeightedState // the scripts' state of each lock after the last step
	top    []int64               // for each lock, the highest token any of the scripts' states showed
	over   []bool                // for each lock: its capacity was lowered below the weights held, which are still above it
}

func newWDiffer(t testing.TB, r *rig, w *wworld, now, tol int64, about string) *wdiffer {
	n := len(r.locks)
	d := &wdiffer{t: t, ctx: context.Background(), server: queue.NewServer(now, r.receiptTTL), rig: r, world: w,
		tol: tol, about: about, prev: make([]queue.WeightedState, n), top: make([]int64, n), over: make([]bool, n)}
	for i := range d.prev {
		d.prev[i] = queue.WeightedState{Now: now}
	}
	if tol > 0 {
		for range n {
			d.tokens = append(d.tokens, map[int64]int64{0: 0})
			d.paired = append(d.paired, map[int64]bool{0: true})
		}
	}
	return d
}

func (d *wdiffer) model(i int) *queue.WeightedModel { return d.server.Weighted(d.rig.locks[i].Lock) }

func (d *wdiffer) states() []queue.WeightedState {
	ss := make([]queue.WeightedState, len(d.rig.locks))
	for i := range ss {
		ss[i] = d.model(i).State()
	}
	return ss
}

func (d *wdiffer) fail(format string, args ...any) {
	d.t.Helper()
	shown := d.log[max(len(d.log)-shownCalls, 0):]
	d.t.Fatalf("%s\nafter %d calls, the last %d:\n%s\n%s", fmt.Sprintf(format, args...),
		len(d.log), len(shown), strings.Join(shown, "\n"), d.about)
}

// run decodes ops from src until it runs out or steps calls were made.
func (d *wdiffer) run(src source, steps int) {
	d.t.Helper()
	for len(d.log) < steps {
		o, ok := d.world.next(src)
		if !ok {
			return
		}
		c, ok := d.world.resolve(d.states(), o)
		if !ok {
			continue
		}
		d.step(c)
	}
}

// acquired is the answer of an acquire: a reply, or the text of a refusal.
type acquired struct {
	queue.Reply
	Refused string
}

// step applies one call to both sides and compares them.
func (d *wdiffer) step(c wcall) {
	d.t.Helper()
	if d.world.timeless {
		// The model's clock follows the server's, which we cannot stop.
		now, err := d.rig.now(d.ctx)
		if err != nil {
			d.fail("TIME: %v", err)
		}
		d.server.Advance(max(now-d.server.Now(), 0))
	}
	d.log = append(d.log, fmt.Sprintf("%4d  %v", len(d.log)+1, c))
	m, r := d.model(c.lock), d.rig.on(c.lock)
	var want, got any
	var err error
	switch c.kind {
	case opPoll, opTry, opReenter:
		w, werr := m.Acquire(c.id, c.owner, c.entry, c.lease, c.ttl, c.mode, c.level.Weight, c.level.Excl, c.capacity)
		g, gerr := r.wacquire(d.ctx, c.id, c.owner, c.entry, c.lease, c.ttl, c.mode, c.level, c.capacity)
		var re redis.Error
		if errors.As(gerr, &re) && strings.HasPrefix(re.Error(), "FAIRLOCK ") {
			gerr = nil
			got = acquired{Refused: re.Error()}
		} else {
			sameHintsWithin(d.tol, w, &g)
			got = acquired{Reply: g}
		}
		want, err = acquired{Reply: w}, gerr
		if werr != nil {
			want = acquired{Refused: werr.Error()}
		}
		d.world.done(c, w.Granted, werr != nil)
	case opRelease:
		want = m.ReleaseFrom(c.id, c.owner, c.own, c.lease, c.level.Excl)
		got, err = r.wrelease(d.ctx, c.id, c.owner, c.own, c.lease, c.level)
		d.world.done(c, false, false)
	case opRenew:
		want = m.Renew(c.owner, c.lease)
		got, err = r.wrenew(d.ctx, c.owner, c.lease)
	case opCancel:
		want = m.Cancel(c.owner, c.entry)
		got, err = r.wcancel(d.ctx, c.owner, c.entry)
	case opForce:
		want = m.Force(c.owner)
		got, err = r.wforce(d.ctx, c.owner)
	case opResize:
		want = m.Resize(c.permits)
		got, err = r.wresize(d.ctx, c.permits)
	case opAdvance:
		d.server.Advance(c.d)
		d.rig.advance(c.d)
	}
	if err != nil {
		d.fail("the script failed: %v", err)
	}
	d.compare(c, want, got)
}

// compare checks a step: the replies, the state of every lock, the wake
// messages and the invariants.
func (d *wdiffer) compare(c wcall, want, got any) {
	d.t.Helper()
	ss, msgs, err := d.rig.wstates(d.ctx)
	if err != nil {
		d.fail("reading the state: %v", err)
	}
	ms := d.states()
	wantMsgs := d.server.Drain()
	seen := slices.Clone(ss)
	if d.tokens != nil {
		for i := range ss {
			d.pairTokens(i, ms[i], ss[i])
		}
		seen, msgs, got = d.translate(c, seen, msgs, got)
	}
	if w, ok := want.(queue.Released); ok {
		if g, ok := got.(queue.Released); ok && len(w.Wakes) == len(g.Wakes) && len(g.Wakes) > 0 {
			g.Wakes = sameTimesWithin(d.tol, w.Wakes, g.Wakes)
			got = g
		}
	}
	if !reflect.DeepEqual(want, got) {
		d.fail("reply: model %+v, scripts %+v", want, got)
	}
	d.log[len(d.log)-1] += fmt.Sprintf(" -> %+v", want)
	for i := range ms {
		if diff := diffWeighted(ms[i], seen[i], d.tol); diff != "" {
			d.fail("state of %s differs (model vs scripts):\n%s", d.rig.locks[i].Lock, diff)
		}
	}
	if len(wantMsgs) == len(msgs) {
		for i := range msgs {
			if wantMsgs[i].Lock == msgs[i].Lock {
				msgs[i].Message = sameTimesWithin(d.tol, []string{wantMsgs[i].Message}, []string{msgs[i].Message})[0]
			}
		}
	}
	if !slices.Equal(wantMsgs, msgs) {
		d.fail("wake messages: model %s, scripts %s", shown(wantMsgs), shown(msgs))
	}
	for i, s := range ss {
		resized := c.kind == opResize && c.lock == i
		err := checkWeighted(s, i == rwLock, d.tol)
		if err == nil {
			own := ""
			if i == c.lock {
				own = c.entry
			}
			err = checkFresh(d.prev[i], s, d.top[i], d.over[i] || resized, own)
		}
		if err == nil && i == c.lock {
			if a, ok := want.(acquired); ok && strings.HasPrefix(a.Refused, "FAIRLOCK PERMITS") {
				err = checkRefusedWhileInUse(s)
			}
		}
		if err != nil {
			d.fail("invariant broken on %s: %v\nstate: %+v", d.rig.locks[i].Lock, err, s)
		}
		d.over[i] = (d.over[i] || resized) && s.Used > s.Capacity
		d.top[i] = max(d.top[i], s.LastToken)
		for _, h := range s.Holders {
			d.top[i] = max(d.top[i], h.Token)
		}
	}
	d.prev = ss
}

// pairTokens pairs the tokens of this step's fresh grants of lock i, where
// both sides made one: the model's token of an owner's hold stands for the
// scripts' token of the same owner's hold, and the model's counter for
// the scripts' counter. A grant made by one side only is left unpaired,
// and the comparison of the states reports it.
func (d *wdiffer) pairTokens(i int, m, s queue.WeightedState) {
	d.t.Helper()
	pair := func(mt, st int64) {
		if _, ok := d.tokens[i][st]; ok || d.paired[i][mt] {
			return
		}
		if abs(mt-st) > d.tol*queue.TokensPerMs {
			d.fail("token of %s: model %d, scripts %d: more than %d ms of clock apart", d.rig.locks[i].Lock, mt, st, d.tol)
		}
		d.tokens[i][st], d.paired[i][mt] = mt, true
	}
	for _, owner := range slices.Sorted(maps.Keys(m.Holders)) {
		if h, ok := s.Holders[owner]; ok {
			pair(m.Holders[owner].Token, h.Token)
		}
	}
	pair(m.LastToken, s.LastToken)
}

// translate returns the scripts' states, wake messages and reply to c
// with every token replaced by the model's token of the same grant. A
// token without a pair stays as it is, so the comparison shows it.
func (d *wdiffer) translate(c wcall, ss []queue.WeightedState, msgs []queue.Wake, reply any) ([]queue.WeightedState, []queue.Wake, any) {
	tok := func(i int, t int64) int64 {
		if mt, ok := d.tokens[i][t]; ok {
			return mt
		}
		return t
	}
	text := func(i int, t string) string {
		n, err := strconv.ParseInt(t, 10, 64)
		if err != nil {
			return t
		}
		return strconv.FormatInt(tok(i, n), 10)
	}
	// wake translates the token of a wake message of lock i.
	wake := func(i int, msg string) string {
		entry, rest, grant := strings.Cut(msg, " ") // "<entry> <token>", then maybe " <µs>"
		if !grant {
			return msg // "<entry>" alone: a waiter told to poll
		}
		token, at, timed := strings.Cut(rest, " ")
		m := entry + " " + text(i, token)
		if timed {
			m += " " + at
		}
		return m
	}
	for i, s := range ss {
		s.LastToken = tok(i, s.LastToken)
		holders := make(map[string]queue.Holder, len(s.Holders))
		for owner, h := range s.Holders {
			h.Token = tok(i, h.Token)
			holders[owner] = h
		}
		s.Holders = holders
		receipts := make(map[string]queue.Receipt, len(s.Receipts))
		for id, r := range s.Receipts {
			if count, wakes, ok := strings.Cut(r.Answer, " "); ok { // a release's "<count> <wake message>\n..."
				each := strings.Split(wakes, "\n")
				for k, msg := range each {
					each[k] = wake(i, msg)
				}
				r.Answer = count + " " + strings.Join(each, "\n")
			} else if t, count, ok := strings.Cut(r.Answer, ":"); ok { // an acquire's "<token>:<count>"
				r.Answer = text(i, t) + ":" + count
			}
			receipts[id] = r
		}
		s.Receipts = receipts
		ss[i] = s
	}
	idx := map[string]int{}
	for i, k := range d.rig.locks {
		idx[k.Lock] = i
	}
	out := make([]queue.Wake, len(msgs))
	for k, msg := range msgs {
		out[k] = msg
		out[k].Message = wake(idx[msg.Lock], msg.Message)
	}
	if a, ok := reply.(acquired); ok && a.Granted {
		a.Token = tok(c.lock, a.Token)
		reply = a
	}
	if r, ok := reply.(queue.Released); ok && len(r.Wakes) > 0 {
		r.Wakes = slices.Clone(r.Wakes)
		for k := range r.Wakes {
			r.Wakes[k] = wake(c.lock, r.Wakes[k])
		}
		reply = r
	}
	return ss, out, reply
}

// diffWeighted lists the differences between two states of a weighted
// lock, with tol ms of slack on every time; "" when they agree.
func diffWeighted(want, got queue.WeightedState, tol int64) string {
	var b strings.Builder
	near := func(x, y int64) bool { return abs(x-y) <= tol }
	// An expiry: near, and both never (or no key) or both some time.
	expiry := func(x, y int64) bool { return near(x, y) && (x == 0) == (y == 0) }
	if !near(want.Now, got.Now) {
		fmt.Fprintf(&b, "now: %d vs %d\n", want.Now, got.Now)
	}
	if want.Capacity != got.Capacity || want.Used != got.Used {
		fmt.Fprintf(&b, "capacity, used: %d, %d vs %d, %d\n", want.Capacity, want.Used, got.Capacity, got.Used)
	}
	if !maps.EqualFunc(want.Holders, got.Holders, func(x, y queue.Holder) bool {
		since := near(x.Since, y.Since)
		x.Since = y.Since
		return x == y && since
	}) {
		fmt.Fprintf(&b, "holders: %+v vs %+v\n", want.Holders, got.Holders)
	}
	if !expiry(want.Expires, got.Expires) {
		fmt.Fprintf(&b, "field expires: %d vs %d (0: absent)\n", want.Expires, got.Expires)
	}
	if !expiry(want.HashEnd, got.HashEnd) {
		fmt.Fprintf(&b, "hash expires at: %d vs %d (0: never or no hash)\n", want.HashEnd, got.HashEnd)
	}
	if !maps.EqualFunc(want.Leases, got.Leases, near) {
		fmt.Fprintf(&b, "leases: %v vs %v\n", want.Leases, got.Leases)
	}
	if !expiry(want.LeasesEnd, got.LeasesEnd) {
		fmt.Fprintf(&b, "holders set expires at: %d vs %d (0: never or no set)\n", want.LeasesEnd, got.LeasesEnd)
	}
	if !slices.Equal(want.Queue, got.Queue) {
		fmt.Fprintf(&b, "queue: %q vs %q\n", want.Queue, got.Queue)
	}
	if !maps.EqualFunc(want.Deadlines, got.Deadlines, near) {
		fmt.Fprintf(&b, "deadlines: %v vs %v\n", want.Deadlines, got.Deadlines)
	}
	if !maps.EqualFunc(want.Joined, got.Joined, near) {
		fmt.Fprintf(&b, "joined: %v vs %v\n", want.Joined, got.Joined)
	}
	if want.LastToken != got.LastToken || !expiry(want.TokenEnd, got.TokenEnd) {
		fmt.Fprintf(&b, "token counter: %d (expires at %d) vs %d (expires at %d)\n", want.LastToken, want.TokenEnd, got.LastToken, got.TokenEnd)
	}
	if !maps.EqualFunc(want.Receipts, got.Receipts, func(x, y queue.Receipt) bool {
		return sameAnswer(tol, x.Answer, y.Answer) && near(x.ExpiresAt, y.ExpiresAt)
	}) {
		fmt.Fprintf(&b, "receipts: %v vs %v\n", want.Receipts, got.Receipts)
	}
	return b.String()
}

// sameAnswer reports whether two receipts answer alike: the same text, or
// a release's "<count> <wake message>\n..." whose messages' times are
// within tol ms of each other.
func sameAnswer(tol int64, want, got string) bool {
	if want == got {
		return true
	}
	wc, wm, wok := strings.Cut(want, " ")
	gc, gm, gok := strings.Cut(got, " ")
	if !wok || !gok || wc != gc {
		return false
	}
	ws, gs := strings.Split(wm, "\n"), strings.Split(gm, "\n")
	return slices.Equal(sameTimesWithin(tol, ws, gs), ws)
}
