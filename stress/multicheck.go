package main

import (
	"fmt"
	"strings"
	"time"
)

// multiWay is how the MultiLocks of a run take their names, which the
// deployment decides (see fairlock.MultiLock).
type multiWay string

const (
	// oneTicket: on one server, with one entry, a ticket, that joins every
	// name's line at once, holds nothing while it waits, and is granted
	// every name at once.
	oneTicket multiWay = "one ticket"
	// oneByOne: on a Cluster, one name after another in key order, each
	// in its own line, holding the names before the one it waits for.
	oneByOne multiWay = "one name after another"
)

// lines returns, for each lock name, the attempts on its line: each
// Mutex attempt on it as recorded, and each MultiLock attempt that
// reached it as what it did on that name (attempt.onName). Each name's
// line is a Mutex's, among Mutex and MultiLock callers alike: a ticket
// stands in the line of each of its names as one entry, joined inside
// its one join's bracket and granted each name at its one grant, and a
// name's line serves its entries in the order they joined whether they
// are tickets or not, so the checks of a Mutex's line apply to it
// unchanged.
func lines(attempts []attempt) map[string][]*attempt {
	byLock := map[string][]*attempt{}
	for i := range attempts {
		a := &attempts[i]
		if !a.multi() {
			byLock[a.Lock] = append(byLock[a.Lock], a)
			continue
		}
		for j := range a.Parts {
			s := a.onName(j)
			byLock[s.Lock] = append(byLock[s.Lock], s)
		}
	}
	return byLock
}

// onName returns what MultiLock attempt a did on the name of its part j,
// as a Mutex attempt on that name would be recorded, every time still
// bracketing its event:
//   - the call's start, joins, polls and grant are the part's own (a
//     ticket's, the same for each of its names), and so is its token,
//     except that a granted ticket's tokens are those its context
//     carries (the Observer gives only its first name's);
//   - a name granted in an attempt that was granted was held until the
//     attempt's Unlock: its release came after the attempt's UnlockStart;
//   - a name granted in an attempt that failed was given back after the
//     last call of the attempt ended (attempt.givenBackAfter): that is
//     its UnlockStart;
//   - a name not granted ended as the attempt did: it gave up at the
//     attempt's deadline, or was still waiting at the end.
func (a *attempt) onName(j int) *attempt {
	p := &a.Parts[j]
	token := p.Token
	if p.Ticket && a.Held() {
		token = a.Tokens[p.Name]
	}
	s := &attempt{
		Worker: a.Worker + " (MultiLock " + a.Lock + ")", Lock: p.Name, Kind: a.Kind,
		Start: p.Start, Joins: p.Joins, Kept: p.Kept, Deadline: a.Deadline, Push: p.Push,
		Outcome: a.Outcome, LeaseLost: a.LeaseLost,
	}
	switch {
	case p.Granted.IsZero():
		s.Ended = p.Ended
		if a.Held() {
			s.Outcome = outFailed // all-or-none reports it; it tells nothing of the line
		}
	case a.Held():
		s.Granted, s.Token = p.Granted, token
		s.UnlockStart, s.UnlockEnd = a.UnlockStart, a.UnlockEnd
	default:
		s.Granted, s.Token = p.Granted, token
		if a.Outcome != outPending {
			s.Outcome = outGranted
			s.UnlockStart = a.givenBackAfter(p)
		}
	}
	return s
}

// givenBackAfter returns a time before which failed MultiLock attempt a
// still held the name of its granted part p. MultiLock gives back the
// names it took only after the call of a later name failed, on the
// goroutine of that call, so after the Observer, on that goroutine, saw
// the call end; or, when it failed before it began, after the Observer
// saw the grant of the name before it.
func (a *attempt) givenBackAfter(p *part) time.Time {
	last := &a.Parts[len(a.Parts)-1]
	if t := firstSet(last.Ended, last.Granted); t.After(p.Granted) {
		return t
	}
	return p.Granted
}

