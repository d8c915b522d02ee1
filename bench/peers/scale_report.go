package main

import (
	"fmt"
	"io"
)

// scaleResult is what the scale part measured, fairlock alone.
type scaleResult struct {
	// Handover holds the hand-over with scaleSmallWaiters waiters, then
	// with -scale-waiters.
	Handover []handoverResult `json:"handover"`
	// HandoverP50Ratio is the second hand-over's p50 over the first's; 0
	// when the first has none.
	HandoverP50Ratio float64 `json:"handover_p50_ratio"`
	// Spread holds the hand-over with scaleSmallWaiters waiters over each
	// number of Clients of spreadClients.
	Spread  []handoverResult `json:"spread"`
	Holds   holdsResult      `json:"holds"`
	Waiters waitersResult    `json:"waiters"`
	// Names holds the names step on one server, then on a Cluster.
	Names []namesResult `json:"names"`
}

// handoverResult is one run of goroutines looping Lock and Unlock on one
// lock: the time from an Unlock's return to the next grant.
type handoverResult struct {
	Waiters      int     `json:"waiters"` // goroutines
	Clients      int     `json:"clients"`
	Seconds      float64 `json:"seconds"`
	Grants       int64   `json:"grants"`
	GrantsPerSec float64 `json:"grants_per_sec"`
	P50ms        float64 `json:"handover_p50_ms"`
	P99ms        float64 `json:"handover_p99_ms"`
	Maxms        float64 `json:"handover_max_ms"`
	Errors       int64   `json:"errors"`
	FirstError   string  `json:"first_error,omitempty"`
	// ServerUsPerGrant is the server's CPU time (user and system) over
	// the measured span per grant, in µs.
	ServerUsPerGrant float64 `json:"server_us_per_grant"`
}

// holdsResult is many locks held at once through one Client.
type holdsResult struct {
	Holds            int `json:"holds"`
	GoroutinesBefore int `json:"goroutines_before_client"`
	// GoroutinesTenth is runtime.NumGoroutine with TenthHolds held; 0 when
	// TenthHolds is 0.
	TenthHolds        int         `json:"tenth_holds"`
	GoroutinesTenth   int         `json:"goroutines_tenth_held"`
	GoroutinesAll     int         `json:"goroutines_all_held"`
	HeapBytesPerHold  float64     `json:"go_heap_bytes_per_hold"`
	RedisBytesPerHold float64     `json:"redis_used_memory_bytes_per_hold"`
	Lease             string      `json:"lease"`
	WindowSeconds     float64     `json:"renewal_window_seconds"`
	Renewals          int64       `json:"renewals"`    // scripts sent, alone or in pipelines
	RoundTrips        int64       `json:"round_trips"` // commands and pipelines sent
	RenewalsPerSec    float64     `json:"renewals_per_sec"`
	RoundTripsPerSec  float64     `json:"round_trips_per_sec"`
	Close             closeResult `json:"close"`
}

// closeResult is the Close of the Client with every hold held.
type closeResult struct {
	Seconds float64 `json:"close_seconds"`
	// LostBefore is the holds whose context had ended before Close (their
	// leases lost): none while the watchdog keeps up.
	LostBefore int `json:"holds_lost_before_close"`
	// Replies of the release scripts Close sent: the hold was found (and
	// released), it was found gone (expired), or the call failed.
	Found  int64 `json:"releases_found_hold"`
	Gone   int64 `json:"releases_found_gone"`
	Failed int64 `json:"releases_failed"`
	// LeftToExpire is the holds live at Close that no release found:
	// expired before their release, or never released.
	LeftToExpire int64 `json:"holds_left_to_expire"`
	// KeysLeft is the hold keys still in Redis when Close returned.
	KeysLeft int64 `json:"hold_keys_left"`
	// ContextsLive is the holds' contexts not ended when Close returned.
	ContextsLive int `json:"hold_contexts_live"`
}

