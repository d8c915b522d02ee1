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
// Close releases every hold, waiters cost memory and about one goroutine
// each, and the names ran on one server and on a Cluster (see
// checkNames).
func TestScalePartReportsSaneFiguresForHandOverHoldsAndWaiters(t *testing.T) {
	const n, names = 100, 300
	// The first renewals fall due a second after the holds are taken. The
	// hand-over with a hundred waiters (-waiters-duration) runs for a
	// second, which gives them, joining at once on a busy machine, time
	// for several hand-overs.
	_, r, out := runReport(t, "-workloads", "scale", "-duration", "200ms", "-waiters-duration", "1s", "-warmup", "30ms",
		"-scale-waiters", strconv.Itoa(n), "-scale-holds", strconv.Itoa(n), "-scale-window", "1500ms",
		"-scale-names", strconv.Itoa(names))
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

	checkNames(t, s.Names, names)

	for _, title := range []string{"## scale: hand-over", "## scale: 16 waiters spread over Clients", "## scale: " + group(n) + " holds",
		"## scale: Close of the Client with " + group(n) + " holds", "## scale: " + group(n) + " waiters", "## scale: " + group(names) + " names"} {
		if !strings.Contains(out, title) {
			t.Errorf("no table %q", title)
		}
	}
	if strings.Contains(out, "## Summary") {
		t.Errorf("a summary of the peers, which did not run")
	}
}

// checkNames checks the names step's rows: each deployment locked and
// unlocked every name without an error, with Unlock times in order and
// heaps read; only the Cluster's Client audits, its looks reading in one
// round trip per master and stopping within seconds of the last Unlock.
func checkNames(t *testing.T, rows []namesResult, names int) {
	t.Helper()
	if len(rows) != 2 {
		t.Fatalf("%d names rows, want one server's and the Cluster's", len(rows))
	}
	for i, want := range []string{"one server", "cluster of 3 masters"} {
		r := rows[i]
		if r.Deployment != want || r.Names != names || r.Goroutines != namesGoroutines {
			t.Errorf("row %d: %q, %d names by %d goroutines; want %q, %d by %d", i, r.Deployment, r.Names, r.Goroutines, want, names, namesGoroutines)
		}
		if r.Errors != 0 || r.NamesPerSec <= 0 {
			t.Errorf("%s: %d errors (%s), %.0f names/s", r.Deployment, r.Errors, r.FirstError, r.NamesPerSec)
		}
		if r.UnlockP50ms <= 0 || r.UnlockP50ms > r.UnlockP99ms || r.UnlockP99ms > r.UnlockP999ms || r.UnlockP999ms > r.UnlockMaxms {
			t.Errorf("%s: Unlock p50 %.3f, p99 %.3f, p99.9 %.3f, max %.3f ms, want 0 < p50 <= p99 <= p99.9 <= max",
				r.Deployment, r.UnlockP50ms, r.UnlockP99ms, r.UnlockP999ms, r.UnlockMaxms)
		}
		if r.HeapBaseline <= 0 || r.HeapPeak <= 0 || r.HeapAfter <= 0 || r.HeapIdle <= 0 || r.HeapClosed <= 0 {
			t.Errorf("%s: heaps %d, %d, %d, %d, %d, want all read", r.Deployment, r.HeapBaseline, r.HeapPeak, r.HeapAfter, r.HeapIdle, r.HeapClosed)
		}
		if r.AuditQuietTimedOut {
			t.Errorf("%s: the audit kept reading for %v", r.Deployment, namesIdleBound)
		}
	}
	if one := rows[0]; one.AuditReads+one.AuditReadsAfter != 0 {
		t.Errorf("one server: %d audit reads, want none: its Client does not audit", one.AuditReads+one.AuditReadsAfter)
	}
	cl := rows[1]
	if cl.AuditReads+cl.AuditReadsAfter == 0 {
		t.Errorf("cluster: no audit read")
	}
	// A look reads every call it remembers in one round trip per master:
	// at most 3 a look, a look a second, for as long as the names ran and
	// 10 s after (and a second's rounding each).
	if most := int64(3 * (cl.Seconds + cl.AuditSecondsAfter + 2)); cl.AuditRoundTrips+cl.AuditRoundTripsAfter > most {
		t.Errorf("cluster: %d + %d audit round trips over %.1f + %.1f s, want at most %d: one per master and look",
			cl.AuditRoundTrips, cl.AuditRoundTripsAfter, cl.Seconds, cl.AuditSecondsAfter, most)
	}
	if cl.AuditSecondsAfter > 12 {
		t.Errorf("cluster: the audit read %.1f s after the last Unlock, want within 10 s and a look", cl.AuditSecondsAfter)
	}
}
