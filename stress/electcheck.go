package main

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"sort"
	"time"
)

// The check of an election run's observers (-kind election). The
// candidates' attempts are checked as any Mutex's (checkRun): a
// leadership is a hold, bracketed from its Campaign's return to its
// Resign's call, so "one hold at a time" is "at most one leader at any
// instant", the tokens are the terms, and the line is the candidates'.
// What the observers saw is checked here, against the same record:
//
//   - view: every view stands for a state the election could have been
//     in: a leadership's term with its value (the one it campaigned with,
//     or one it proclaimed, even by a call that failed), named with its
//     leader's Client, received after the call that made it began; or no
//     leader. (A fault that undoes writes can elect a candidate a second
//     time: its election undone, its entry still in line; see excuse);
//   - view-order: no observer saw a term lower than one it had seen
//     (Observe's promise), nor, within one term, an older value after a
//     newer one, nor a term again after seeing it end;
//   - lag: once a change had certainly been made (its call returned, or a
//     lease lost had certainly run out), every observer received a view at
//     least as new within -lag;
//   - final-view: once every candidate had ended, every observer's last
//     view was the election's final state: no leader, unless a leadership
//     never ended.
//
// On a quorum (-masters) a Leadership is what a majority of the masters
// holds when a watcher reads them, and a change reaches the masters one
// after another: a read made while a change is on some of them only may
// show it or not, and one begun before a Campaign has committed its term
// shows the term the majority then holds. So view-order is judged by
// what the record proves of the reads (quorumOrder), and a view of a
// leadership read before its Campaign returned may have a provisional
// term (viewRanks).

// Kinds of violations the observers' check reports.
const (
	viewFalse violationKind = "view"       // a view that no state of the election stands for
	viewBack  violationKind = "view-order" // an observer's views went backwards
	viewLag   violationKind = "lag"        // an observer saw a change later than -lag allows
	viewFinal violationKind = "final-view" // an observer's last view was not the election's final state
)

// electionCheck checks what the observers of an election run saw, and
// keeps the figures the report gives of it.
type electionCheck struct {
	Bound  time.Duration // -lag: the most an observer may lag a change
	Lease  time.Duration // -lease: a leadership lost has run out in Redis within it
	Quorum bool          // the elections are on a quorum of masters (-masters)

	// Filled in by check.
	lags      []time.Duration // for every change and every observer watching then: its lag (0: seen before its call returned)
	changes   int             // the changes made certainly (those lags are measured of)
	observers int
	views     int
	givenBack int // leaderships of candidates whose Campaign failed, seen by observers: grants given back
	// On a quorum: views of a leadership under a term below the one its
	// Campaign committed, whose read may have begun before the commit
	// (see viewRanks).
	provisional int
}

// state is one state an election could be in, in the order of the
// election's history: a leadership's term with one of its values, or no
// leader after a leadership (or before the first).
type state struct {
	term   int64
	value  string // "" for no leader
	client string // the leader's Client ID
	lead   *attempt
	end    bool // no leader after lead (or, with a hand-over, the next leadership at once)
	// from: the state did not exist before it (the call that made it
	// began); zero for the end of a leadership that never ended.
	from time.Time
	// by: the state, or a later one, certainly held by then: the call
	// that made it returned, or a lost lease had run out; zero when not
	// certain (no lag is judged of it).
	by   time.Time
	what string // the change, in words
}

// originOf returns the earliest start of the attempts: the times of the
// verdicts are given relative to it.
func originOf(attempts []attempt) time.Time {
	var origin time.Time
	for i := range attempts {
		if origin.IsZero() || attempts[i].Start.Before(origin) {
			origin = attempts[i].Start
		}
	}
	return origin
}

