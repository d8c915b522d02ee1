package main

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"time"
)

// violationKind names the property a violation breaks.
type violationKind string

// Kinds of violations. Each is reported only when the recorded times prove
// it: every time brackets its real event from the caller's side.
const (
	overlapped violationKind = "overlap"     // two holds of one lock overlapped
	outOfOrder violationKind = "fifo"        // a waiter was passed by one that joined after it
	barged     violationKind = "barging"     // a grant without queueing while someone was in line
	tokenOrder violationKind = "token"       // tokens did not strictly increase in grant order
	leftBehind violationKind = "left-behind" // an attempt never ended
	residual   violationKind = "residue"     // the lock's keys were not clean after the run
	leaseLost  violationKind = "lease-lost"  // a hold's context ended with ErrLeaseLost
	errored    violationKind = "error"       // an unexpected error
	workerDied violationKind = "worker"      // a worker process failed
	partial    violationKind = "all-or-none" // a MultiLock held some of its names, not all or none
	misordered violationKind = "name-order"  // MultiLocks that take names one by one took two in different orders
)

// violation is one broken property.
type violation struct {
	Kind   violationKind `json:"kind"`
	Lock   string        `json:"lock,omitempty"`
	At     time.Time     `json:"at,omitzero"`
	Detail string        `json:"detail"`
}

func (v violation) String() string {
	if v.Lock == "" {
		return fmt.Sprintf("%s: %s", v.Kind, v.Detail)
	}
	return fmt.Sprintf("%s on %s: %s", v.Kind, v.Lock, v.Detail)
}

// check verifies a run's history: exclusive holds, FIFO grants, no barging,
// increasing tokens, every attempt ended, no lease lost, no error; and
// for MultiLock attempts, all or none of their names held, taken the way
// the deployment promises (way): on one server with one ticket, granted
// every name at once; on a Cluster one name after another, in one order
// of the names. Each name's line is checked over the Mutex attempts on it
// and the parts of the MultiLock attempts that reached it (a ticket is in
// the line of each of its names). waiterTTL is the clients' waiter TTL: a
// waiter is only sure to keep its place that long after it joined (0:
// forever). It returns the violations found, oldest first.
func check(attempts []attempt, waiterTTL time.Duration, way multiWay) []violation {
	c := checker{}
	for i := range attempts {
		if c.origin.IsZero() || attempts[i].Start.Before(c.origin) {
			c.origin = attempts[i].Start
		}
	}
	for i := range attempts {
		a := &attempts[i]
		c.ending(a)
		if a.multi() {
			c.taken(a, way)
			c.allOrNone(a)
		}
	}
	if way == oneByOne {
		c.nameOrder(attempts)
	}
	byLock := lines(attempts)
	for _, name := range slices.Sorted(maps.Keys(byLock)) {
		as := byLock[name]
		var holds []*attempt
		for _, a := range as {
			if a.Held() {
				holds = append(holds, a)
			}
		}
		slices.SortStableFunc(holds, func(x, y *attempt) int {
			return cmp.Or(x.Granted.Compare(y.Granted), cmp.Compare(x.Token, y.Token))
		})
		c.exclusive(holds)
		c.tokens(holds)
		c.order(as, holds, waiterTTL)
	}
	slices.SortStableFunc(c.found, func(x, y violation) int { return x.At.Compare(y.At) })
	return c.found
}

type checker struct {
	origin time.Time // earliest start: times are shown relative to it
	found  []violation
}

func (c *checker) add(kind violationKind, lock string, at time.Time, format string, args ...any) {
	c.found = append(c.found, violation{Kind: kind, Lock: lock, At: at, Detail: fmt.Sprintf(format, args...)})
}

// t formats a time relative to the start of the run.
func (c *checker) t(t time.Time) string {
	return fmt.Sprintf("+%.6fs", t.Sub(c.origin).Seconds())
}

// ending checks one attempt on its own: it ended, without error, without
// losing its lease.
func (c *checker) ending(a *attempt) {
	if a.Outcome == outPending {
		switch {
		case !a.Held():
			c.add(leftBehind, a.Lock, a.Start, "%s still waiting at the end (called %s)%s", a.Worker, c.t(a.Start), a.waitingFor())
		case a.UnlockStart.IsZero():
			c.add(leftBehind, a.Lock, a.Granted, "%s still holding at the end (granted %s, %s)", a.Worker, c.t(a.Granted), a.tokenText())
		default:
			c.add(leftBehind, a.Lock, a.UnlockStart, "%s still unlocking at the end (called %s)", a.Worker, c.t(a.UnlockStart))
		}
	}
	if a.LeaseLost {
		c.add(leaseLost, a.Lock, a.Granted, "%s lost the lease of its hold (granted %s, %s)", a.Worker, c.t(a.Granted), a.tokenText())
	}
	if a.Err != "" {
		c.add(errored, a.Lock, firstSet(a.Ended, a.UnlockEnd, a.Granted, a.Start), "%s (%s): %s", a.Worker, a.Kind, a.Err)
	}
}

// certainEnd returns a time before which the hold certainly still held the
// lock: the start of its Unlock. Without a clean Unlock only its grant is
// certain.
func certainEnd(a *attempt) time.Time {
	if a.UnlockStart.IsZero() || a.LeaseLost {
		return a.Granted
	}
	return a.UnlockStart
}

// exclusive reports grants observed while an earlier hold had not yet
// started to unlock. holds are sorted by grant.
func (c *checker) exclusive(holds []*attempt) {
	var last *attempt // the hold whose certain end is the latest so far
	for _, h := range holds {
		if last != nil && h.Granted.Before(certainEnd(last)) {
			c.add(overlapped, h.Lock, h.Granted, "%s was granted at %s (token %d) while %s held it (granted %s, token %d, unlock called %s)",
				h.Worker, c.t(h.Granted), h.Token, last.Worker, c.t(last.Granted), last.Token, c.t(last.UnlockStart))
		}
		if last == nil || certainEnd(h).After(certainEnd(last)) {
			last = h
		}
	}
}

// tokens reports tokens that repeat or go back in grant order. Holds that
// did not overlap were observed in their real order, so their tokens must
// strictly increase.
func (c *checker) tokens(holds []*attempt) {
	seen := map[int64]*attempt{}
	var prev *attempt
	for _, h := range holds {
		if h.Token <= 0 {
			continue // no token read: reported as an error
		}
		if first, ok := seen[h.Token]; ok {
			c.add(tokenOrder, h.Lock, h.Granted, "token %d granted twice: to %s at %s and to %s at %s",
				h.Token, first.Worker, c.t(first.Granted), h.Worker, c.t(h.Granted))
		} else if prev != nil && h.Token < prev.Token {
			c.add(tokenOrder, h.Lock, h.Granted, "token went back from %d (%s, granted %s) to %d (%s, granted %s)",
				prev.Token, prev.Worker, c.t(prev.Granted), h.Token, h.Worker, c.t(h.Granted))
		}
		seen[h.Token] = h
		prev = h
	}
}

// byTime returns the attempts for which at is set, sorted by it.
func byTime(as []*attempt, at func(*attempt) (time.Time, bool)) []*attempt {
	var out []*attempt
	for _, a := range as {
		if _, ok := at(a); ok {
			out = append(out, a)
		}
	}
	slices.SortStableFunc(out, func(x, y *attempt) int {
		tx, _ := at(x)
		ty, _ := at(y)
		return tx.Compare(ty)
	})
	return out
}
