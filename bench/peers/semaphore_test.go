package main

import (
	"context"
	"math"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestTryTakePassesOverTakenNamesAndStopsWhenTooFewAreLeft(t *testing.T) {
	m := newMemLocks()
	// Attempt 1: s0 and s1 are taken, and s2 alone cannot make up 2, so
	// it is not tried. Attempt 2: s0 and s1 are free.
	m.takenBy["s0"], m.takenBy["s1"] = 1, 1
	unlock, attempts, err := tryTake(context.Background(), []string{"s0", "s1", "s2"}, 2, time.Millisecond, m.try)
	if err != nil {
		t.Fatal(err)
	}
	if attempts != 2 || m.tries != 4 {
		t.Errorf("%d attempts and %d tries, want 2 and 4: s2 is not worth a try when s0 and s1 are taken", attempts, m.tries)
	}
	if got := m.held(); !slices.Equal(got, []string{"s0", "s1"}) {
		t.Errorf("held %v, want s0 and s1", got)
	}
	if err := unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := m.held(); len(got) != 0 {
		t.Errorf("still held after unlock: %v", got)
	}
}

func TestTryTakeGivesBackWhatItTookWhenTheRestIsTaken(t *testing.T) {
	m := newMemLocks()
	m.takenBy["s1"] = 2 // for the first two attempts
	m.takenBy["s2"] = 1 // for the first
	unlock, attempts, err := tryTake(context.Background(), []string{"s0", "s1", "s2"}, 2, time.Millisecond, m.try)
	if err != nil {
		t.Fatal(err)
	}
	if attempts != 2 {
		t.Errorf("attempts = %d, want 2", attempts)
	}
	// Attempt 1 took s0, found s1 and s2 taken and gave s0 back; attempt
	// 2 took s0, passed over s1 and took s2.
	if want := []string{"+s0", "-s0", "+s0", "+s2"}; !slices.Equal(m.log, want) {
		t.Errorf("takes and releases %v, want %v", m.log, want)
	}
	if err := unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := m.held(); len(got) != 0 {
		t.Errorf("still held after unlock: %v", got)
	}
}

func TestTryTakeRefusesACountOutsideTheNames(t *testing.T) {
	m := newMemLocks()
	for _, n := range []int{0, 4} {
		if _, _, err := tryTake(context.Background(), []string{"a", "b", "c"}, n, time.Millisecond, m.try); err == nil {
			t.Errorf("took %d of 3 names", n)
		}
	}
	if m.tries != 0 {
		t.Errorf("%d tries", m.tries)
	}
}

func semaphoreWorkload(t *testing.T) workload {
	t.Helper()
	sel, err := selectWorkloads(semaphoreKey)
	if err != nil {
		t.Fatal(err)
	}
	return sel.workloads[0]
}

func TestSemaphoreWorkloadGivesEachClientBothWeights(t *testing.T) {
	w := semaphoreWorkload(t)
	if w.permits != 3 || !slices.Equal(w.weights, []int{1, 2}) {
		t.Fatalf("permits %d, weights %v; want 3 and 1, 2", w.permits, w.weights)
	}
	// perClient[c][n] counts the goroutines of client c that take n.
	perClient := make([]map[int]int, w.clients)
	for c := range perClient {
		perClient[c] = map[int]int{}
	}
	for g := range w.goroutines {
		n := w.weight(g, w.goroutines)
		if want := 1 + 2*g/w.goroutines; n != want {
			t.Errorf("goroutine %d takes %d, want %d: the first half 1, the second 2", g, n, want)
		}
		perClient[g%w.clients][n]++
	}
	for c, m := range perClient {
		if m[1] != m[2] || m[1] == 0 {
			t.Errorf("client %d serves %d goroutines of weight 1 and %d of weight 2", c, m[1], m[2])
		}
	}
	if n := (workload{names: 1}).weight(3, 16); n != 1 {
		t.Errorf("a lock's grant takes %d", n)
	}
}

func TestWeighedCountsPermitsAndTheHeaviestCallersShare(t *testing.T) {
	w := workload{goroutines: 4, permits: 3, weights: []int{1, 2}}
	tests := []struct {
		counts   []int64
		permits  int64
		heaviest float64
	}{
		{[]int64{5, 5, 5, 5}, 30, 0.5},
		{[]int64{9, 9, 1, 1}, 22, 0.1},
		{[]int64{0, 0, 3, 0}, 6, 1},
		{[]int64{0, 0, 0, 0}, 0, 0},
	}
	for _, tt := range tests {
		permits, heaviest := w.weighed(tt.counts)
		if permits != tt.permits || math.Abs(heaviest-tt.heaviest) > 1e-12 {
			t.Errorf("weighed(%v) = %d, %v; want %d, %v", tt.counts, permits, heaviest, tt.permits, tt.heaviest)
		}
	}
}

// The semaphore workload counts a grant that took the permits held past
// the semaphore's capacity as a violation: none over lock names taken
// with tryTake, some over a locker that lets everyone in.
func TestSemaphoreWorkloadCountsPermitsBeyondTheCapacityAsViolations(t *testing.T) {
	w := semaphoreWorkload(t)
	for _, broken := range []bool{false, true} {
		m := newMemLocks()
		lockers := []locker{memLocker{m: m, broken: broken}, memLocker{m: m, broken: broken}}
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		tl := drive(ctx, w, lockers, "test", w.goroutines)
		cancel()
		if err := tl.firstError(); err != nil {
			t.Errorf("broken %v: %v", broken, err)
		}
		if tl.grants() == 0 {
			t.Fatalf("broken %v: no grant", broken)
		}
		v := tl.violations.Load()
		switch {
		case broken && v == 0:
			t.Errorf("a locker that lets everyone in made no violation in %d grants", tl.grants())
		case !broken && v != 0:
			t.Errorf("%d violations over lock names taken one permit each", v)
		}
		if got := m.held(); len(got) != 0 {
			t.Errorf("broken %v: still held after the run: %v", broken, got)
		}
	}
}

// permitCounter is a locker whose acquire counts, in held, the permits
// granted through it from the grant to the call of its release, and
// keeps in most the most held at once.
type permitCounter struct {
	locker
	held, most *atomic.Int64
}

func (p permitCounter) acquire(ctx context.Context, name string, permits, weight int) (func(context.Context) error, int64, error) {
	unlock, attempts, err := p.locker.acquire(ctx, name, permits, weight)
	if err != nil {
		return nil, attempts, err
	}
	n := p.held.Add(int64(weight))
	for m := p.most.Load(); n > m && !p.most.CompareAndSwap(m, n); m = p.most.Load() {
	}
	return func(ctx context.Context) error {
		p.held.Add(-int64(weight))
		return unlock(ctx)
	}, attempts, nil
}

// TestEveryLibrarysSemaphoreHoldsAtMostItsPermits runs the semaphore
// workload on a redis-server with each library that runs in it: redsync
// and redislock as lock names tried in turn, fairlock as its Semaphore.
// The permits held at once, counted inside each hold, must reach the
// capacity and never pass it.
func TestEveryLibrarysSemaphoreHoldsAtMostItsPermits(t *testing.T) {
	srv := startServer(t)
	w := semaphoreWorkload(t)
	cfg := libConfig{ttl: 30 * time.Second, redsyncDelay: 10 * time.Millisecond, redislockBackoff: 10 * time.Millisecond,
		multiWait: time.Millisecond, semaphoreWait: time.Millisecond}
	ran := 0
	for _, lib := range libraries(cfg) {
		if !lib.runsIn(w) {
			continue
		}
		ran++
		t.Run(lib.name, func(t *testing.T) {
			var held, most atomic.Int64
			var lockers []locker
			for range w.clients {
				rdb := redis.NewClient(srv.opts)
				l, closeFn, err := lib.open(rdb)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() {
					if err := closeFn(); err != nil {
						t.Error(err)
					}
					_ = rdb.Close()
				})
				lockers = append(lockers, permitCounter{locker: l, held: &held, most: &most})
			}
			// Runs of 300ms until the permits held reach the capacity,
			// within a generous bound.
			for start := time.Now(); most.Load() < int64(w.permits) && time.Since(start) < 10*time.Second; {
				ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
				tl := drive(ctx, w, lockers, "peers:test:"+t.Name(), w.goroutines)
				cancel()
				if err := tl.firstError(); err != nil {
					t.Fatal(err)
				}
				if v := tl.violations.Load(); v != 0 {
					t.Errorf("%d grants took the permits held past %d", v, w.permits)
				}
			}
			if got := most.Load(); got != int64(w.permits) {
				t.Errorf("at most %d permits held at once, want %d", got, w.permits)
			}
			if got := held.Load(); got != 0 {
				t.Errorf("%d permits still counted after the runs", got)
			}
		})
	}
	if ran != 3 {
		t.Errorf("%d libraries ran the semaphore workload, want fairlock, redsync and redislock", ran)
	}
}