// waitersResult is many waiters queued behind a holder, per waiter.
type waitersResult struct {
	Waiters             int     `json:"waiters"`
	Clients             int     `json:"clients"`
	HeapBytesPerWaiter  float64 `json:"go_heap_bytes_per_waiter"`  // MemStats.HeapAlloc
	StackBytesPerWaiter float64 `json:"go_stack_bytes_per_waiter"` // MemStats.StackInuse
	RedisBytesPerWaiter float64 `json:"redis_used_memory_bytes_per_waiter"`
	GoroutinesPerWaiter float64 `json:"goroutines_per_waiter"`
}

// printScale prints the tables of the scale part: every step's, or the
// names step's alone when it ran alone.
func printScale(w io.Writer, s scaleResult) {
	if len(s.Handover) > 0 {
		printScaleSteps(w, s)
	}
	printNames(w, s.Names)
}

// printNames prints the table of the names step.
func printNames(w io.Writer, rows []namesResult) {
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(w, "\n## scale: %s names, each locked and unlocked once by %d goroutines of one Client\n\n",
		group(int64(rows[0].Names)), rows[0].Goroutines)
	fmt.Fprintln(w, "| deployment | names/s | Unlock p50 ms | p99 ms | p99.9 ms | max ms | Go heap: before | peak | after GC | idle | after Close "+
		"| audit reads / round trips | after the last Unlock: reads / round trips | for s | errors |")
	fmt.Fprintln(w, "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	for _, r := range rows {
		fmt.Fprintf(w, "| %s | %s | %.2f | %.2f | %.2f | %.1f | %s | %s | %s | %s | %s | %s / %s | %s / %s | %.1f | %d |\n",
			r.Deployment, group(round(r.NamesPerSec)), r.UnlockP50ms, r.UnlockP99ms, r.UnlockP999ms, r.UnlockMaxms,
			mib(r.HeapBaseline), mib(r.HeapPeak), mib(r.HeapAfter), mib(r.HeapIdle), mib(r.HeapClosed),
			group(r.AuditReads), group(r.AuditRoundTrips), group(r.AuditReadsAfter), group(r.AuditRoundTripsAfter),
			r.AuditSecondsAfter, r.Errors)
	}
	if len(rows) == 2 && rows[0].UnlockP999ms > 0 {
		fmt.Fprintf(w, "\nUnlock p99.9 on the Cluster over one server's: %s.\n", ratio(rows[1].UnlockP999ms/rows[0].UnlockP999ms))
	}
	for _, r := range rows {
		if r.AuditQuietTimedOut {
			fmt.Fprintf(w, "\n%s: the audit still read %v after the last Unlock; the idle heap was read then.\n", r.Deployment, namesIdleBound)
		}
		if r.FirstError != "" {
			fmt.Fprintf(w, "\n%s, first error: %s\n", r.Deployment, r.FirstError)
		}
	}
}

