package queue_test

import (
	"fmt"
	"maps"
	"slices"

	"github.com/fairlock/fairlock/queue"
)

// The invariants of weighted locks the wdiffer checks after every step,
// on the scripts' states: those of one state (checkWeighted), those of
// the grants a step made (checkFresh), and when a refusal may be given
// (checkRefusedWhileInUse).

// checkWeighted checks the invariants of one state s of a weighted lock
// (a RWMutex's when rw) that hold after every script:
//
//   - the line is well formed (checkLine);
//   - used is the sum of the holders' weights, and every holder has a
//     lease and every lease a holder;
//   - a capacity is stored while anything holds, and the hash and the
//     holders set live at least until the last lease or deadline ends
//     (within slack ms: a real server's clock moves while it is read);
//   - every holder has a level and a token no later than the counter's;
//   - a RWMutex's writer holds alone, with all of the capacity, and a
//     reader with 1 of it.
func checkWeighted(s queue.WeightedState, rw bool, slack int64) error {
	if err := checkLine(s.Queue, s.Deadlines); err != nil {
		return err
	}
	var sum int64
	for owner, h := range s.Holders {
		sum += h.Weight
		if _, ok := s.Leases[owner]; !ok {
			return fmt.Errorf("holder %s has no lease", owner)
		}
		if h.Shared+h.Excl < 1 || h.Token < 1 || s.LastToken > 0 && h.Token > s.LastToken {
			return fmt.Errorf("holder %s: %+v, with token counter %d", owner, h, s.LastToken)
		}
		if rw && h.Weight != 1 && (h.Excl == 0 || h.Weight != queue.RWCapacity) {
			return fmt.Errorf("RWMutex holder %s: %+v weighs neither a reader nor a writer", owner, h)
		}
		if rw && h.Excl > 0 && len(s.Holders) > 1 {
			return fmt.Errorf("the writer %s does not hold alone: %v", owner, slices.Sorted(maps.Keys(s.Holders)))
		}
	}
	if sum != s.Used {
		return fmt.Errorf("used is %d, the holders weigh %d", s.Used, sum)
	}
	for owner := range s.Leases {
		if _, ok := s.Holders[owner]; !ok {
			return fmt.Errorf("lease of %s, which holds nothing", owner)
		}
	}
	if len(s.Holders) > 0 && s.Capacity == 0 {
		return fmt.Errorf("holders without a capacity stored")
	}
	if rw && s.Capacity != 0 && s.Capacity != queue.RWCapacity {
		return fmt.Errorf("a RWMutex's capacity is %d", s.Capacity)
	}
	last := slices.Max(slices.Concat([]int64{0}, slices.Collect(maps.Values(s.Leases)), slices.Collect(maps.Values(s.Deadlines))))
	if s.Capacity != 0 && (s.HashEnd == 0 || s.HashEnd+slack < last) {
		return fmt.Errorf("the hash expires at %d (0: never), before the last lease or deadline, %d", s.HashEnd, last)
	}
	if len(s.Leases) > 0 && (s.LeasesEnd == 0 || s.LeasesEnd+slack < last) {
		return fmt.Errorf("the holders set expires at %d (0: never), before the last lease or deadline, %d", s.LeasesEnd, last)
	}
	return nil
}

// checkFresh checks the grants of a step, whose state was prev before it
// and is s after it, against top, the highest token any earlier state
// showed: each fresh grant (an owner that did not hold before, or holds
// under another token) has a token above top and passed no live waiter
// (strict FIFO, with the head of the line blocking; see passedNone); the
// counter rises above top when it changes; and the weights held are
// within the capacity, unless it was lowered below them (mayExceed: by
// this step, or by an earlier one whose holders have not yet come under
// it), when nobody is granted while they are above it. own is the entry
// of the step's call ("" for none).
func checkFresh(prev, s queue.WeightedState, top int64, mayExceed bool, own string) error {
	fresh := 0
	for _, owner := range slices.Sorted(maps.Keys(s.Holders)) {
		h := s.Holders[owner]
		if p, ok := prev.Holders[owner]; ok && p.Token == h.Token {
			continue
		}
		fresh++
		if h.Token <= top {
			return fmt.Errorf("%s was granted token %d after token %d", owner, h.Token, top)
		}
		if err := passedNone(prev, s, h.Entry, own); err != nil {
			return err
		}
	}
	if s.LastToken > 0 && s.LastToken != prev.LastToken && s.LastToken <= top {
		return fmt.Errorf("the token counter went from %d to %d, not above the earlier token %d", prev.LastToken, s.LastToken, top)
	}
	if s.Used > s.Capacity {
		if !mayExceed {
			return fmt.Errorf("%d held of a capacity of %d", s.Used, s.Capacity)
		}
		if fresh > 0 {
			return fmt.Errorf("%d granted while %d is held of a capacity of %d", fresh, s.Used, s.Capacity)
		}
	}
	return nil
}

// passedNone checks that the grant to entry in a step, whose state was
// prev before it and is s after it, passed no waiter that was live ahead
// of it in prev (anywhere in the line, for an entry that was not in it):
// each of those is granted in s, or has left the line for a reason of its
// own. It gave up (own, the step's call), its entry is not a weighted
// one, its weight is above the capacity, or its owner holds already.
func passedNone(prev, s queue.WeightedState, entry, own string) error {
	ahead := prev.Queue
	if k := slices.Index(prev.Queue, entry); k >= 0 {
		ahead = prev.Queue[:k]
	}
	granted := map[string]bool{}
	for _, h := range s.Holders {
		granted[h.Entry] = true
	}
	for _, e := range ahead {
		_, _, wellFormed := queue.ParseEntry(e)
		if prev.Deadlines[e] <= prev.Now || !wellFormed || queue.IsTicket(e) || granted[e] || e == own {
			continue // dead (see prune), granted, or the step's call
		}
		if slices.Contains(s.Queue, e) {
			return fmt.Errorf("the lock was granted to %q, passing %q, which was live ahead of it and still waits", entry, e)
		}
		owner, _, weight, _, ok := queue.ParseWeighted(e)
		if _, holds := s.Holders[owner]; ok && weight <= s.Capacity && !holds {
			return fmt.Errorf("the lock was granted to %q, passing %q, which was live ahead of it and left the line", entry, e)
		}
	}
	return nil
}

// checkRefusedWhileInUse checks that a caller refused for its capacity
// (PERMITS), leaving the lock in state s, was refused while something
// held the lock or waited for it: the capacity is stored only as long as
// that lasts (see Semaphore).
func checkRefusedWhileInUse(s queue.WeightedState) error {
	for _, end := range s.Leases {
		if end > s.Now {
			return nil
		}
	}
	for _, d := range s.Deadlines {
		if d > s.Now {
			return nil
		}
	}
	return fmt.Errorf("a caller was refused for its capacity, %d stored, while nothing holds or waits", s.Capacity)
}
