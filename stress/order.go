package main

import (
	"fmt"
	"slices"
	"time"

	"github.com/fairlock/fairlock/queue"
)

// queuedSince returns when a waiter certainly had its place in line: the
// answer of its join. Only waiters that joined once and then were granted,
// gave up at a known deadline, or were still waiting at the end count:
// one that joined again had lost its place in between, and one that failed
// tells nothing.
func queuedSince(a *attempt) (time.Time, bool) {
	if a.Kind != kindLock || len(a.Joins) != 1 {
		return time.Time{}, false
	}
	switch {
	case a.Held(), a.Outcome == outPending, a.Outcome == outGaveUp && !a.Deadline.IsZero():
		return a.Joins[0].Answered, true
	}
	return time.Time{}, false
}

// order reports grants that passed a waiter certainly ahead in line.
//
// A waiter W certainly had its place from the answer of its join until
// keptUntil(W): every answered poll set its deadline to the TTL after the
// script ran, and only a waiter whose deadline passed is dropped. (A
// waiter stalled for longer than the TTL may be dropped and, finding the
// line empty, be granted without joining again: attempt.keep stops the
// certain window at such a stall.)
//
// W is ahead of a grant G when W's join was answered before G took its
// place. A grant that joined the queue took it when it sent its last join.
// One that never joined (TryLock, or Lock granted without waiting) took
// the lock in one script run, after its call started and after every
// earlier hold started to unlock. If G's grant was observed while W
// certainly had its place, G passed W when W was granted after G (higher
// token), or W was never granted, or W gave up after G's grant (its
// deadline came later). Passing a waiter without joining is barging;
// after joining, a FIFO violation.
//
// The lines of a Semaphore and a RWMutex serve their waiters in the order
// they joined, as a Mutex's does, and grant several at once when they
// fit, but passedBy counts with that (see it).
//
// holds are sorted by grant. ttl 0 means waiters never lose their place.
func (c *checker) order(as, holds []*attempt, ttl time.Duration, s scale) {
	waiters := byTime(as, queuedSince)
	since := make([]time.Time, len(waiters))
	for i, w := range waiters {
		since[i], _ = queuedSince(w)
	}
	var longest time.Duration // the longest certain window of any waiter
	for i, w := range waiters {
		longest = max(longest, keptUntil(w, ttl).Sub(since[i]))
	}
	placed := places(holds, s)
	var writers []int64 // the tokens of a RWMutex's writers, in order
	for _, h := range holds {
		if h.Write && h.Token > 0 {
			writers = append(writers, h.Token)
		}
	}
	slices.Sort(writers)
	for _, g := range holds {
		if g.Token <= 0 {
			continue
		}
		// Waiters ahead of g: joined before g took its place, and (with
		// a TTL) still certainly in line when g was granted.
		hi, _ := slices.BinarySearchFunc(since, placed[g], time.Time.Compare)
		lo := 0
		if ttl > 0 {
			lo, _ = slices.BinarySearchFunc(since[:hi], g.Granted.Add(-longest), time.Time.Compare)
		}
		for _, w := range waiters[lo:hi] {
			if w == g || (ttl > 0 && !g.Granted.Before(keptUntil(w, ttl))) {
				continue
			}
			if what := passedBy(c, w, g, s, writers); what != "" {
				c.passed(g, placed[g], w, what)
				break
			}
		}
	}
}

// keptUntil returns until when waiter w certainly kept its place: the
// window its polls kept open (attempt.Kept), or, when none was recorded,
// the TTL after its join was sent.
func keptUntil(w *attempt, ttl time.Duration) time.Time {
	if !w.Kept.IsZero() {
		return w.Kept
	}
	return w.Joins[0].Sent.Add(ttl)
}

