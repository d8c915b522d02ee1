package main

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// outage is a stretch in which a server may have lost writes it had
// acknowledged: from the SIGKILL sent to a server without persistence
// until its process had exited (-restart-master, -chaos restart-empty and
// kill-primary), or from a SENTINEL FAILOVER until it was done (-chaos
// failover). See fault.lostWrites.
type outage struct {
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
}

// quorumCheck is what the check of a run on a quorum of masters needs
// beyond the history, and what it counts.
type quorumCheck struct {
	Outages []outage    // when a master lost its keys (-restart-master, -chaos restart-empty)
	Tally   bakeryTally // filled by the check
}

// bakeryTally counts the pairs the bakery check looked at, over all locks.
type bakeryTally struct {
	// Pairs (W, X) the rule applies to: W's join had reached a majority
	// before X began, W's Lock had not returned when X began, and W
	// neither gave up nor lost its keys on a master before X's grant.
	Pairs int `json:"pairs"`
	// Passed counts the pairs of which X was granted before W: each a
	// violation (one is reported per grant X, naming the first W).
	Passed int `json:"passed"`
	// AcrossRestart counts the pairs left out because a master lost its
	// keys between W's join and X's grant.
	AcrossRestart int `json:"left_out_restart"`
	// Rejoined counts the waiters that joined more than once (started
	// over with a fresh entry): only their last join counts.
	Rejoined int `json:"rejoined"`
}

// bakeryWaiter is a waiter as the bakery check sees it: from the answer
// of its last join (since; sent when that join round was sent) until its
// Lock returned (end; never for one still waiting at the end).
type bakeryWaiter struct {
	a                *attempt
	sent, since, end time.Time
}

// forever is later than any recorded time.
var forever = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)

// bakery reports grants that passed a waiter the quorum lock's order puts
// ahead of them. The lock promises bakery order: a Lock call whose join
// has reached a majority of the masters is served before every call that
// began after that. So for two attempts W and X of one lock: when W's
// last join was answered by a majority (the EventQueued event's Answered)
// before X began (X's EventWaitStarted, which comes before X sends anything),
// and W was still waiting when X began, W must be granted before X,
// unless
//   - W gave up before X's grant: it gave up at its deadline, so this is
//     only sure when X was granted before that deadline;
//   - W lost its place: a waiter that started over with a fresh entry
//     (another EventQueued) had lost its majority at some moment the record
//     does not show, so only its last join counts;
//   - a master lost its keys (an outage) between the send of W's join and
//     X's grant: W's majority may have counted it.
//
// W was granted before X when its token is lower (tokens rise in grant
// order, which the token check proves). W passed when its token is
// higher, when it was never granted, or when it gave up at a deadline
// after X's grant. Each time brackets its event from the caller's side
// (EventWaitStarted is observed before the doorway is sent, Answered after the
// majority answered, EventGranted after the grant), so only what the record
// proves is reported.
//
// holds are the lock's granted attempts, as and holds of one lock.
func (c *checker) bakery(as, holds []*attempt, q *quorumCheck) {
	var ws []bakeryWaiter
	for _, a := range as {
		if a.Kind != kindLock || len(a.Joins) == 0 {
			continue
		}
		w := bakeryWaiter{a: a, sent: a.Joins[len(a.Joins)-1].Sent, since: a.Joins[len(a.Joins)-1].Answered}
		switch {
		case a.Held():
			w.end = a.Granted
		case a.Outcome == outPending:
			w.end = forever
		case a.Outcome == outGaveUp && !a.Deadline.IsZero():
			w.end = firstSet(a.Ended, a.Deadline)
		default:
			continue // a failure tells nothing
		}
		if len(a.Joins) > 1 {
			q.Tally.Rejoined++
		}
		ws = append(ws, w)
	}
	slices.SortStableFunc(ws, func(x, y bakeryWaiter) int { return x.since.Compare(y.since) })

	xs := make([]*attempt, 0, len(holds))
	for _, h := range holds {
		if h.Token > 0 {
			xs = append(xs, h)
		}
	}
	slices.SortStableFunc(xs, func(x, y *attempt) int { return began(x).Compare(began(y)) })

	var waiting []bakeryWaiter // joined before the current X began, and still waiting then
	next := 0
	for _, x := range xs {
		b := began(x)
		for ; next < len(ws) && ws[next].since.Before(b); next++ {
			waiting = append(waiting, ws[next])
		}
		waiting = slices.DeleteFunc(waiting, func(w bakeryWaiter) bool { return w.end.Before(b) })
		var first *bakeryWaiter
		var how string
		passed := 0
		for i := range waiting {
			w := &waiting[i]
			switch {
			case w.a == x:
				continue
			case w.a.Outcome == outGaveUp && !x.Granted.Before(w.a.Deadline):
				continue // it may have given up first
			case w.a.Held() && w.a.Token <= 0:
				continue // its place in grant order is not known
			case lostKeys(q.Outages, w.sent, x.Granted):
				q.Tally.AcrossRestart++
				continue
			}
			q.Tally.Pairs++
			if what := overtaken(c, w.a, x); what != "" {
				q.Tally.Passed++
				if passed++; first == nil {
					first, how = w, what
				}
			}
		}
		if first != nil {
			c.bakeryPassed(x, first, how, passed-1)
		}
	}
}

// began returns when attempt a certainly had not sent anything yet: its
// EventWaitStarted, or, in a history without it, the time before the call.
func began(a *attempt) time.Time { return firstSet(a.Began, a.Start) }

// lostKeys reports whether an outage overlaps the stretch from from to
// to.
func lostKeys(outages []outage, from, to time.Time) bool {
	for _, o := range outages {
		if !o.From.After(to) && !o.To.Before(from) {
			return true
		}
	}
	return false
}

// overtaken says how grant x passed waiter w, which the bakery order puts
// ahead of it, or returns "" if it did not.
func overtaken(c *checker, w, x *attempt) string {
	switch {
	case w.Held():
		if w.Token > x.Token {
			return fmt.Sprintf("it was granted later (token %d > %d)", w.Token, x.Token)
		}
	case w.Outcome == outPending:
		return "it was never granted"
	case w.Outcome == outGaveUp:
		return fmt.Sprintf("it was still waiting when the other was granted at %s (it gave up at its deadline %s)",
			c.t(x.Granted), c.t(w.Deadline))
	}
	return ""
}

// bakeryPassed reports that grant x passed waiter w (how), and more
// waiters besides.
func (c *checker) bakeryPassed(x *attempt, w *bakeryWaiter, how string, more int) {
	call := "Lock"
	if x.Kind == kindTry {
		call = "TryLock"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s by %s began at %s, after the join of %s had reached a majority (sent %s, answered %s), and was granted at %s (token %d); yet %s",
		call, x.Worker, c.t(began(x)), w.a.Worker, c.t(w.sent), c.t(w.since), c.t(x.Granted), x.Token, how)
	if more > 0 {
		fmt.Fprintf(&b, "; it passed %d more waiter(s)", more)
	}
	c.add(bakeryPass, x.Lock, x.Granted, "%s", b.String())
}