// allOrNone checks that MultiLock attempt a held all of its names or none
// of them. EventGranted, it must have been granted each name, carry a token
// of each in its context (the grant's own, where the Observer gave it),
// have been granted every name of a ticket at the ticket's one grant,
// and keep each hold until its Unlock (unless a lease was lost, reported
// already). Failed, it must carry no token, and every hold of a name it
// had on the way must have ended before Lock returned: the Observer saw
// each such hold end.
func (c *checker) allOrNone(a *attempt) {
	if a.Outcome == outPending {
		return // left behind: reported already
	}
	if a.Held() {
		var ticket *part // the first name of the attempt's ticket, if it had one
		for _, name := range a.Names {
			p := a.partOf(name)
			switch {
			case p == nil || p.Granted.IsZero():
				c.add(partial, name, a.Granted, "%s's MultiLock of %s was granted at %s without a grant of %s", a.Worker, a.Lock, c.t(a.Granted), name)
			case a.Tokens[name] <= 0:
				c.add(partial, name, a.Granted, "%s's MultiLock of %s was granted at %s, its context carrying no token of %s",
					a.Worker, a.Lock, c.t(a.Granted), name)
			case p.Token != 0 && a.Tokens[name] != p.Token:
				c.add(partial, name, a.Granted, "%s's MultiLock of %s was granted at %s, its context carrying token %d of %s where the grant's was %d",
					a.Worker, a.Lock, c.t(a.Granted), a.Tokens[name], name, p.Token)
			case p.Ticket && ticket != nil && !p.Granted.Equal(ticket.Granted):
				c.add(partial, name, p.Granted, "%s's MultiLock of %s was granted %s at %s and %s at %s: its ticket was not granted every name at once",
					a.Worker, a.Lock, ticket.Name, c.t(ticket.Granted), name, c.t(p.Granted))
			case !a.LeaseLost && !p.Released.IsZero() && p.Released.Before(a.UnlockStart):
				c.add(partial, name, p.Released, "%s's MultiLock of %s no longer held %s (token %d) at %s, before its Unlock at %s",
					a.Worker, a.Lock, name, a.Tokens[name], c.t(p.Released), c.t(a.UnlockStart))
			}
			if p != nil && p.Ticket && ticket == nil && !p.Granted.IsZero() {
				ticket = p
			}
		}
		return
	}
	ended := a.Ended
	if len(a.Tokens) > 0 {
		c.add(partial, a.Lock, ended, "%s's MultiLock of %s failed at %s (%s), yet has %s", a.Worker, a.Lock, c.t(ended), a.Outcome, a.tokenText())
	}
	for i := range a.Parts {
		p := &a.Parts[i]
		switch {
		case !p.Released.IsZero() && !p.Released.After(ended):
		case !p.Granted.IsZero():
			c.add(partial, p.Name, ended, "%s's MultiLock of %s failed at %s (%s), yet its hold of %s (token %d, granted %s) had not ended by then",
				a.Worker, a.Lock, c.t(ended), a.Outcome, p.Name, p.Token, c.t(p.Granted))
		case !p.Released.IsZero():
			// A grant the call could not keep (its context ended as it
			// came): the hold ended unseen by EventGranted, and must have
			// ended before Lock returned all the same.
			c.add(partial, p.Name, ended, "%s's MultiLock of %s failed at %s (%s), yet its hold of %s ended only at %s",
				a.Worker, a.Lock, c.t(ended), a.Outcome, p.Name, c.t(p.Released))
		}
	}
}

// partOf returns the part of name, or nil.
func (a *attempt) partOf(name string) *part {
	for i := range a.Parts {
		if a.Parts[i].Name == name {
			return &a.Parts[i]
		}
	}
	return nil
}