// passedBy says how grant g passed waiter w, which was certainly in line
// ahead of it when it was granted, or returns "" if it did not:
//   - w was granted after g: its token is higher. Two readers of a
//     RWMutex granted together in one batch may have their tokens in any
//     order, so for them a higher token counts only when a writer's token
//     lies between the two: a writer is never granted with readers, so
//     they were granted by different script runs;
//   - w was never granted;
//   - w gave up at a deadline after g's grant: it was still in line then.
//     Only when w and g conflict (see scale): a waiter of a Semaphore or
//     a reader may have been granted with g or before it and have given
//     the grant back as it gave up, unseen;
//   - w sent a poll after g's grant that left it in line: it was still
//     waiting then, whatever came after.
func passedBy(c *checker, w, g *attempt, s scale, writers []int64) string {
	switch {
	case w.Held():
		if w.Token <= g.Token {
			break
		}
		if s.strict(w, g) {
			return fmt.Sprintf("it was granted later (token %d > %d)", w.Token, g.Token)
		}
		if i, _ := slices.BinarySearch(writers, g.Token+1); i < len(writers) && writers[i] < w.Token {
			return fmt.Sprintf("it was granted later (token %d > %d), after a writer's grant between them (token %d)", w.Token, g.Token, writers[i])
		}
	case w.Outcome == outPending:
		return "it was never granted"
	case s.conflict(s.weight(w), s.weight(g)) && g.Granted.Before(w.Deadline):
		return fmt.Sprintf("it was still in line when the other was granted at %s (it gave up at its deadline %s)",
			c.t(g.Granted), c.t(w.Deadline))
	}
	if w.Polled.After(g.Granted) {
		return fmt.Sprintf("a poll of it sent at %s, after the other was granted at %s, found it still in line",
			c.t(w.Polled), c.t(g.Granted))
	}
	return ""
}

// places returns when each hold took its place: its last join sent, or,
// when it never joined, the latest of its start and the certain ends of
// the holds that conflict with it and were granted before it (see
// prior): for a Mutex every one, unless it overlapped them (that is
// reported already, and proves nothing about order).
func places(holds []*attempt, s scale) map[*attempt]time.Time {
	placed := make(map[*attempt]time.Time, len(holds))
	p := newPrior(s)
	for _, h := range holds {
		p.visit(h)
		at := h.Entered()
		if before, _ := p.before(h); len(h.Joins) == 0 && before.After(at) {
			at = before
		}
		placed[h] = at
		p.add(h)
	}
	return placed
}

// passed reports that grant g, placed at place, passed waiter w.
func (c *checker) passed(g *attempt, place time.Time, w *attempt, what string) {
	since := w.Joins[0].Answered
	if len(g.Joins) > 0 {
		c.add(outOfOrder, g.Lock, g.Granted, "%s joined the queue before %s (join answered %s, the other's sent %s), yet %s",
			w.Worker, g.Worker, c.t(since), c.t(g.Entered()), what)
		c.about(g, w)
		return
	}
	call := "TryLock"
	if g.Kind == kindLock {
		call = "Lock (without queueing)"
	}
	c.add(barged, g.Lock, g.Granted, "%s by %s, called %s, was granted (token %d, not before %s) while %s was in line (joined %s), and %s",
		call, g.Worker, c.t(g.Start), g.Token, c.t(place), w.Worker, c.t(since), what)
	c.about(g, w)
}

// residue reports what a lock keeps in Redis after every client is closed:
// there must be no hold, no waiter and no stray deadline.
func residue(s queue.Snapshot) []violation {
	var out []violation
	add := func(format string, args ...any) {
		out = append(out, violation{Kind: residual, Lock: s.Name, At: s.Now, Detail: fmt.Sprintf(format, args...)})
	}
	if s.Held {
		add("still held after the run by %s (token %d, %d level(s), lease left %v)", s.Owner, s.Token, s.Count, s.TTL)
	}
	if n := len(s.Waiters); n > 0 {
		add("%d waiter(s) left in the queue after the run, first %s", n, s.Waiters[0].Entry)
	}
	if n := len(s.Orphans); n > 0 {
		add("%d deadline entr(ies) without a queue entry after the run, first %s", n, s.Orphans[0])
	}
	// The token counter may outlive the run by up to a lease, but must
	// expire: a counter that stays would stay for every name ever locked.
	if s.LastToken > 0 && s.TokenTTL < 0 {
		add("token counter %d never expires", s.LastToken)
	}
	return out
}
