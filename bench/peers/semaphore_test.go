package main

import (
	"context"
	"slices"
	"testing"
	"time"
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
