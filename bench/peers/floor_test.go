package main

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestRingPassesTheTokenInOrderAndCountsEveryHandOver runs the ring twice
// on one set of subscriptions and checks that the hand-overs counted in
// Go are the passes counted in Redis but the last one (received after the
// deadline, kept), and that each party received exactly its turns of a
// token going 1, 2, 3, 0, 1, ...
func TestRingPassesTheTokenInOrderAndCountsEveryHandOver(t *testing.T) {
	srv := startServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := openRing(ctx, srv.opts, floorParties, "test:ring")
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := r.close(); err != nil {
			t.Errorf("close: %v", err)
		}
	}()
	for run, key := range []string{"test:ring:first", "test:ring:second"} {
		rctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		tl, err := r.run(rctx, key)
		cancel()
		if err != nil {
			t.Fatalf("run %d: %v", run, err)
		}
		h := tl.handOvers()
		if h < floorParties {
			t.Fatalf("run %d: %d hand-overs, want the token to go round at least once", run, h)
		}
		passes, err := srv.admin.Get(ctx, key).Int64()
		if err != nil {
			t.Fatalf("run %d: GET %s: %v", run, key, err)
		}
		if passes != h+1 {
			t.Errorf("run %d: %d passes in Redis, want the %d hand-overs counted and the one kept", run, passes, h)
		}
		want := make([]int64, floorParties)
		for j := range h {
			want[(j+1)%floorParties]++
		}
		for i := range want {
			if tl.received[i] != want[i] {
				t.Errorf("run %d: received %v, want %v for a token passed in turn from party 0", run, tl.received, want)
				break
			}
		}
	}
}

// TestFloorCountsThreeCommandsAndOneRoundTripPerHandOver measures the
// floor briefly: each hand-over is one EVALSHA that runs INCR and PUBLISH,
// so the server's commandstats count three commands for it, and the
// script's call is the one round trip.
func TestFloorCountsThreeCommandsAndOneRoundTripPerHandOver(t *testing.T) {
	srv := startServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	f, err := measureFloor(ctx, srv, 300*time.Millisecond, 30*time.Millisecond, "test")
	if err != nil {
		t.Fatal(err)
	}
	if f.Parties != floorParties || f.HandOvers == 0 || f.HandOversPerSec <= 0 {
		t.Fatalf("%d parties, %d hand-overs, %.0f/s", f.Parties, f.HandOvers, f.HandOversPerSec)
	}
	// The counters are read at the deadline, when the pass after the last
	// counted hand-over and the stop messages may have run too.
	if lo, hi := 3*f.HandOvers, 3*f.HandOvers+6; f.Commands < lo || f.Commands > hi {
		t.Errorf("%d commands for %d hand-overs, want %d to %d", f.Commands, f.HandOvers, lo, hi)
	}
	if f.RoundTripsPerHand < 0.99 || f.RoundTripsPerHand > 1.01 {
		t.Errorf("%.3f round trips per hand-over, want 1", f.RoundTripsPerHand)
	}
}

// TestRingFailsWhenTheTokenIsLost sends party 0's pass to a channel
// nobody listens on: no party ever receives the token, and run must
// return an error rather than wait for ever.
func TestRingFailsWhenTheTokenIsLost(t *testing.T) {
	srv := startServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := openRing(ctx, srv.opts, floorParties, "test:lost")
	if err != nil {
		t.Fatal(err)
	}
	defer r.close() // already closed by the failed run
	r.channels[1] = "test:lost:nobody"
	rctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	_, err = r.run(rctx, "test:lost:count")
	if err == nil || !strings.Contains(err.Error(), "the token was lost") {
		t.Fatalf("run returned %v, want the lost token reported", err)
	}
}
