package queue_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock/fairlock/lua"
	"github.com/fairlock/fairlock/queue"
)

// qdiffer applies each call to the quorum model and to the scripts on a
// real redis-server, and compares the replies, the whole state (the
// candidates' values beside the line and the hold's value and vseq with
// the rest) and the messages on the wake and leader channels, in the
// order they were published, after every step, then checks the
// invariants (see checkQuorum).
//
// Time. The scripts read the server's clock plus the skew named in each
// call; keys expire on the server's clock alone. The differ moves the
// scripts' clock with the skew (in whole ms, so the ms the scripts read
// is the server's plus the skew's), and never lets a key's expiry or a
// waiter's deadline fall near a time a step may read: before each step,
// a key due within qguard ms lapses (it is deleted on the server and
// dropped from the model, as its expiry would), and the scripts' clock
// jumps over any deadline due within qguard ms. Each script runs in one
// pipeline between two readings of the server's clock; the model runs at
// the ms the script read (qtry and qjoin answer it), or at each ms
// between the readings until one agrees. Times that count from the
// server's ms as a command runs (PEXPIRE, PX) are compared within qtol ms.
type qdiffer struct {
	t      testing.TB
	ctx    context.Context
	rig    *qrig
	model  *queue.QuorumModel
	world  *qworld
	skew   int64 // µs the scripts' clock runs ahead of the server's: a multiple of 1000, never falling
	readAt int64 // the server's time (ms) when the state was last read
	prev   queue.QuorumState
	top    int64 // the highest token counter seen since it last lapsed
	about  string
	log    []string
}

const (
	qguard = 5000 // ms
	qtol   = 200  // ms
)

// newQDiffer returns a differ of the rig's lock, which has never been
// used, with the scripts' clock skew µs ahead of the server's.
func newQDiffer(t testing.TB, r *qrig, skew int64, about string) *qdiffer {
	d := &qdiffer{t: t, ctx: context.Background(), rig: r, world: newQWorld(), skew: skew, about: about}
	s, _, err := r.state(d.ctx)
	if err != nil {
		t.Fatalf("reading the state: %v", err)
	}
	d.model, d.readAt, d.prev = queue.NewQuorumModel(s.Now), s.Now, s
	return d
}

// fail stops the run with the calls that led to the failure.
func (d *qdiffer) fail(format string, args ...any) {
	d.t.Helper()
	shown := d.log[max(len(d.log)-shownCalls, 0):]
	d.t.Fatalf("%s\nafter %d calls, the last %d:\n%s\n%s", fmt.Sprintf(format, args...),
		len(d.log), len(shown), strings.Join(shown, "\n"), d.about)
}

// scriptsNow is the scripts' clock (ms) as of the last reading.
func (d *qdiffer) scriptsNow() int64 { return d.readAt + d.skew/1000 }

// run decodes ops from src until it runs out or steps calls were made.
func (d *qdiffer) run(src source, steps int) {
	d.t.Helper()
	for len(d.log) < steps {
		o, ok := d.world.next(src)
		if !ok {
			return
		}
		if c, ok := d.world.resolve(o, d.model.State(), d.scriptsNow()); ok {
			d.step(c)
		}
	}
}

// step applies one call to both sides and compares them.
func (d *qdiffer) step(c qcall) {
	d.t.Helper()
	switch c.kind {
	case qAdvance:
		d.skew += c.d * 1000
		d.log = append(d.log, fmt.Sprintf("%4d  %v", len(d.log)+1, c))
		return
	case qLapse:
		d.lapse(c)
		return
	}
	d.guard()
	d.log = append(d.log, fmt.Sprintf("%4d  %v", len(d.log)+1, c))
	cmd, from, to, err := d.rig.run(d.ctx, d.scriptCall(c))
	if err != nil {
		d.fail("the call failed: %v", err)
	}
	got, err := readQuorum(c, cmd)
	if err != nil {
		d.fail("the script failed: %v", err)
	}
	s, msgs, err := d.rig.state(d.ctx)
	if err != nil {
		d.fail("reading the state: %v", err)
	}
	d.readAt = s.Now
	// The ms the script read: answered, or one between the readings.
	from, to = from/1000, to/1000
	if r, ok := got.(queue.QuorumReply); ok && (c.kind == qTry || c.kind == qReenter || c.kind == qJoin || c.kind == qYield) {
		from = floorDiv(r.Now-d.skew, 1000)
		to = from
	}
	var first string
	for at := from; at <= to; at++ {
		m := d.model.Clone()
		if at < m.Now() {
			d.fail("the server's clock read %d ms, before %d", at, m.Now())
		}
		m.Advance(at - m.Now())
		want := d.apply(m, c)
		diff := d.diff(want, got, m.State(), s, m.Drain(), msgs)
		if diff == "" {
			d.model = m
			d.log[len(d.log)-1] += fmt.Sprintf(" -> %+v", want)
			if err := checkQuorum(d.prev, s, c, got, at+d.skew/1000, d.top); err != nil {
				d.fail("invariant broken: %v\nstate: %+v", err, s)
			}
			d.seen(s)
			return
		}
		if first == "" {
			first = diff
		}
	}
	d.fail("model and scripts differ (model vs scripts):\n%s", first)
}

