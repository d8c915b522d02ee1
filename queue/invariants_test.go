package queue_test

import (
	"fmt"
	"slices"

	"github.com/fairlock/fairlock/queue"
)

// The invariants the differ checks after every step, on the scripts'
// states: those of each lock alone (checkLock), and those of several
// locks of one server and the tickets waiting in their lines.

// checkLock checks the invariants of one lock that hold after every
// script, in s, against the state before the step and top, the highest
// token any earlier state showed (in the hold or the counter).
//
// The counter expires, so it may be gone (0) while the lock is held, and
// a token is checked against top, not only against the counter: a fresh
// grant (a counter that changed to a token, a hold with another token
// than before) must be above every token issued before it.
func checkLock(prev, s queue.State, top int64) error {
	if err := checkLine(s.Queue, s.Deadlines); err != nil {
		return err
	}
	// An election's values wait beside the line for the candidates in it
	// alone, and a candidate's grant moves its value into the hold.
	for entry := range s.Values {
		if !queue.IsCandidate(entry) || !slices.Contains(s.Queue, entry) {
			return fmt.Errorf("a value beside the line for %q, which is no candidate in line", entry)
		}
	}
	if h := s.Hold; h != nil && queue.IsCandidate(h.Entry) && !h.HasValue {
		return fmt.Errorf("the leadership of %q has no value", h.Entry)
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
	return nil
}

// checkLine checks a lock's line: every entry is queued once and has a
// deadline, and only queued entries have one.
func checkLine(queue []string, deadlines map[string]int64) error {
	seen := map[string]bool{}
	for _, e := range queue {
		if seen[e] {
			return fmt.Errorf("entry %q is queued twice", e)
		}
		seen[e] = true
		if _, ok := deadlines[e]; !ok {
			return fmt.Errorf("entry %q is queued without a deadline", e)
		}
	}
	if len(deadlines) != len(queue) {
		return fmt.Errorf("%d deadlines for %d queued entries", len(deadlines), len(queue))
	}
	return nil
}

// live reports whether entry is a live waiter in the line of the lock
// whose state is s, as prune reads it: it has a deadline after now, and is
// well formed. (A ticket whose lists expired first is dropped by the next
// hand-over that finds it at the head.)
func live(s queue.State, entry string) bool {
	deadline, ok := s.Deadlines[entry]
	if !ok || deadline <= s.Now {
		return false
	}
	if _, _, ok := queue.ParseEntry(entry); !ok {
		return false
	}
	return true
}

// waitsAlone returns the head of a free lock when it is a live waiter of
// that lock alone, which nothing keeps from the lock.
func waitsAlone(s queue.State) (string, bool) {
	if s.Hold != nil || len(s.Queue) == 0 {
		return "", false
	}
	head := s.Queue[0]
	return head, live(s, head) && !queue.IsTicket(head)
}

// checkSettled checks invariant 3 of docs/algorithm.md, as tickets
// change it: the lock is never free while a live waiter heads the queue,
// except between a hold's expiry (which runs no script) and the next
// script that hands the lock over; and a free lock headed by a live
// ticket stays free (the ticket waits for its other locks, and nobody
// passes it). So after a step, every lock the step's script handed over
// (res.handed) is held or free with no live waiter of it alone at its
// head. A ticket's readiness check (ticket_ready) looks no further when
// one of the ticket's locks is held, and else looks at their lines in key
// order and stops at the first that another heads: that lock too is held
// or free with no live waiter of it alone at its head, for a ticket found
// at the head of a lock handed over, and for a waiting ticket's own call
// (res.readied, res.ticket).
func checkSettled(ss []queue.State, keys []string, res result) error {
	settled := func(i int) error {
		if head, ok := waitsAlone(ss[i]); ok {
			return fmt.Errorf("%s is free while %q (deadline %d) heads its line", keys[i], head, ss[i].Deadlines[head])
		}
		return nil
	}
	// firstStop returns the first of locks, all free, that the ticket
	// does not head, where its readiness check stopped; -1 when there is
	// none, or when one of them is held.
	firstStop := func(ticket string, locks []int) int {
		for _, j := range locks {
			if ss[j].Hold != nil {
				return -1
			}
		}
		for _, j := range locks {
			if s := ss[j]; len(s.Queue) == 0 || s.Queue[0] != ticket {
				return j
			}
		}
		return -1
	}
	if j := firstStop(res.ticket, res.readied); j >= 0 {
		if err := settled(j); err != nil {
			return fmt.Errorf("%w, where the ticket %q stopped", err, res.ticket)
		}
	}
	for _, i := range res.handed {
		if err := settled(i); err != nil {
			return err
		}
		s := ss[i]
		if s.Hold != nil || len(s.Queue) == 0 || !live(s, s.Queue[0]) {
			continue
		}
		var locks []int
		for _, key := range s.Tickets[queue.WaiterIDOf(s.Queue[0])].Locks {
			j := slices.Index(keys, key)
			if j < 0 {
				return fmt.Errorf("the ticket %q heading %s names the lock %s, which is none of the run's", s.Queue[0], keys[i], key)
			}
			locks = append(locks, j)
		}
		if j := firstStop(s.Queue[0], locks); j >= 0 {
			if err := settled(j); err != nil {
				return fmt.Errorf("%w, a lock of the ticket %q that heads %s", err, s.Queue[0], keys[i])
			}
		}
	}
	return nil
}

// checkTickets checks, in the states ss after a step and prev before it,
// what tickets promise:
//
//   - All or none: a ticket granted one of its locks in the step was
//     granted every one of them in it (sets gives each ticket's locks).
//   - A ticket holds nothing while it waits: a ticket that holds a lock
//     stands in no line and no lock keeps its list.
//   - Nobody is passed: a lock granted afresh in the step went to the
//     first live waiter of its line; no waiter that was live ahead of it
//     is still in the line.
//   - Two tickets stand in the same order in every line they share; else
//     each could head a line the other waits in, and neither would ever
//     be granted.
func checkTickets(prev, ss []queue.State, keys []string, sets map[string][]int) error {
	fresh := func(i int) bool {
		h, p := ss[i].Hold, prev[i].Hold
		return h != nil && (p == nil || p.Token != h.Token)
	}
	for i, s := range ss {
		if !fresh(i) {
			continue
		}
		if err := notPassed(prev[i], s, keys[i]); err != nil {
			return err
		}
		e := s.Hold.Entry
		if !queue.IsTicket(e) {
			continue
		}
		set, ok := sets[e]
		if !ok || !slices.Contains(set, i) {
			return fmt.Errorf("%s was granted to the ticket %q, whose locks are %v", keys[i], e, set)
		}
		for _, j := range set {
			if !fresh(j) || ss[j].Hold.Entry != e {
				return fmt.Errorf("the ticket %q was granted %s but not %s (hold %+v)", e, keys[i], keys[j], ss[j].Hold)
			}
		}
	}
	for i, s := range ss {
		if s.Hold == nil || !queue.IsTicket(s.Hold.Entry) {
			continue
		}
		e := s.Hold.Entry
		for j, o := range ss {
			if slices.Contains(o.Queue, e) {
				return fmt.Errorf("the ticket %q holds %s and waits in the line of %s", e, keys[i], keys[j])
			}
			if _, ok := o.Tickets[queue.WaiterIDOf(e)]; ok {
				return fmt.Errorf("the ticket %q holds %s and %s keeps its list", e, keys[i], keys[j])
			}
		}
	}
	return sameOrder(ss, keys)
}

// notPassed checks that the fresh grant of a lock, whose state was prev
// before the step and is s after it, went to the first live waiter of its
// line: every entry that was live ahead of the grantee (or anywhere in
// line, for a grantee that was not in it) is gone from the line.
func notPassed(prev, s queue.State, key string) error {
	return passedNobody(prev.Queue, func(e string) bool { return live(prev, e) }, s.Queue, s.Hold.Entry, key)
}

// passedNobody checks that a fresh grant of the lock key to entry passed
// no live waiter: every entry of the line before the step (before) that
// was live (alive) ahead of entry (anywhere in it, for an entry that was
// not in it) is gone from the line after the step (after).
func passedNobody(before []string, alive func(string) bool, after []string, entry, key string) error {
	ahead := before
	if k := slices.Index(before, entry); k >= 0 {
		ahead = before[:k]
	}
	for _, e := range ahead {
		if alive(e) && slices.Contains(after, e) {
			return fmt.Errorf("%s was granted to %q, passing %q, which was live ahead of it and still waits", key, entry, e)
		}
	}
	return nil
}

// sameOrder checks that two tickets stand in the same order in every line
// they share.
func sameOrder(ss []queue.State, keys []string) error {
	before := map[[2]string]int{} // two tickets -> a lock in whose line the first stands before the second
	for i, s := range ss {
		var tickets []string
		for _, e := range s.Queue {
			if queue.IsTicket(e) {
				tickets = append(tickets, e)
			}
		}
		for a, first := range tickets {
			for _, second := range tickets[a+1:] {
				if j, ok := before[[2]string{second, first}]; ok {
					return fmt.Errorf("the tickets %q and %q stand in one order in the line of %s and in the other in that of %s", second, first, keys[j], keys[i])
				}
				before[[2]string{first, second}] = i
			}
		}
	}
	return nil
}
