package main

import (
	"math"
	"slices"
	"testing"
)

// With several rounds, a library's row is its median round, and its ratio
// to the best peer is the median of the rounds' ratios, each taken within
// one round: a round whose machine ran slow for every library moves no
// ratio, where the ratio of the medians would mix rounds.
func TestMedianRunsKeepsTheMedianRoundAndPairsTheRatios(t *testing.T) {
	run := func(lib string, rate float64) result { return result{Library: lib, GrantsPerSec: rate} }
	runs := [][]result{
		{run("fairlock", 800), run("fairlock", 400), run("fairlock", 900)},
		{run("redsync", 1000), run("redsync", 500), run("redsync", 1000)},
		{run("redislock", 900), run("redislock", 450), run("redislock", 1200)},
	}
	rows := medianRuns(runs)
	if got := rows[0].GrantsPerSec; got != 800 {
		t.Errorf("fairlock's row: %v grants/s, want its median round's 800", got)
	}
	if got := rows[0].RoundGrantsPerSec; !slices.Equal(got, []float64{800, 400, 900}) {
		t.Errorf("fairlock's rounds: %v", got)
	}
	// The rounds' ratios against the best peer: 0.8, 0.8, 0.75.
	if got := rows[0].VsBestPeer; math.Abs(got-0.8) > 1e-9 {
		t.Errorf("fairlock's ratio: %v, want 0.8", got)
	}
	if rows[1].GrantsPerSec != 1000 || rows[2].GrantsPerSec != 900 {
		t.Errorf("the peers' rows: %v and %v grants/s, want 1000 and 900", rows[1].GrantsPerSec, rows[2].GrantsPerSec)
	}

	one := medianRuns([][]result{{run("fairlock", 800)}, {run("redsync", 1000)}})
	if got := one[0].VsBestPeer; math.Abs(got-0.8) > 1e-9 {
		t.Errorf("one round: ratio %v, want 0.8", got)
	}
	if one[0].RoundGrantsPerSec != nil {
		t.Errorf("one round lists its rounds: %v", one[0].RoundGrantsPerSec)
	}
}