// check checks the observers' records against the attempts, and returns
// the violations found, oldest first.
func (ec *electionCheck) check(attempts []attempt, watches []watch) []violation {
	c := &checker{origin: originOf(attempts)}
	byLock := map[string][]*attempt{}
	for i := range attempts {
		if a := &attempts[i]; a.Type == runElection {
			byLock[a.Lock] = append(byLock[a.Lock], a)
		}
	}
	ws := map[string][]*watch{}
	for i := range watches {
		w := &watches[i]
		ws[w.Lock] = append(ws[w.Lock], w)
		ec.observers++
		ec.views += len(w.Views)
		if w.Err != "" {
			c.add(errored, w.Lock, firstSet(w.End, w.Start), "observer %s: %s", w.Observer, w.Err)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(ws)) {
		slices.SortFunc(ws[name], func(x, y *watch) int { return cmp.Compare(x.Observer, y.Observer) })
		c.election(ec, name, byLock[name], ws[name])
	}
	slices.SortStableFunc(c.found, func(x, y violation) int { return x.At.Compare(y.At) })
	return c.found
}

// window records, on the violation found last, the stretch a fault must
// overlap to explain it (see excuse), and the leadership it is about.
func (c *checker) window(lead *attempt, from, to time.Time) {
	v := &c.found[len(c.found)-1]
	v.hold, v.window = lead, &outage{from, to}
}

// timeline returns the states of the election whose candidates' attempts
// are as, in order, with the index of each value's state. Its
// leaderships are the attempts granted (a leadership with a term), and
// the grants given back that observers saw: a view with the value of a
// candidate whose Campaign failed (ws, for their terms).
func (c *checker) timeline(ec *electionCheck, as []*attempt, ws []*watch) ([]state, map[string]int) {
	byValue := map[string]*attempt{}
	for _, a := range as {
		byValue[a.Value] = a
	}
	type leadership struct {
		a    *attempt
		term int64
	}
	var leads []leadership
	terms := map[int64]*attempt{}
	for _, a := range as {
		if a.Held() && a.Token > 0 {
			leads = append(leads, leadership{a, a.Token})
			terms[a.Token] = a
		}
	}
	ghosts := map[*attempt]bool{}
	for _, w := range ws {
		for _, v := range w.Views {
			a := byValue[v.Value]
			switch {
			case v.Term == 0 || a == nil || ghosts[a] || a.Held() && a.Token > 0:
			case terms[v.Term] != nil:
				continue // the view check reports it: the value of another's term
			default:
				// A Campaign that failed, or whose term could not be
				// read: its grant came as the call ended, and was given
				// back (or its leadership is known by its term only).
				ghosts[a] = true
				terms[v.Term] = a
				leads = append(leads, leadership{a, v.Term})
				if !a.Held() {
					ec.givenBack++
				}
			}
		}
	}
	slices.SortFunc(leads, func(x, y leadership) int { return cmp.Compare(x.term, y.term) })

	states := []state{{end: true, what: "no leader at the start"}}
	index := map[string]int{}
	for _, l := range leads {
		a := l.a
		grant := state{term: l.term, value: a.Value, client: a.Client, lead: a, from: a.Start,
			what: fmt.Sprintf("the election of %s, term %d (value %q)", a.Worker, l.term, a.Value)}
		if a.Held() {
			grant.by = a.Granted
		} else {
			grant.what += ", given back as its Campaign failed"
		}
		index[a.Value] = len(states)
		states = append(states, grant)
		for _, p := range a.Proclaims {
			s := state{term: l.term, value: p.Value, client: a.Client, lead: a, from: p.Start,
				what: fmt.Sprintf("the value %q proclaimed by %s under term %d", p.Value, a.Worker, l.term)}
			if p.Err == "" {
				s.by = p.End
			}
			index[p.Value] = len(states)
			states = append(states, s)
		}
		end := state{term: l.term, lead: a, end: true, what: fmt.Sprintf("the end of term %d (%s)", l.term, a.Worker)}
		switch {
		case !a.Held() || a.LeaseLost:
			end.from = a.Start // its hold may have been gone from Redis at any time
			if a.Held() && !a.Lost.IsZero() {
				// The worker saw the lease lost at Lost: the leadership's
				// context had ended by then, and the lease runs out in
				// Redis within a lease of that (the Client gives the
				// hold up when its renewals go unanswered for five
				// sixths of it).
				end.by = a.Lost.Add(ec.Lease)
				end.what += ", its lease lost"
			}
		case !a.UnlockStart.IsZero():
			end.from = a.UnlockStart
			if !a.ResignFailed && !a.UnlockEnd.IsZero() {
				end.by = a.UnlockEnd
				end.what += ", resigned"
			}
		}
		states = append(states, end)
	}
	return states, index
}

// election checks the observers ws of the election name, whose
// candidates' attempts are as.
func (c *checker) election(ec *electionCheck, name string, as []*attempt, ws []*watch) {
	states, index := c.timeline(ec, as, ws)

	// The ends, by the time from which each may have come, and the
	// latest of them then: a view without a leader received at r stands
	// at best for the latest end that may have come before r.
	type ended struct {
		from time.Time
		rank int
	}
	var ends []ended
	for i, s := range states {
		if s.end && (i == 0 || !s.from.IsZero()) {
			ends = append(ends, ended{s.from, i})
		}
	}
	slices.SortStableFunc(ends, func(x, y ended) int { return x.from.Compare(y.from) })
	for i := 1; i < len(ends); i++ {
		ends[i].rank = max(ends[i].rank, ends[i-1].rank)
	}
	noLeader := func(r time.Time) int {
		i := sort.Search(len(ends), func(i int) bool { return !ends[i].from.Before(r) })
		return ends[max(i-1, 0)].rank
	}
	upTo := func(term int64) int { // the latest state of a term up to term
		return sort.Search(len(states), func(i int) bool { return states[i].term > term }) - 1
	}

	final := lastState(states)
	certain := certainBy(states)
	for _, w := range ws {
		ranks, real := c.viewRanks(ec, w, states, index, noLeader, upTo)
		if ec.Quorum {
			c.quorumOrder(w, states, ranks, real, certain)
		} else {
			c.viewOrder(w, states, ranks)
		}
		c.lag(ec, w, states, ranks)
		c.finalView(w, states, final)
	}
	ec.changes += countBy(states)
}

// certainBy returns a function that gives the latest of states (its
// place) certainly made before t: the greatest place among the states
// whose time by is before t; -1 when there is none.
func certainBy(states []state) func(t time.Time) int {
	type sure struct {
		by   time.Time
		rank int
	}
	var sures []sure
	for i, s := range states {
		if !s.by.IsZero() {
			sures = append(sures, sure{s.by, i})
		}
	}
	slices.SortStableFunc(sures, func(x, y sure) int { return x.by.Compare(y.by) })
	for i := 1; i < len(sures); i++ {
		sures[i].rank = max(sures[i].rank, sures[i-1].rank)
	}
	return func(t time.Time) int {
		i := sort.Search(len(sures), func(i int) bool { return !sures[i].by.Before(t) })
		if i == 0 {
			return -1
		}
		return sures[i-1].rank
	}
}

// countBy counts the states made certainly: the changes whose lag is
// measured.
func countBy(states []state) int {
	n := 0
	for _, s := range states {
		if !s.by.IsZero() {
			n++
		}
	}
	return n
}

// viewRanks returns the place in states of each of w's views, and
// whether each shows a value of a state (received after the call that
// made it began: the read came after that), and reports the views
// that stand for no state: a value nobody campaigned with or proclaimed,
// a term not that value's, a view received before the call that made it
// began, or a leader's Client that is not the candidate's. A view
// without a leader stands, at best, for the latest end that may have
// come before it was received (noLeader); one that stands for nothing,
// for the latest state of its term (upTo).
//
// On a quorum, a view of a leadership may have a term below the one its
// Campaign returned: a read made before the Campaign committed its term
// to a majority finds the term the majority then holds, the q-th
// largest of the tokens the masters drew for it. A read asks every
// master at once and takes each answer as it comes, so one that began
// before the commit may show, besides, a value proclaimed since, from a
// master that answered later. Such a view is provisional, and counted,
// unless the read certainly began after the Campaign returned: an
// earlier view of w stood for a state whose call began after that (the
// watcher's reads are made one after another, each once the one before
// has returned). A term above the committed one is never read, and any
// term goes for a candidate whose Campaign failed, or whose term could
// not be read: none was committed.
func (c *checker) viewRanks(ec *electionCheck, w *watch, states []state, index map[string]int, noLeader func(time.Time) int, upTo func(int64) int) (ranks []int, real []bool) {
	ranks, real = make([]int, len(w.Views)), make([]bool, len(w.Views))
	var readAfter time.Time // w's reads from here on came after it: the latest start of a state an earlier view stood for
	for i, v := range w.Views {
		if v.Term == 0 {
			ranks[i] = noLeader(v.At)
			continue
		}
		j, ok := index[v.Value]
		if !ok {
			ranks[i] = max(upTo(v.Term), 0)
			c.add(viewFalse, w.Lock, v.At, "observer %s received term %d with value %q at %s: no candidate campaigned with that value or proclaimed it",
				w.Observer, v.Term, v.Value, c.t(v.At))
			continue
		}
		ranks[i] = j
		s := &states[j]
		provisional := false
		if ec.Quorum && s.term != v.Term {
			uncommitted := !s.lead.Held() || s.lead.Token <= 0
			provisional = uncommitted || v.Term < s.term && !readAfter.After(s.lead.Granted)
		}
		if provisional {
			ec.provisional++
		}
		switch {
		case s.term != v.Term && !provisional:
			// A state the record does not have: at best the latest of
			// the value's term and the states up to the view's.
			ranks[i] = max(j, upTo(v.Term))
			c.add(viewFalse, w.Lock, v.At, "observer %s received value %q with term %d at %s, where it is the value of term %d (%s)",
				w.Observer, v.Value, v.Term, c.t(v.At), s.term, s.lead.Worker)
			c.window(s.lead, s.from, v.At)
		case !v.At.After(s.from):
			c.add(viewFalse, w.Lock, v.At, "observer %s received term %d with value %q at %s, before %s began at %s",
				w.Observer, v.Term, v.Value, c.t(v.At), s.what, c.t(s.from))
		case v.Client != s.client:
			c.add(viewFalse, w.Lock, v.At, "observer %s received term %d with value %q at %s naming Client %q, where %s's Client is %q",
				w.Observer, v.Term, v.Value, c.t(v.At), v.Client, s.lead.Worker, s.client)
		}
		if v.At.After(s.from) {
			// The read found the value, which the call that made it
			// wrote: the next read began after that call did.
			real[i] = true
			readAfter = later(readAfter, s.from)
		}
	}
	return ranks, real
}

// viewOrder reports where w's views went backwards: a term lower than one
// seen before (never, says Observe), or, within the highest term seen, an
// older value after a newer one, or the term again after a view without a
// leader that followed it. The last two are the states of Redis going
// back, which a fault that undid writes can explain (the window is from
// the newer view's receipt to the older's).
func (c *checker) viewOrder(w *watch, states []state, ranks []int) {
	var top int64 // the highest term seen
	var newest *view
	newestRank := 0
	var gone *view // a view without a leader after newest
	for i := range w.Views {
		v := &w.Views[i]
		if v.Term == 0 {
			if top > 0 {
				gone = v
			}
			continue
		}
		r := ranks[i]
		switch {
		case v.Term < top:
			c.add(viewBack, w.Lock, v.At, "observer %s received term %d at %s, after term %d at %s",
				w.Observer, v.Term, c.t(v.At), top, c.t(newest.At))
			continue
		case v.Term == top && gone != nil:
			c.add(viewBack, w.Lock, v.At, "observer %s received term %d again at %s (value %q), after no leader at %s, which followed that term at %s",
				w.Observer, v.Term, c.t(v.At), v.Value, c.t(gone.At), c.t(newest.At))
			c.window(states[r].lead, newest.At, v.At)
			gone = nil
		case v.Term == top && r < newestRank:
			c.add(viewBack, w.Lock, v.At, "observer %s received value %q of term %d at %s, after its later value %q at %s",
				w.Observer, v.Value, v.Term, c.t(v.At), newest.Value, c.t(newest.At))
			c.window(states[r].lead, newest.At, v.At)
			continue
		}
		if v.Term > top || r >= newestRank {
			top, newest, newestRank, gone = v.Term, v, r, nil
		}
	}
}

// quorumOrder reports, on a quorum, where w's views went backwards as
// far as the record proves: a term lower than one seen before (never,
// says Observe), or a view that stands for a state older than one
// certainly made before w's read of it. On one deployment every read
// shows the latest state, and viewOrder judges any step back; on a
// quorum a read shows what a majority of the masters holds, so a change
// under way, on some masters only, may be read and then not, and a
// majority may hold a candidate's election for a while before its
// Campaign counts it (and lose it again to a candidate ahead of it, by
// a yield). What is certain once its call returned (a Campaign, a
// Proclaim, a Resign, or a lost lease run out) is on a majority, and
// every read made after that finds it, or a later state. A read came
// after the start of every state an earlier view of w stood for (the
// watcher's reads are made one after another), so a view that stands
// for a state older than one made certainly before such a start went
// backwards. The window is from the time the older state's successor
// was certain to the receipt of the view: a fault that undid writes
// then may explain it.
func (c *checker) quorumOrder(w *watch, states []state, ranks []int, real []bool, certain func(time.Time) int) {
	var top int64 // the highest term seen
	var newest *view
	var readAfter time.Time // w's reads from here on came after it
	shown := -1             // the view whose state began at readAfter
	for i := range w.Views {
		v := &w.Views[i]
		r := ranks[i]
		if v.Term != 0 && v.Term < top {
			c.add(viewBack, w.Lock, v.At, "observer %s received term %d at %s, after term %d at %s",
				w.Observer, v.Term, c.t(v.At), top, c.t(newest.At))
			continue
		}
		if k := certain(readAfter); shown >= 0 && k > r {
			s, sk := states[ranks[shown]], states[k]
			what := "no leader"
			if v.Term != 0 {
				what = fmt.Sprintf("term %d with value %q", v.Term, v.Value)
			}
			c.add(viewBack, w.Lock, v.At, "observer %s received %s at %s, a state older than %s, certain since %s; "+
				"its read came after its view of %s (received %s), which began at %s, and a read of a majority after that must find it or a later state",
				w.Observer, what, c.t(v.At), sk.what, c.t(sk.by), s.what, c.t(w.Views[shown].At), c.t(readAfter))
			c.window(sk.lead, sk.by, v.At)
		}
		if v.Term > top {
			top, newest = v.Term, v
		}
		if real[i] && states[r].from.After(readAfter) {
			readAfter, shown = states[r].from, i
		}
	}
}

// showsEndBy reports whether w's latest view received by deadline shows
// no leader while the election certainly had none then, after the state
// of rank or a later one (the state at deadline is an end certain by
// then, with no leadership begun after it by then), and w received no
// view of an older state after deadline. A view without a leader shows
// every end alike, and Observe sends a view only when it differs from
// the last: a leadership that began and ended between two of the
// watcher's reads leaves its observers' view as it was, which is the
// state after it (see Observe's doc).
func showsEndBy(w *watch, states []state, ranks []int, rank int, deadline time.Time) bool {
	k := sort.Search(len(w.Views), func(i int) bool { return w.Views[i].At.After(deadline) }) - 1
	if k < 0 || w.Views[k].Term != 0 {
		return false
	}
	m := -1 // the latest state certain by deadline
	for j := range states {
		if !states[j].by.IsZero() && !states[j].by.After(deadline) {
			m = max(m, j)
		}
	}
	if m < rank || !states[m].end || m+1 < len(states) && !states[m+1].from.After(deadline) {
		return false
	}
	for i := k + 1; i < len(w.Views); i++ {
		if ranks[i] < m {
			return false // an older state, received late
		}
	}
	return true
}

// lag measures how long w took to receive a view at least as new as each
// change made certainly (a state with a time by), from that time, or from
// the start of w when it came later, and reports the changes it took
// longer than the bound for: the first of each stretch in which w lagged,
// with how many more changes it lagged in that stretch. A view is at
// least as new when it stands for that state or a later one (ranks). A
// change w could not be judged on, because it stopped less than the bound
// after, counts only when w saw it before it stopped.
func (c *checker) lag(ec *electionCheck, w *watch, states []state, ranks []int) {
	// best[i]: the latest state that w's views up to i stand for.
	best := make([]int, len(ranks))
	for i, r := range ranks {
		best[i] = r
		if i > 0 {
			best[i] = max(best[i], best[i-1])
		}
	}
	type due struct {
		rank int
		from time.Time
	}
	var dues []due
	for i, s := range states {
		if !s.by.IsZero() {
			dues = append(dues, due{i, later(s.by, w.Start)})
		}
	}
	slices.SortStableFunc(dues, func(x, y due) int { return x.from.Compare(y.from) })

	type stall struct {
		first  due
		seen   time.Time // when w caught up: zero if it never did
		more   int
		viewAt int // w's latest view before the change was due: -1 when none
	}
	var cur *stall
	flush := func() {
		if cur == nil {
			return
		}
		s := &states[cur.first.rank]
		was := "no view yet"
		if cur.viewAt >= 0 {
			v := w.Views[cur.viewAt]
			was = fmt.Sprintf("its latest view term %d, received %s", v.Term, c.t(v.At))
		}
		caught := "had not received one by its end at " + c.t(w.End)
		if !cur.seen.IsZero() {
			caught = fmt.Sprintf("received one only at %s, %.3fs after", c.t(cur.seen), cur.seen.Sub(cur.first.from).Seconds())
		}
		more := ""
		if cur.more > 0 {
			more = fmt.Sprintf("; it lagged %d more change(s) meanwhile", cur.more)
		}
		c.add(viewLag, w.Lock, cur.first.from, "observer %s, due to see %s (certain by %s) within %v, %s (%s)%s",
			w.Observer, s.what, c.t(cur.first.from), ec.Bound, caught, was, more)
		c.window(s.lead, cur.first.from, cur.first.from.Add(ec.Bound))
		cur = nil
	}
	for _, d := range dues {
		if d.from.After(w.End) {
			continue
		}
		i := sort.Search(len(best), func(i int) bool { return best[i] >= d.rank })
		deadline := d.from.Add(ec.Bound)
		var seen time.Time
		if i < len(best) {
			seen = w.Views[i].At
			ec.lags = append(ec.lags, max(seen.Sub(d.from), 0))
		}
		late := !seen.IsZero() && seen.After(deadline) || seen.IsZero() && !w.End.Before(deadline)
		if !late || showsEndBy(w, states, ranks, d.rank, deadline) {
			continue
		}
		if cur != nil && (cur.seen.IsZero() || d.from.Before(cur.seen)) {
			cur.more++
			continue
		}
		flush()
		before := sort.Search(len(w.Views), func(i int) bool { return w.Views[i].At.After(d.from) }) - 1
		cur = &stall{first: d, seen: seen, viewAt: before}
	}
	flush()
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// lastState returns the state the election was left in: the latest
// value of the last leadership when it never ended (a leadership left
// behind), or -1 for no leader.
func lastState(states []state) int {
	last := len(states) - 1
	if last > 0 && states[last].end && states[last].from.IsZero() && states[last].lead.Held() {
		return last - 1
	}
	return -1
}

// finalView reports an observer whose last view, once every candidate
// had ended and it had waited for the final state, was not that state.
// An observer cut short (attempts left behind, or the run interrupted)
// tells nothing of it.
func (c *checker) finalView(w *watch, states []state, final int) {
	if w.Cut || w.Err != "" {
		return
	}
	want := "no leader"
	if final >= 0 {
		want = fmt.Sprintf("term %d (value %q), a leadership that never ended", states[final].term, states[final].value)
	}
	if len(w.Views) == 0 {
		c.add(viewFinal, w.Lock, w.End, "observer %s received no view at all (observing from %s to %s), where the election ended with %s",
			w.Observer, c.t(w.Start), c.t(w.End), want)
		c.window(nil, w.Start, w.End)
		return
	}
	v := w.Views[len(w.Views)-1]
	switch {
	case final < 0 && v.Term == 0:
		return
	case final >= 0 && v.Term == states[final].term:
		return
	}
	last := ""
	for i := len(states) - 1; i > 0; i-- {
		if s := states[i]; s.end && s.lead.Held() {
			last = fmt.Sprintf(" (its last leadership: %s)", s.what)
			break
		}
	}
	c.add(viewFinal, w.Lock, w.End, "observer %s's last view, received %s (told the candidates had ended at %s, stopped at %s), was term %d (value %q), where the election ended with %s%s",
		w.Observer, c.t(v.At), c.t(w.Settle), c.t(w.End), v.Term, v.Value, want, last)
	c.window(nil, w.Settle, w.End)
}
