package main

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"
)

// memLocks are locks in memory, taken by single-name tries that never
// wait, as a peer's are in Redis. It records every take and release.
type memLocks struct {
	mu      sync.Mutex
	holder  map[string]int // guarded by mu: the try that holds each name
	tries   int            // guarded by mu
	log     []string       // guarded by mu: "+name" at each take, "-name" at each release
	takenBy map[string]int // guarded by mu: names some other owner holds for that many more tries
	failAt  string         // a try of this name fails with errBroken
}

var errBroken = errors.New("broken")

func newMemLocks() *memLocks {
	return &memLocks{holder: map[string]int{}, takenBy: map[string]int{}}
}

// try is a tryOne over the memory.
func (m *memLocks) try(_ context.Context, name string) (func(context.Context) error, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.tries++
	if name == m.failAt {
		return nil, errBroken
	}
	if n := m.takenBy[name]; n > 0 {
		m.takenBy[name] = n - 1
		return nil, errTaken
	}
	if _, held := m.holder[name]; held {
		return nil, errTaken
	}
	id := m.tries
	m.holder[name] = id
	m.log = append(m.log, "+"+name)
	return func(context.Context) error {
		m.mu.Lock()
		defer m.mu.Unlock()
		if m.holder[name] != id {
			return errNotReleased
		}
		delete(m.holder, name)
		m.log = append(m.log, "-"+name)
		return nil
	}, nil
}

func (m *memLocks) held() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var names []string
	for n := range m.holder {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

func TestTryAllGivesBackWhatItTookAndTriesAgainUntilItHoldsEveryName(t *testing.T) {
	m := newMemLocks()
	m.takenBy["c"] = 2 // another owner holds c for the first two attempts
	unlock, attempts, err := tryAll(context.Background(), []string{"b", "a", "c"}, time.Millisecond, m.try)
	if err != nil {
		t.Fatal(err)
	}
	if attempts != 3 {
		t.Errorf("attempts = %d, want 3: c was taken at the first two", attempts)
	}
	if got := m.held(); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Errorf("held %v, want a, b and c", got)
	}
	// Each failed attempt took b and a in the caller's order, and gave
	// them back, the last taken first, before the next.
	want := []string{"+b", "+a", "-a", "-b", "+b", "+a", "-a", "-b", "+b", "+a", "+c"}
	if !slices.Equal(m.log, want) {
		t.Errorf("takes and releases %v, want %v", m.log, want)
	}
	if err := unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := m.held(); len(got) != 0 {
		t.Errorf("still held after unlock: %v", got)
	}
	if got := m.log[len(want):]; !slices.Equal(got, []string{"-c", "-a", "-b"}) {
		t.Errorf("unlock released %v, want c, a, b: the last taken first", got)
	}
}

func TestTryAllStopsAtAFailureThatIsNotATakenNameAndHoldsNothing(t *testing.T) {
	m := newMemLocks()
	m.failAt = "b"
	_, attempts, err := tryAll(context.Background(), []string{"a", "b", "c"}, time.Millisecond, m.try)
	if !errors.Is(err, errBroken) {
		t.Fatalf("err = %v, want errBroken", err)
	}
	if attempts != 1 {
		t.Errorf("attempts = %d, want 1", attempts)
	}
	if got := m.held(); len(got) != 0 {
		t.Errorf("still held: %v", got)
	}
}

func TestTryAllEndsWithItsContextAndHoldsNothing(t *testing.T) {
	m := newMemLocks()
	m.takenBy["b"] = 1 << 30
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	_, attempts, err := tryAll(ctx, []string{"a", "b"}, time.Millisecond, m.try)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want the context's", err)
	}
	if attempts < 1 {
		t.Errorf("attempts = %d, want at least 1", attempts)
	}
	if got := m.held(); len(got) != 0 {
		t.Errorf("still held: %v", got)
	}
}

func TestPickChoosesDistinctNamesWithinTheWorkloadsBounds(t *testing.T) {
	sel, err := selectWorkloads(multiKey)
	if err != nil {
		t.Fatal(err)
	}
	w := sel.workloads[0]
	rng := rand.New(rand.NewPCG(1, 2))
	sizes := map[int]int{}
	for range 1000 {
		picked := w.pick(rng, nil)
		sizes[len(picked)]++
		if len(picked) < w.multi[0] || len(picked) > w.multi[1] {
			t.Fatalf("picked %v: %d names, want %d to %d", picked, len(picked), w.multi[0], w.multi[1])
		}
		for j, i := range picked {
			if i < 0 || i >= w.names || slices.Contains(picked[:j], i) {
				t.Fatalf("picked %v: want distinct indexes below %d", picked, w.names)
			}
		}
	}
	for n := w.multi[0]; n <= w.multi[1]; n++ {
		if sizes[n] == 0 {
			t.Errorf("no grant of %d names in 1,000 picks", n)
		}
	}
	single := workload{names: 5}
	if got := single.pick(rng, nil); len(got) != 1 || got[0] >= 5 {
		t.Errorf("a single-name workload picked %v", got)
	}
}

// memLocker is a locker over memLocks whose lockAll is tryAll and whose
// acquire is tryTake over the semaphore's lock names, or which grants at
// once without taking anything when broken.
type memLocker struct {
	m      *memLocks
	broken bool
}

func (l memLocker) lock(ctx context.Context, name string) (func(context.Context) error, error) {
	unlock, _, err := l.lockAll(ctx, []string{name})
	return unlock, err
}

func (l memLocker) lockAll(ctx context.Context, names []string) (func(context.Context) error, int64, error) {
	if l.broken {
		return func(context.Context) error { return nil }, 1, nil
	}
	return tryAll(ctx, names, 100*time.Microsecond, l.m.try)
}

func (l memLocker) acquire(ctx context.Context, name string, permits, weight int) (func(context.Context) error, int64, error) {
	if l.broken {
		return func(context.Context) error { return nil }, 1, nil
	}
	return tryTake(ctx, slotNames(name, permits), weight, 100*time.Microsecond, l.m.try)
}

// The multi workload counts a grant that found another holder of any of
// its names as a violation: none over locks that exclude, some over a
// locker that lets everyone in.
func TestMultiWorkloadCountsGrantsAttemptsAndViolations(t *testing.T) {
	sel, err := selectWorkloads(multiKey)
	if err != nil {
		t.Fatal(err)
	}
	w := sel.workloads[0]
	for _, broken := range []bool{false, true} {
		m := newMemLocks()
		lockers := []locker{memLocker{m: m, broken: broken}, memLocker{m: m, broken: broken}}
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		tl := drive(ctx, w, lockers, "test", w.goroutines)
		cancel()
		if tl.grants() == 0 {
			t.Fatalf("broken %v: no grant", broken)
		}
		if err := tl.firstError(); err != nil {
			t.Errorf("broken %v: %v", broken, err)
		}
		v := tl.violations.Load()
		switch {
		case broken && v == 0:
			t.Errorf("a locker that lets everyone in made no violation in %d grants", tl.grants())
		case !broken && v != 0:
			t.Errorf("%d violations over locks that exclude", v)
		}
		if a := tl.attemptsPerGrant(); a < 1 || (broken && a != 1) {
			t.Errorf("broken %v: %.2f attempts per grant", broken, a)
		}
		if got := m.held(); len(got) != 0 {
			t.Errorf("broken %v: still held after the run: %v", broken, got)
		}
	}
}