// taken checks that MultiLock attempt a took its names the way the run's
// deployment promises:
//   - oneTicket: with one call, a ticket, whose events named every name
//     of a, in key order (a.Names): it joined every line at once and held
//     nothing while it waited. Names taken in several calls may have
//     been held while the call of another waited, which a ticket never
//     does: an all-or-none verdict;
//   - oneByOne: one name after another, each with a call of its own, in
//     the order a.Names gives (a name-order verdict otherwise; nameOrder
//     compares the attempts).
func (c *checker) taken(a *attempt, way multiWay) {
	if len(a.Parts) == 0 {
		return
	}
	if way == oneTicket {
		whole := len(a.Parts) == len(a.Names)
		for j, p := range a.Parts {
			whole = whole && p.Ticket && p.Call == a.Parts[0].Call && p.Name == a.Names[j]
		}
		if !whole {
			c.add(partial, a.Lock, a.Start, "%s's MultiLock of %s took its names as %s, where one server takes them all with one ticket",
				a.Worker, a.Lock, a.callText())
		}
		return
	}
	for j, p := range a.Parts {
		switch {
		case p.Ticket:
			c.add(misordered, a.Lock, p.Start, "%s's MultiLock of %s took its names as %s, where a Cluster takes them one after another",
				a.Worker, a.Lock, a.callText())
			return
		case j >= len(a.Names) || p.Name != a.Names[j]:
			c.add(misordered, p.Name, p.Start, "%s's MultiLock of %s took %s as its name number %d", a.Worker, a.Lock, p.Name, j+1)
			return
		}
	}
}

// callText describes the calls of MultiLock attempt a, in the order they
// began: "a ticket of a, b" or "a call of a, then a call of b".
func (a *attempt) callText() string {
	var calls []string
	for j := 0; j < len(a.Parts); {
		k := j + 1
		for k < len(a.Parts) && a.Parts[k].Call == a.Parts[j].Call {
			k++
		}
		what := "a call of "
		if a.Parts[j].Ticket {
			what = "a ticket of "
		}
		names := make([]string, 0, k-j)
		for _, p := range a.Parts[j:k] {
			names = append(names, p.Name)
		}
		calls = append(calls, what+strings.Join(names, ", "))
		j = k
	}
	return strings.Join(calls, ", then ")
}

// nameOrder checks, for MultiLocks that take their names one after
// another (oneByOne), that no two attempts put two names in opposite
// orders. That one order is what keeps overlapping MultiLocks from
// deadlocking.
func (c *checker) nameOrder(attempts []attempt) {
	type pair struct{ first, then string }
	first := map[pair]*attempt{} // the first attempt seen to take first before then
	reported := map[pair]bool{}
	for i := range attempts {
		a := &attempts[i]
		if !a.multi() {
			continue
		}
		for j, x := range a.Names {
			for _, y := range a.Names[j+1:] {
				if other, ok := first[pair{y, x}]; ok && !reported[pair{y, x}] {
					reported[pair{y, x}] = true
					c.add(misordered, x, a.Start, "%s's MultiLock of %s takes %s before %s, %s's of %s the other way round",
						a.Worker, a.Lock, x, y, other.Worker, other.Lock)
				}
				if _, ok := first[pair{x, y}]; !ok {
					first[pair{x, y}] = a
				}
			}
		}
	}
}

// tokenText describes the attempt's fencing tokens: "token 5", or a
// MultiLock's "tokens a 5, b 9".
func (a *attempt) tokenText() string {
	if !a.multi() {
		return fmt.Sprintf("token %d", a.Token)
	}
	parts := make([]string, 0, len(a.Names))
	for _, name := range a.Names {
		if t, ok := a.Tokens[name]; ok {
			parts = append(parts, fmt.Sprintf("%s %d", name, t))
		}
	}
	return "tokens " + strings.Join(parts, ", ")
}

// waitingFor describes, for a MultiLock attempt still waiting, the names
// it held and the one it waited for, or its ticket; "" for a Mutex
// attempt.
func (a *attempt) waitingFor() string {
	if !a.multi() {
		return ""
	}
	if n := len(a.Parts); n > 0 && a.Parts[n-1].Ticket && a.Parts[n-1].Granted.IsZero() {
		return "; holding none of its names, waiting for them with one ticket"
	}
	var held []string
	waiting := ""
	for _, p := range a.Parts {
		if p.Granted.IsZero() {
			waiting = p.Name
		} else {
			held = append(held, p.Name)
		}
	}
	s := "; holding " + strings.Join(held, ", ")
	if len(held) == 0 {
		s = "; holding none of its names"
	}
	if waiting != "" {
		s += ", waiting for " + waiting
	}
	return s
}