// seen takes s as the state after the step.
func (d *qdiffer) seen(s queue.QuorumState) {
	d.prev = s
	d.top = max(d.top, s.Counter)
}

// guard keeps every expiry and deadline away from the times the next
// step may read (see qdiffer).
func (d *qdiffer) guard() {
	d.t.Helper()
	s := d.model.State()
	soon := d.readAt + qguard
	due := func(at int64) bool { return at != 0 && at <= soon }
	if s.Hold != nil && due(s.Hold.ExpiresAt) {
		d.lapse(qcall{kind: qLapse, lapse: queue.LapseHold})
	}
	if s.Counter != 0 && due(s.CounterAt) {
		d.lapse(qcall{kind: qLapse, lapse: queue.LapseCounter})
	}
	if s.Ticket != 0 && due(s.TicketAt) {
		d.lapse(qcall{kind: qLapse, lapse: queue.LapseTicket})
	}
	for _, id := range slices.Sorted(maps.Keys(s.Gone)) {
		if due(s.Gone[id]) {
			d.lapse(qcall{kind: qLapse, lapse: queue.LapseGone, lapseID: id})
		}
	}
	for _, id := range slices.Sorted(maps.Keys(s.Receipts)) {
		if due(s.Receipts[id].ExpiresAt) {
			d.lapse(qcall{kind: qLapse, lapse: queue.LapseReceipt, lapseID: id})
		}
	}
	for {
		now, next := d.scriptsNow(), int64(0)
		for _, dl := range s.Deadlines {
			if dl > now && dl <= now+qguard {
				next = max(next, dl)
			}
		}
		if next == 0 {
			return
		}
		d.step(qcall{kind: qAdvance, d: next + qguard - now})
	}
}

// lapse ends a key on both sides, as its expiry would.
func (d *qdiffer) lapse(c qcall) {
	d.t.Helper()
	d.log = append(d.log, fmt.Sprintf("%4d  %v", len(d.log)+1, c))
	k := d.rig.k
	key := map[string]string{queue.LapseHold: k.Lock, queue.LapseCounter: k.Token, queue.LapseTicket: k.Ticket,
		queue.LapseGone: k.Gone(c.lapseID), queue.LapseReceipt: k.Call(c.lapseID)}[c.lapse]
	if err := d.rig.del(d.ctx, key); err != nil {
		d.fail("DEL %s: %v", key, err)
	}
	d.model.Lapse(c.lapse, c.lapseID)
	if c.lapse == queue.LapseCounter {
		d.top = 0
	}
	s, msgs, err := d.rig.state(d.ctx)
	if err != nil {
		d.fail("reading the state: %v", err)
	}
	d.readAt = s.Now
	d.model.Advance(max(s.Now-d.model.Now(), 0))
	if diff := d.diff(nil, nil, d.model.State(), s, d.model.Drain(), msgs); diff != "" {
		d.fail("model and scripts differ (model vs scripts):\n%s", diff)
	}
	d.seen(s)
}

