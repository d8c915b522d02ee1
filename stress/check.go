package main

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// violationKind names the property a violation breaks.
type violationKind string

// Kinds of violations. Each is reported only when the recorded times prove
// it: every time brackets its real event from the caller's side.
const (
	overlapped violationKind = "overlap"     // two holds of one lock overlapped (a Mutex's, or a RWMutex's writer and another)
	overHeld   violationKind = "capacity"    // a Semaphore's holds took more permits at once than it has
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
	bakeryPass violationKind = "bakery"      // a quorum lock's grant passed a waiter whose join had reached a majority before it began
)

// violation is one broken property.
type violation struct {
	Kind   violationKind `json:"kind"`
	Lock   string        `json:"lock,omitempty"`
	At     time.Time     `json:"at,omitzero"`
	Detail string        `json:"detail"`
	// Excused names the fault that explains the violation, and how (see
	// excuse); empty when none does. The exit status counts only the
	// violations that are not excused.
	Excused string `json:"excused,omitempty"`

	// What the rules of excuse read: the hold of a lease-lost verdict,
	// or the grant of a fifo or barging verdict and the waiter it
	// passed; for a verdict on an election's observer, the leadership
	// it is about (if any) and the stretch of time a fault must overlap
	// to explain it (see explains). Not set for other verdicts, nor in a
	// worker's report.
	hold, waiter *attempt
	window       *outage
}

func (v violation) String() string {
	s := fmt.Sprintf("%s on %s: %s", v.Kind, v.Lock, v.Detail)
	if v.Lock == "" {
		s = fmt.Sprintf("%s: %s", v.Kind, v.Detail)
	}
	if v.Excused != "" {
		s += " [excused: " + v.Excused + "]"
	}
	return s
}

// check verifies a run's history: exclusive holds (for a Semaphore, no
// more permits held at once than it has; for a RWMutex, no writer beside
// another hold), FIFO grants, no barging, increasing tokens, every
// attempt ended, no lease lost, no error; and for MultiLock attempts, all or none of their names held, taken the way
// the deployment promises (way): on one server with one ticket, granted
// every name at once; on a Cluster one name after another, in one order
// of the names. Each name's line is checked over the Mutex attempts on it
// and the parts of the MultiLock attempts that reached it (a ticket is in
// the line of each of its names). waiterTTL is the clients' waiter TTL: a
// waiter is only sure to keep its place that long after it joined (0:
// forever). It returns the violations found, oldest first.
func check(attempts []attempt, waiterTTL time.Duration, way multiWay) []violation {
	return checkRun(attempts, waiterTTL, way, nil)
}

// checkRun is check, for a run on a quorum of masters when q is not nil:
// the order of each lock's grants is then the quorum lock's bakery order
// (see bakery) instead of the FIFO order of one server's line, and q
// receives the tally of that check.
func checkRun(attempts []attempt, waiterTTL time.Duration, way multiWay, q *quorumCheck) []violation {
	c := checker{quorum: q}
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
		s := scaleOf(as)
		c.exclusive(holds, s)
		c.tokens(holds, s)
		if q != nil {
			c.bakery(as, holds, q)
		} else {
			c.order(as, holds, waiterTTL, s)
		}
	}
	slices.SortStableFunc(c.found, func(x, y violation) int { return x.At.Compare(y.At) })
	return c.found
}

type checker struct {
	origin time.Time // earliest start: times are shown relative to it
	found  []violation
	quorum *quorumCheck // a run on a quorum of masters; nil otherwise
}

func (c *checker) add(kind violationKind, lock string, at time.Time, format string, args ...any) {
	c.found = append(c.found, violation{Kind: kind, Lock: lock, At: at, Detail: fmt.Sprintf(format, args...)})
}