// mib formats bytes in MiB with one decimal.
func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// printScaleSteps prints the tables of the scale part's first four steps.
func printScaleSteps(w io.Writer, s scaleResult) {
	fmt.Fprintf(w, "\n## scale: hand-over (fairlock, 1 lock, holding nothing)\n\n")
	fmt.Fprintln(w, "| waiters | clients | measured s | grants/s | hand-over p50 ms | p99 ms | max ms | errors |")
	fmt.Fprintln(w, "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	for _, h := range s.Handover {
		dash := func(v float64, format string) string {
			if h.Grants < 2 {
				return "—"
			}
			return fmt.Sprintf(format, v)
		}
		fmt.Fprintf(w, "| %s | %d | %.1f | %s | %s | %s | %s | %d |\n",
			group(int64(h.Waiters)), h.Clients, h.Seconds, group(round(h.GrantsPerSec)),
			dash(h.P50ms, "%.3f"), dash(h.P99ms, "%.3f"), dash(h.Maxms, "%.1f"), h.Errors)
	}
	if len(s.Handover) == 2 {
		fmt.Fprintf(w, "\np50 with %s waiters over p50 with %s: %s\n",
			group(int64(s.Handover[1].Waiters)), group(int64(s.Handover[0].Waiters)), ratio(s.HandoverP50Ratio))
	}
	for _, h := range s.Handover {
		if h.FirstError != "" {
			fmt.Fprintf(w, "\n%s waiters, first error: %s\n", group(int64(h.Waiters)), h.FirstError)
		}
	}

	fmt.Fprintf(w, "\n## scale: %d waiters spread over Clients (fairlock, 1 lock, holding nothing)\n\n", scaleSmallWaiters)
	fmt.Fprintln(w, "| clients | waiters per client | grants/s | server µs/grant | hand-over p50 ms | errors |")
	fmt.Fprintln(w, "| ---: | ---: | ---: | ---: | ---: | ---: |")
	for _, h := range s.Spread {
		fmt.Fprintf(w, "| %d | %d | %s | %.1f | %.3f | %d |\n", h.Clients, h.Waiters/max(h.Clients, 1),
			group(round(h.GrantsPerSec)), h.ServerUsPerGrant, h.P50ms, h.Errors)
	}
	for _, h := range s.Spread {
		if h.FirstError != "" {
			fmt.Fprintf(w, "\n%d Clients, first error: %s\n", h.Clients, h.FirstError)
		}
	}

	hd := s.Holds
	fmt.Fprintf(w, "\n## scale: %s holds in one Client (lease %s, renewed every %v)\n\n",
		group(int64(hd.Holds)), hd.Lease, scaleLease/3)
	fmt.Fprintf(w, "| goroutines before Client | with %s held | with %s held | Go heap B/hold | Redis B/hold "+
		"| renewals/s | round trips/s | renewals/round trip |\n", group(int64(hd.TenthHolds)), group(int64(hd.Holds)))
	fmt.Fprintln(w, "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	tenth := "—"
	if hd.TenthHolds > 0 {
		tenth = group(int64(hd.GoroutinesTenth))
	}
	perTrip := "—"
	if hd.RoundTrips > 0 {
		perTrip = fmt.Sprintf("%.1f", float64(hd.Renewals)/float64(hd.RoundTrips))
	}
	fmt.Fprintf(w, "| %d | %s | %s | %s | %s | %s | %s | %s |\n",
		hd.GoroutinesBefore, tenth, group(int64(hd.GoroutinesAll)), byteCount(hd.HeapBytesPerHold),
		byteCount(hd.RedisBytesPerHold), group(round(hd.RenewalsPerSec)), group(round(hd.RoundTripsPerSec)), perTrip)
	fmt.Fprintf(w, "\nRenewals and round trips counted over %.1f s with every hold held.\n", hd.WindowSeconds)

	cl := hd.Close
	fmt.Fprintf(w, "\n## scale: Close of the Client with %s holds (lease %s)\n\n", group(int64(hd.Holds)), hd.Lease)
	fmt.Fprintln(w, "| holds lost before Close | Close s | releases that found their hold | found it expired | failed | holds left to expire | hold keys left | contexts not ended |")
	fmt.Fprintln(w, "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	fmt.Fprintf(w, "| %s | %.2f | %s | %s | %s | %s | %s | %d |\n", group(int64(cl.LostBefore)), cl.Seconds, group(cl.Found), group(cl.Gone), group(cl.Failed),
		group(cl.LeftToExpire), group(cl.KeysLeft), cl.ContextsLive)

	wt := s.Waiters
	fmt.Fprintf(w, "\n## scale: %s waiters on one held lock, over %d clients\n\n", group(int64(wt.Waiters)), wt.Clients)
	fmt.Fprintln(w, "| Go heap B/waiter | goroutine stacks B/waiter | heap + stacks B/waiter | Redis B/waiter | goroutines/waiter |")
	fmt.Fprintln(w, "| ---: | ---: | ---: | ---: | ---: |")
	fmt.Fprintf(w, "| %s | %s | %s | %s | %.2f |\n",
		byteCount(wt.HeapBytesPerWaiter), byteCount(wt.StackBytesPerWaiter),
		byteCount(wt.HeapBytesPerWaiter+wt.StackBytesPerWaiter), byteCount(wt.RedisBytesPerWaiter), wt.GoroutinesPerWaiter)
}

// byteCount formats a number of bytes, which may be negative when the garbage
// collector freed more than was added, rounded to a whole byte.
func byteCount(v float64) string {
	if n := round(v); n < 0 {
		return "−" + group(-n)
	}
	return group(round(v))
}