// scriptCall is c through the bindings of package lua.
func (d *qdiffer) scriptCall(c qcall) lua.Call {
	k, s, skew := d.rig.k, lua.Classic, d.skew
	switch c.kind {
	case qTry, qReenter:
		return s.QTry(k, c.id, c.owner, c.entry, c.lease, c.ttl, c.mode, c.receiptTTL, skew).WithValue(c.value)
	case qJoin, qYield:
		return s.QJoin(k, c.owner, c.entry, c.lease, c.ttl, c.ticket, c.yield, skew).WithValue(c.value)
	case qCancel:
		return s.QCancel(k, c.entry, c.ttl, c.tomb, skew)
	case qRelease:
		return s.QRelease(k, c.id, c.owner, c.entry, c.t, c.lease, c.last, c.ttl, c.tomb, c.receiptTTL, skew)
	case qRenew:
		return lua.QRenew(k, c.owner, c.lease)
	case qCommit:
		return s.QCommit(k, c.owner, c.t, c.lease, c.ttl, skew)
	case qForce:
		return s.QForce(k, c.ttl, skew)
	case qProclaim:
		return s.QProclaim(k, c.owner, c.entry, c.value, c.t)
	}
	panic(fmt.Sprintf("no script for %v", c))
}

// apply is c on the model m.
func (d *qdiffer) apply(m *queue.QuorumModel, c qcall) any {
	skew := d.skew
	switch c.kind {
	case qTry, qReenter:
		return m.QTry(c.id, c.owner, c.entry, c.lease, c.ttl, c.mode, c.receiptTTL, skew, c.value)
	case qJoin, qYield:
		return m.QJoin(c.owner, c.entry, c.lease, c.ttl, c.ticket, c.yield, skew, c.value)
	case qCancel:
		return m.QCancel(c.entry, c.ttl, c.tomb, skew)
	case qRelease:
		return m.QRelease(c.id, c.owner, c.entry, c.t, c.lease, c.last, c.ttl, c.tomb, c.receiptTTL, skew)
	case qRenew:
		return m.QRenew(c.owner, c.lease)
	case qCommit:
		return m.QCommit(c.owner, c.t, c.lease, c.ttl, skew)
	case qForce:
		return m.QForce(c.ttl, skew)
	case qProclaim:
		return m.QProclaim(c.owner, c.entry, c.value, c.t)
	}
	panic(fmt.Sprintf("no model of %v", c))
}

// readQuorum reads the reply of c's script in the model's terms.
func readQuorum(c qcall, cmd *redis.Cmd) (any, error) {
	var read func(*redis.Cmd) (lua.QReply, error)
	switch c.kind {
	case qCancel, qForce, qProclaim:
		return lua.ReadFlag(cmd)
	case qTry, qReenter:
		read = lua.ReadQTry
	case qJoin, qYield:
		read = lua.ReadQJoin
	case qRelease:
		read = lua.ReadQRelease
	case qRenew:
		read = lua.ReadQRenew
	case qCommit:
		read = lua.ReadQCommit
	}
	r, err := read(cmd)
	return queue.QuorumReply{State: int(r.State), Token: r.Token, Count: r.Count, Ticket: r.Ticket, Now: r.Now,
		Counter: r.Counter, Lower: r.Lower, Hint: r.Hint}, err
}

// diff lists the differences between the model's side of a step (its
// reply, state, and wake and leader messages) and the scripts'; "" when
// they agree. Times the scripts answer or publish in µs are compared to
// the ms, a hint that follows a hold's PTTL within qtol.
func (d *qdiffer) diff(want, got any, ws, gs queue.QuorumState, wmsgs, gmsgs []queue.Wake) string {
	var b strings.Builder
	if w, ok := want.(queue.QuorumReply); ok {
		g := got.(queue.QuorumReply)
		w.Now, g.Now = floorDiv(w.Now, 1000), floorDiv(g.Now, 1000)
		if w.State == 0 && abs(w.Hint-g.Hint) <= qtol {
			g.Hint = w.Hint
		}
		want, got = w, g
	}
	if want != got {
		fmt.Fprintf(&b, "reply: %+v vs %+v\n", want, got)
	}
	b.WriteString(diffQuorumState(ws, gs))
	if !slices.Equal(msToMs(wmsgs), msToMs(gmsgs)) {
		fmt.Fprintf(&b, "messages: %s vs %s\n", qshown(wmsgs), qshown(gmsgs))
	}
	return b.String()
}

