package queue_test

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/fairlock/fairlock/queue"
)

// How the differ sets the scripts' state beside the model's: the times
// of wake messages to the ms, and on a real server every token through
// its pair (see differ), and then every difference listed.

// sameWakeTimes returns msgs with the time of each wake message replaced
// by the time of the model's wake message at the same place on the same
// lock, when the two are the same ms (see sameTimes). A leader message
// carries no time.
func (d *differ) sameWakeTimes(want, msgs []queue.Wake) []queue.Wake {
	if len(want) != len(msgs) {
		return msgs
	}
	out := slices.Clone(msgs)
	for i := range out {
		if want[i].Lock == out[i].Lock && !want[i].Leader && !out[i].Leader {
			out[i].Message = d.sameTimes([]string{want[i].Message}, []string{out[i].Message})[0]
		}
	}
	return out
}

// sameTimes returns msgs with the time of each wake message that has one
// replaced by the time of the model's message at the same place, when
// the two are the same ms (within the differ's tolerance): the model's
// clock has ms only, the scripts' µs.
func (d *differ) sameTimes(want, msgs []string) []string { return sameTimesWithin(d.tol, want, msgs) }

// sameTimesWithin is sameTimes with tol ms of tolerance.
func sameTimesWithin(tol int64, want, msgs []string) []string {
	if len(want) != len(msgs) {
		return msgs
	}
	out := slices.Clone(msgs)
	for i := range out {
		wHead, wAt, wOK := cutTime(want[i])
		gHead, gAt, gOK := cutTime(out[i])
		if wOK && gOK && wHead == gHead && abs(wAt/1000-gAt/1000) <= tol {
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

// pairTokens records the token of this step's fresh grant of lock i, if
// both sides made one: the model's m.LastToken stands for the scripts'
// s.LastToken. A grant made by one side only is left unpaired, and the
// comparison of the counters reports it.
func (d *differ) pairTokens(i int, m, s queue.State) {
	d.t.Helper()
	if m.LastToken == d.prevM[i].LastToken || s.LastToken == d.prev[i].LastToken {
		return
	}
	if abs(m.LastToken-s.LastToken) > d.tol*queue.TokensPerMs {
		d.fail("token of %s: model %d, scripts %d: more than %d ms of clock apart", d.rig.locks[i].Name, m.LastToken, s.LastToken, d.tol)
	}
	d.tokens[i][s.LastToken] = m.LastToken
}

// translate returns the scripts' states, wake messages and reply to c
// with every token replaced by the model's token of the same grant of
// the same lock. A token without a pair stays as it is, so the
// comparison shows it.
func (d *differ) translate(c call, ss []queue.State, msgs []queue.Wake, reply any) ([]queue.State, []queue.Wake, any) {
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
	// tokens translates the token field of a wake message to entry,
	// published on the channel of lock i: a ticket's is the token of each
	// of its locks, joined with commas.
	tokens := func(i int, entry, field string) string {
		if !strings.Contains(field, ",") {
			return text(i, field)
		}
		each := strings.Split(field, ",")
		for k, t := range each {
			if set := d.sets[entry]; k < len(set) {
				each[k] = text(set[k], t)
			}
		}
		return strings.Join(each, ",")
	}
	wake := func(i int, msg string) string {
		entry, rest, _ := strings.Cut(msg, " ") // "<entry> <token>", then maybe " <µs>"
		if token, at, timed := strings.Cut(rest, " "); timed {
			return entry + " " + tokens(i, entry, token) + " " + at
		} else if rest != "" {
			return entry + " " + tokens(i, entry, rest)
		}
		return msg
	}
	for i, s := range ss {
		s.LastToken = tok(i, s.LastToken)
		if s.Hold != nil {
			h := *s.Hold
			h.Token = tok(i, h.Token)
			s.Hold = &h
		}
		receipts := make(map[string]queue.Receipt, len(s.Receipts))
		for id, r := range s.Receipts {
			if count, msg, ok := strings.Cut(r.Answer, " "); ok { // a release's "0 <wake message>"
				r.Answer = count + " " + wake(i, msg)
			} else if t, count, ok := strings.Cut(r.Answer, ":"); ok { // an acquire's "<token>:<count>"
				r.Answer = text(i, t) + ":" + count
			}
			receipts[id] = r
		}
		s.Receipts = receipts
		ss[i] = s
	}
	idx := d.index()
	out := make([]queue.Wake, len(msgs))
	for k, msg := range msgs {
		out[k] = msg
		if !msg.Leader { // a leader message carries no token
			out[k].Message = wake(idx[msg.Lock], msg.Message)
		}
	}
	if r, ok := reply.(queue.Reply); ok && r.Granted {
		if c.kind == opMulti {
			r.Tokens = slices.Clone(r.Tokens)
			for k := range r.Tokens {
				r.Tokens[k] = tok(c.locks[k], r.Tokens[k])
			}
			r.Token = r.Tokens[0]
		} else {
			r.Token = tok(c.lock, r.Token)
		}
		reply = r
	}
	if r, ok := reply.(queue.Released); ok && len(r.Wakes) > 0 {
		r.Wakes = slices.Clone(r.Wakes)
		for k := range r.Wakes {
			r.Wakes[k] = wake(c.lock, r.Wakes[k])
		}
		reply = r
	}
	if rs, ok := reply.([]queue.Released); ok {
		rs = slices.Clone(rs)
		for k := range rs {
			if len(rs[k].Wakes) > 0 {
				rs[k].Wakes = slices.Clone(rs[k].Wakes)
				for j := range rs[k].Wakes {
					rs[k].Wakes[j] = wake(c.locks[k], rs[k].Wakes[j])
				}
			}
		}
		reply = rs
	}
	return ss, out, reply
}

// holdText shows a hold for a failure, its strings quoted: an owner id
// may hold ':', and a leadership's value anything.
func holdText(h queue.HoldState) string {
	return fmt.Sprintf("{Owner:%q Count:%d Token:%d Entry:%q Since:%d ExpiresAt:%d Value:%q HasValue:%t}",
		h.Owner, h.Count, h.Token, h.Entry, h.Since, h.ExpiresAt, h.Value, h.HasValue)
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
			!near(w.Since, g.Since) || !near(w.ExpiresAt, g.ExpiresAt) || (w.ExpiresAt == 0) != (g.ExpiresAt == 0) ||
			w.Value != g.Value || w.HasValue != g.HasValue {
			fmt.Fprintf(&b, "hold: %s vs %s (ttl %d vs %d)\n", holdText(*w), holdText(*g), w.ExpiresAt-want.Now, g.ExpiresAt-got.Now)
		}
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
	if !maps.Equal(want.Values, got.Values) {
		fmt.Fprintf(&b, "values: %q vs %q\n", want.Values, got.Values)
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
	if !maps.EqualFunc(want.Tickets, got.Tickets, func(x, y queue.TicketList) bool {
		return slices.Equal(x.Locks, y.Locks) && near(x.Joined, y.Joined) && near(x.ExpiresAt, y.ExpiresAt) &&
			(x.ExpiresAt == 0) == (y.ExpiresAt == 0)
	}) {
		fmt.Fprintf(&b, "tickets' keys: %v vs %v\n", want.Tickets, got.Tickets)
	}
	return b.String()
}
