package main

import (
	"strconv"
	"strings"
	"testing"
)

// TestScalePartReportsSaneFiguresForHandOverHoldsAndWaiters runs the scale
// part alone, small, on a redis-server of its own, and checks that every
// figure is in the JSON report and plausible: both hand-overs granted the
// lock, holds add neither goroutines nor one round trip per renewal,
// Close releases every hold, and waiters cost memory and about one
// goroutine each.
func TestScalePartReportsSaneFiguresForHandOverHoldsAndWaiters(t *testing.T) {
	const n = 100
	// The first renewals fall due a second after the holds are taken. The
	// hand-over with a hundred waiters (-waiters-duration) runs for a
	// second, which gives them, joining at once on a busy machine, time
	// for several hand-overs.
	_, r, out := runReport(t, "-workloads", "scale", "-duration", "200ms", "-waiters-duration", "1s", "-warmup", "30ms",
		"-scale-waiters", strconv.Itoa(n), "-scale-holds", strconv.Itoa(n), "-scale-window", "1500ms")
	if len(r.Results) != 0 {
		t.Errorf("%d peer results, want none: only the scale part was selected", len(r.Results))
	}
	if r.Scale == nil {
		t.Fatal("no scale part in the JSON report")
	}
	s := r.Scale

	if len(s.Handover) != 2 {
		t.Fatalf("%d hand-over runs, want 2", len(s.Handover))
	}
	for i, want := range []int{scaleSmallWaiters, n} {
		h := s.Handover[i]
		if h.Waiters != want || h.Clients != scaleClients {
			t.Errorf("hand-over %d: %d waiters over %d clients, want %d over %d", i, h.Waiters, h.Clients, want, scaleClients)
		}
		if h.Grants < 2 || h.GrantsPerSec <= 0 {
			t.Errorf("hand-over with %d waiters: %d grants, %.0f/s", h.Waiters, h.Grants, h.GrantsPerSec)
		}
		if h.P50ms <= 0 || h.P50ms > h.P99ms || h.P99ms > h.Maxms {
			t.Errorf("hand-over with %d waiters: p50 %.3f, p99 %.3f, max %.3f ms, want 0 < p50 <= p99 <= max",
				h.Waiters, h.P50ms, h.P99ms, h.Maxms)
		}
		if h.Errors != 0 {
			t.Errorf("hand-over with %d waiters: %d errors, first: %s", h.Waiters, h.Errors, h.FirstError)
		}
	}
	if len(s.Spread) != len(spreadClients) {
		t.Fatalf("%d spread runs, want %d", len(s.Spread), len(spreadClients))
	}
	for i, h := range s.Spread {
		if h.Clients != spreadClients[i] || h.Waiters != scaleSmallWaiters {
			t.Errorf("spread %d: %d waiters over %d Clients, want %d over %d", i, h.Waiters, h.Clients, scaleSmallWaiters, spreadClients[i])
		}
		if h.Grants < 2 || h.ServerUsPerGrant <= 0 || h.Errors != 0 {
			t.Errorf("spread over %d Clients: %d grants, %.1f server µs/grant, %d errors (%s)",
				h.Clients, h.Grants, h.ServerUsPerGrant, h.Errors, h.FirstError)
		}
	}
	if s.HandoverP50Ratio <= 0 {
		t.Errorf("hand-over p50 ratio %v, want > 0", s.HandoverP50Ratio)
	}

	hd := s.Holds
	if hd.Holds != n || hd.TenthHolds != n/10 {
		t.Errorf("%d holds, a tenth %d; want %d and %d", hd.Holds, hd.TenthHolds, n, n/10)
	}
	if hd.GoroutinesBefore <= 0 || hd.GoroutinesTenth <= 0 || hd.GoroutinesAll <= 0 {
		t.Errorf("goroutines not measured: %d before, %d, %d", hd.GoroutinesBefore, hd.GoroutinesTenth, hd.GoroutinesAll)
	}
	// Ninety more holds may meet a renewal under way, not ninety goroutines.
	if grown := hd.GoroutinesAll - hd.GoroutinesTenth; grown > 5 {
		t.Errorf("goroutines grew by %d from %d to %d holds", grown, hd.TenthHolds, hd.Holds)
	}
	if hd.HeapBytesPerHold <= 0 || hd.RedisBytesPerHold <= 0 {
		t.Errorf("per hold: Go heap %.0f B, Redis %.0f B, want both > 0", hd.HeapBytesPerHold, hd.RedisBytesPerHold)
	}
	if hd.Renewals == 0 || hd.RoundTrips == 0 || hd.RoundTrips >= hd.Renewals {
		t.Errorf("%d renewals in %d round trips, want some renewals, pipelined", hd.Renewals, hd.RoundTrips)
	}
	cl := hd.Close
	if cl.LostBefore != 0 || cl.Found != int64(n) || cl.Gone != 0 || cl.Failed != 0 || cl.LeftToExpire != 0 ||
		cl.KeysLeft != 0 || cl.ContextsLive != 0 || cl.Seconds <= 0 {
		t.Errorf("Close of %d holds: %+v; want every hold found by its release, none left, in some time", n, cl)
	}

	w := s.Waiters
	if w.Waiters != n || w.Clients != scaleClients {
		t.Errorf("%d waiters over %d clients, want %d over %d", w.Waiters, w.Clients, n, scaleClients)
	}
	if w.HeapBytesPerWaiter <= 0 || w.RedisBytesPerWaiter <= 0 {
		t.Errorf("per waiter: Go heap %.0f B, Redis %.0f B, want both > 0", w.HeapBytesPerWaiter, w.RedisBytesPerWaiter)
	}
	if w.GoroutinesPerWaiter < 0.9 || w.GoroutinesPerWaiter > 2 {
		t.Errorf("%.2f goroutines per waiter, want about 1", w.GoroutinesPerWaiter)
	}

	for _, title := range []string{"## scale: hand-over", "## scale: 16 waiters spread over Clients", "## scale: " + group(n) + " holds",
		"## scale: Close of the Client with " + group(n) + " holds", "## scale: " + group(n) + " waiters"} {
		if !strings.Contains(out, title) {
			t.Errorf("no table %q", title)
		}
	}
	if strings.Contains(out, "## Summary") {
		t.Errorf("a summary of the peers, which did not run")
	}
}