// msToMs returns messages with the times (µs) of wake messages cut to the
// ms. A leader message carries no time.
func msToMs(msgs []queue.Wake) []queue.Wake {
	out := slices.Clone(msgs)
	for i, m := range out {
		if head, at, ok := cutTime(m.Message); ok && !m.Leader {
			out[i].Message = fmt.Sprintf("%s %d", head, floorDiv(at, 1000))
		}
	}
	return out
}

// diffQuorumState lists the differences between two states of the lock,
// with qtol ms of slack on expiries; "" when they agree.
func diffQuorumState(want, got queue.QuorumState) string {
	var b strings.Builder
	near := func(x, y int64) bool { return abs(x-y) <= qtol && (x == 0) == (y == 0) }
	switch w, g := want.Hold, got.Hold; {
	case w == nil && g == nil:
	case w == nil || g == nil:
		fmt.Fprintf(&b, "hold: %s vs %s\n", qholdText(w), qholdText(g))
	default:
		wh, gh := *w, *g
		gh.ExpiresAt = wh.ExpiresAt
		if wh != gh || !near(w.ExpiresAt, g.ExpiresAt) {
			fmt.Fprintf(&b, "hold: %s vs %s\n", qholdText(w), qholdText(g))
		}
	}
	if !maps.Equal(want.Values, got.Values) {
		fmt.Fprintf(&b, "values: %q vs %q\n", want.Values, got.Values)
	}
	if !slices.Equal(want.Queue, got.Queue) || !maps.Equal(want.Tickets, got.Tickets) {
		fmt.Fprintf(&b, "line: %q %v vs %q %v\n", want.Queue, want.Tickets, got.Queue, got.Tickets)
	}
	if !maps.Equal(want.Deadlines, got.Deadlines) {
		fmt.Fprintf(&b, "deadlines: %v vs %v\n", want.Deadlines, got.Deadlines)
	}
	if want.Counter != got.Counter || !near(want.CounterAt, got.CounterAt) {
		fmt.Fprintf(&b, "token counter: %d until %d vs %d until %d\n", want.Counter, want.CounterAt, got.Counter, got.CounterAt)
	}
	if want.Ticket != got.Ticket || !near(want.TicketAt, got.TicketAt) {
		fmt.Fprintf(&b, "ticket counter: %d until %d vs %d until %d\n", want.Ticket, want.TicketAt, got.Ticket, got.TicketAt)
	}
	diffKeys(&b, "tombstone", want.Gone, got.Gone, near)
	diffKeys(&b, "receipt", want.Receipts, got.Receipts, func(x, y queue.Receipt) bool {
		return x.Answer == y.Answer && near(x.ExpiresAt, y.ExpiresAt)
	})
	return b.String()
}

// qshown lists a quorum lock's messages for a failure, each quoted, and
// marked when it went out on the leader channel.
func qshown(msgs []queue.Wake) string {
	each := make([]string, len(msgs))
	for i, w := range msgs {
		each[i] = fmt.Sprintf("%q", w.Message)
		if w.Leader {
			each[i] = "(leader) " + each[i]
		}
	}
	return "[" + strings.Join(each, ", ") + "]"
}

// qholdText shows a quorum hold for a failure, its strings quoted (see
// holdText), or <nil>.
func qholdText(h *queue.QuorumHold) string {
	if h == nil {
		return "<nil>"
	}
	return fmt.Sprintf("{%s Ticket:%d Ticketed:%t Inquired:%q Expires:%d Vseq:%d HasVseq:%t}",
		holdText(h.HoldState), h.Ticket, h.Ticketed, h.Inquired, h.Expires, h.Vseq, h.HasVseq)
}

// diffKeys writes to b each key of want and got whose values differ by
// same, or that only one of them has.
func diffKeys[V any](b *strings.Builder, what string, want, got map[string]V, same func(x, y V) bool) {
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if g, ok := got[k]; !ok || !same(want[k], g) {
			fmt.Fprintf(b, "%s %s: %v vs %v\n", what, k, want[k], g)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(got)) {
		if _, ok := want[k]; !ok {
			fmt.Fprintf(b, "%s %s: none vs %v\n", what, k, got[k])
		}
	}
}

// floorDiv is Lua's math.floor(a / b) for b > 0.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}
