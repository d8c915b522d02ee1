package main

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// tally is what the goroutines of one run counted. Each goroutine writes
// only its own slot of counts and waits; the atomic fields are shared.
type tally struct {
	counts   []int64           // grants per goroutine, granted before the deadline
	attempts []int64           // per goroutine: the attempts the counted grants took
	waits    [][]time.Duration // per goroutine: the wait of each counted grant

	errors     atomic.Int64 // failed Lock or Unlock calls that the deadline did not end
	violations atomic.Int64 // grants that found another holder in the critical section
	tokens     atomic.Int64 // fencing tokens read under a hold
	backwards  atomic.Int64 // tokens read that were no greater than the one read before them

	mu       sync.Mutex
	firstErr error // guarded by mu: the first error counted, to show what failed
}

func newTally(goroutines int) *tally {
	return &tally{
		counts:   make([]int64, goroutines),
		attempts: make([]int64, goroutines),
		waits:    make([][]time.Duration, goroutines),
	}
}

// grant records one grant of goroutine g after a wait of d and the given
// attempts at the locks.
func (t *tally) grant(g int, d time.Duration, attempts int64) {
	t.counts[g]++
	t.attempts[g] += attempts
	t.waits[g] = append(t.waits[g], d)
}

// fail counts an error, keeping the first one.
func (t *tally) fail(err error) {
	t.errors.Add(1)
	t.mu.Lock()
	if t.firstErr == nil {
		t.firstErr = err
	}
	t.mu.Unlock()
}

// checkToken reads the fencing token of a hold of the lock whose latest
// token read is in last, and counts it: as a fault when it is no greater
// than that one, or as an error when reading it failed while ctx, the
// run's, had not ended. The holds of one lock exclude each other, so the
// tokens are read one at a time, in the order of the grants.
func (t *tally) checkToken(ctx context.Context, token func() (int64, error), last *atomic.Int64) {
	tok, err := token()
	if err != nil {
		if ctx.Err() == nil {
			t.fail(fmt.Errorf("token: %w", err))
		}
		return
	}
	t.tokens.Add(1)
	if prev := last.Swap(tok); tok <= prev {
		t.backwards.Add(1)
	}
}

// firstError returns the first error counted, or nil.
func (t *tally) firstError() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.firstErr
}

// grants returns the number of grants counted, over all goroutines.
func (t *tally) grants() int64 {
	var n int64
	for _, c := range t.counts {
		n += c
	}
	return n
}

// attemptsPerGrant returns the attempts the counted grants took, over
// the grants; 0 when there were none.
func (t *tally) attemptsPerGrant() float64 {
	var n int64
	for _, a := range t.attempts {
		n += a
	}
	if g := t.grants(); g > 0 {
		return float64(n) / float64(g)
	}
	return 0
}

// starved returns how many goroutines were never granted the lock.
func (t *tally) starved() int {
	n := 0
	for _, c := range t.counts {
		if c == 0 {
			n++
		}
	}
	return n
}

// waitStats are the quantiles of the waits of a run, from Lock's call to
// its grant.
type waitStats struct {
	P50 time.Duration
	P99 time.Duration
	Max time.Duration
}

// summarizeWaits merges the waits of every goroutine and returns their
// quantiles; zero when there are none.
func summarizeWaits(waits [][]time.Duration) waitStats {
	var all []time.Duration
	for _, w := range waits {
		all = append(all, w...)
	}
	slices.Sort(all)
	return waitStats{
		P50: percentile(all, 50),
		P99: percentile(all, 99),
		Max: percentile(all, 100),
	}
}

// percentile returns the nearest-rank p-th percentile (0 < p <= 100) of
// sorted: the smallest value with at least p% of the values at or below
// it. It returns 0 for an empty slice.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	rank = min(max(rank, 1), len(sorted))
	return sorted[rank-1]
}

// jain returns Jain's fairness index of counts, (Σx)² / (n·Σx²): 1 when
// every goroutine got the same number of grants, 1/n when one got them
// all. It returns 0 when nobody got any, since nobody was served.
func jain(counts []int64) float64 {
	var sum, squares float64
	for _, c := range counts {
		x := float64(c)
		sum += x
		squares += x * x
	}
	if squares == 0 {
		return 0
	}
	return sum * sum / (float64(len(counts)) * squares)
}