// about records what the rules of excuse read of the violation found
// last: the hold it is about and, for an order verdict, the waiter
// passed.
func (c *checker) about(hold, waiter *attempt) {
	c.found[len(c.found)-1].hold, c.found[len(c.found)-1].waiter = hold, waiter
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
	switch {
	case a.LeaseLost && !a.Held():
		c.add(leaseLost, a.Lock, a.Ended, "%s lost the lease of the leadership it was elected to before its Campaign could commit the term (called %s, failed %s)",
			a.Worker, c.t(a.Start), c.t(a.Ended))
		c.about(a, nil)
	case a.LeaseLost:
		c.add(leaseLost, a.Lock, a.Granted, "%s lost the lease of its hold (granted %s, %s)", a.Worker, c.t(a.Granted), a.tokenText())
		c.about(a, nil)
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

// exclusive reports grants observed while more was certainly held than
// the lock allows (see scale.sweep): for a Mutex, another hold that had
// not yet started to unlock; for a RWMutex, a writer beside another hold;
// for a Semaphore, more permits than it has. holds are sorted by grant.
func (c *checker) exclusive(holds []*attempt, s scale) {
	s.sweep(holds, func(h *attempt, used int64, active map[*attempt]int64) {
		others := make([]*attempt, 0, len(active)-1)
		for a := range active {
			if a != h {
				others = append(others, a)
			}
		}
		slices.SortFunc(others, func(x, y *attempt) int {
			return cmp.Or(x.Granted.Compare(y.Granted), cmp.Compare(x.Token, y.Token))
		})
		switch s.kind {
		case runSemaphore:
			held := make([]string, 0, min(len(others), examplesPerKind))
			for _, a := range others[:min(len(others), examplesPerKind)] {
				held = append(held, fmt.Sprintf("%s %d (granted %s, token %d, release called %s)",
					a.Worker, active[a], c.t(a.Granted), a.Token, c.t(a.UnlockStart)))
			}
			if len(others) > examplesPerKind {
				held = append(held, fmt.Sprintf("and %d more", len(others)-examplesPerKind))
			}
			c.add(overHeld, h.Lock, h.Granted, "%s was granted %d permit(s) at %s (token %d), %d of the %d permits then held, by it and %s",
				h.Worker, h.Weight, c.t(h.Granted), h.Token, used, s.capacity, strings.Join(held, ", "))
		case runRWMutex:
			// The other hold to name: the writer beside a reader, or
			// the hold certainly holding the longest.
			var last *attempt
			for _, a := range others {
				if last == nil || !h.Write && active[a] > active[last] ||
					active[a] == active[last] && certainEnd(a).After(certainEnd(last)) {
					last = a
				}
			}
			c.add(overlapped, h.Lock, h.Granted, "%s was granted %s at %s (token %d) while %s held %s (granted %s, token %d, %s)",
				h.Worker, rwLevel(h, "the write lock", "a read lock"), c.t(h.Granted), h.Token,
				last.Worker, rwLevel(last, "the write lock", "a read lock"), c.t(last.Granted), last.Token, unlockText(c, last))
		default:
			var last *attempt // the hold whose certain end is the latest
			for _, a := range others {
				if last == nil || certainEnd(a).After(certainEnd(last)) {
					last = a
				}
			}
			c.add(overlapped, h.Lock, h.Granted, "%s was granted at %s (token %d) while %s held it (granted %s, token %d, unlock called %s)",
				h.Worker, c.t(h.Granted), h.Token, last.Worker, c.t(last.Granted), last.Token, c.t(last.UnlockStart))
		}
	})
}

// rwLevel returns write for a RWMutex's writer, read for a reader.
func rwLevel(a *attempt, write, read string) string {
	if a.Write {
		return write
	}
	return read
}

// unlockText says when hold a began to end: its Unlock, and a writer's
// downgrade.
func unlockText(c *checker, a *attempt) string {
	s := "unlock called " + c.t(a.UnlockStart)
	if !a.Downgrade.IsZero() {
		s = "downgrade called " + c.t(a.Downgrade) + ", " + s
	}
	return s
}

// tokens reports tokens that repeat or go back in grant order. A hold
// certainly granted before another must have the lower token: one whose
// EventGranted came before the other's notBefore (the other was still waiting
// then), or one that conflicts with the other and began to end before the
// other's EventGranted (see prior). For a Mutex, whose holds all conflict,
// that is every hold granted before that did not overlap it; holds of a
// Semaphore or readers of a RWMutex may hold at once and be seen granted
// in either order.
func (c *checker) tokens(holds []*attempt, s scale) {
	seen := map[int64]*attempt{}
	top := make([]*attempt, len(holds)) // top[i]: the highest token of holds[:i+1]
	p := newPrior(s)
	for i, h := range holds {
		p.visit(h)
		if h.Token > 0 {
			_, before := p.before(h)
			// holds[:k] were granted before h's notBefore.
			k, _ := slices.BinarySearchFunc(holds[:i], notBefore(h), func(a *attempt, t time.Time) int { return a.Granted.Compare(t) })
			if k > 0 && top[k-1] != nil && (before == nil || top[k-1].Token > before.Token) {
				before = top[k-1]
			}
			if first, ok := seen[h.Token]; ok {
				c.add(tokenOrder, h.Lock, h.Granted, "token %d granted twice: to %s at %s and to %s at %s",
					h.Token, first.Worker, c.t(first.Granted), h.Worker, c.t(h.Granted))
			} else if before != nil && h.Token < before.Token {
				c.add(tokenOrder, h.Lock, h.Granted, "token went back from %d (%s, granted %s) to %d (%s, granted %s)",
					before.Token, before.Worker, c.t(before.Granted), h.Token, h.Worker, c.t(h.Granted))
			}
			seen[h.Token] = h
		}
		if h.Token > 0 {
			top[i] = h
		}
		if i > 0 && top[i-1] != nil && (top[i] == nil || top[i-1].Token > top[i].Token) {
			top[i] = top[i-1]
		}
		p.add(h)
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
