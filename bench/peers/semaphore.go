package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"slices"
)

// The semaphore workload shares the permits of one semaphore among
// callers that ask for different numbers of them. fairlock has a call for
// it, Client.Semaphore: weighted and strictly FIFO (a caller whose weight
// does not fit beside the permits held waits, and nobody who asked after
// it passes it, even one whose weight would fit), each grant pushed to
// the waiter. Neither peer has a semaphore, so each is built the way
// their users build one from locks: a semaphore called name with p
// permits is p lock names, name:0 to name:p-1, one a permit. A caller
// that wants n permits tries the names in turn, once each and without
// waiting, passing over those held, until it holds n; when too few were
// free it gives back what it took (all or none), waits a random time up
// to -semaphore-wait and starts again from name:0 (tryTake). Each name is
// a lock that one caller holds at a time, so no more than p permits are
// ever out.

// slotNames returns the lock names that stand for the permits of the
// semaphore called name: name:0 to name:permits-1.
func slotNames(name string, permits int) []string {
	names := make([]string, permits)
	for i := range names {
		names[i] = fmt.Sprintf("%s:%d", name, i)
	}
	return names
}

// acquire takes weight permits of one fairlock Semaphore with Acquire,
// which waits in line: one attempt.
func (f fairLocker) acquire(ctx context.Context, name string, permits, weight int) (func(context.Context) error, int64, error) {
	s := f.c.Semaphore(name, int64(permits))
	held, err := s.Acquire(ctx, int64(weight))
	if err != nil {
		return nil, 1, err
	}
	// Release is bounded by the Client's call timeout, not by a context.
	return func(context.Context) error { return s.Release(held) }, 1, nil
}

// acquire takes weight of the semaphore's lock names with tryTake, each
// with a redsync Mutex's TryLockContext.
func (r redsyncLocker) acquire(ctx context.Context, name string, permits, weight int) (func(context.Context) error, int64, error) {
	return tryTake(ctx, slotNames(name, permits), weight, r.semaphoreWait, r.tryOnce)
}

// acquire takes weight of the semaphore's lock names with tryTake, each
// with one redislock Obtain that does not retry.
func (r redislockLocker) acquire(ctx context.Context, name string, permits, weight int) (func(context.Context) error, int64, error) {
	return tryTake(ctx, slotNames(name, permits), weight, r.semaphoreWait, r.tryOnce)
}

// acquire takes weight of the semaphore's lock names with tryTake, each
// with one run of the take script on that name. The benchmark does not
// call it: only the multi workload runs this locker.
func (a atomicLocker) acquire(ctx context.Context, name string, permits, weight int) (func(context.Context) error, int64, error) {
	return tryTake(ctx, slotNames(name, permits), weight, a.multiWait, func(ctx context.Context, name string) (func(context.Context) error, error) {
		names, value := []string{name}, rand.Text()
		took, err := atomicTake.Run(ctx, a.rdb, names, value, a.ttl.Milliseconds()).Int()
		if err != nil {
			return nil, err
		}
		if took != 1 {
			return nil, errTaken
		}
		return func(ctx context.Context) error { return a.give(ctx, names, value) }, nil
	})
}

// weighed returns, for a semaphore workload whose goroutines were granted
// counts, the permits those grants took, and the share of the grants that
// went to the goroutines of the largest weight: 0.5 when there are two
// weights and both were served alike, less when the lighter callers were
// served more often. Both are 0 when nobody was granted anything.
func (w workload) weighed(counts []int64) (permits int64, heaviest float64) {
	top := slices.Max(append([]int{1}, w.weights...))
	var grants, heavy int64
	for g, c := range counts {
		n := w.weight(g, len(counts))
		permits += c * int64(n)
		grants += c
		if n == top {
			heavy += c
		}
	}
	if grants == 0 {
		return 0, 0
	}
	return permits, float64(heavy) / float64(grants)
}
