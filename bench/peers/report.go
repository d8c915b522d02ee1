package main

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
)

// report is everything one invocation measured, as written to -json.
type report struct {
	Server          string       `json:"server"`
	Go              string       `json:"go"`
	GOMAXPROCS      int          `json:"gomaxprocs"`
	Duration        string       `json:"duration"`
	WaitersDuration string       `json:"waiters_duration"`
	Warmup          string       `json:"warmup"`
	Rounds          int          `json:"rounds"`
	TTL             string       `json:"ttl"`
	RedsyncDelay    string       `json:"redsync_retry_delay"`
	RedislockDelay  string       `json:"redislock_linear_backoff"`
	MultiWait       string       `json:"multi_max_wait,omitempty"`     // set when the multi workload runs
	SemaphoreWait   string       `json:"semaphore_max_wait,omitempty"` // set when the semaphore workload runs
	Masters         string       `json:"masters,omitempty"`            // the masters of the workloads on several; set when one runs
	Workloads       []string     `json:"workloads"`
	Results         []result     `json:"results"`
	Floor           *floorResult `json:"floor,omitempty"` // the cross-process floor; nil when it did not run
	Scale           *scaleResult `json:"scale,omitempty"` // fairlock alone; nil when it did not run
	libs            []library    // the order of rows in the tables
}

// writeJSON writes r to the file at path.
func (r *report) writeJSON(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// printHeader prints what the run is and how the libraries are set up.
func (r *report) printHeader(w io.Writer) {
	fmt.Fprintf(w, "# fairlock and its peers\n\n")
	fmt.Fprintf(w, "%s; %s, GOMAXPROCS %d.\n", r.Server, r.Go, r.GOMAXPROCS)
	fmt.Fprintf(w, "Each run: fresh clients, %s warm-up, then %s measured (10,000 waiters: %s).\n",
		r.Warmup, r.Duration, r.WaitersDuration)
	if r.Rounds > 1 {
		fmt.Fprintf(w, "%d rounds: each library runs once per round, in turn; a row is its median round, and × best peer the median of the rounds' ratios.\n", r.Rounds)
	}
	fmt.Fprintf(w, "Lease, expiry and TTL %s for all; redsync retries every %s, redislock backs off %s (linear).\n",
		r.TTL, r.RedsyncDelay, r.RedislockDelay)
	if r.MultiWait != "" {
		fmt.Fprintf(w, "Several locks at once: redsync and redislock try each name, give all back when one is taken, "+
			"and wait at random up to %s; the atomic try-all sets every name or none in one script, and waits the same.\n", r.MultiWait)
	}
	if r.SemaphoreWait != "" {
		fmt.Fprintf(w, "Semaphore: redsync and redislock hold a lock name per permit, try the names in turn, "+
			"give back what they took when too few are free, and wait at random up to %s.\n", r.SemaphoreWait)
	}
	if r.Masters != "" {
		fmt.Fprintf(w, "RedLock: %s; redsync.New with one pool per master, fairlock.NewQuorum with one client per master.\n", r.Masters)
	}
}

// printWorkload prints the table of one workload's results; a semaphore
// workload's has columns of permits/s and of the heaviest callers' share
// of the grants after Jain, a multi or semaphore workload's a column of
// attempts per grant after the waits, and a workload on several masters
// a column of the fencing tokens read under the holds, last.
func printWorkload(w io.Writer, wl workload, rows []result) {
	fmt.Fprintf(w, "\n## %s (%s)\n\n", wl.title, wl.shape())
	semHead, semAlign, head, align := "", "", "", ""
	if wl.permits > 0 {
		semHead = fmt.Sprintf(" permits/s | weight %d: share of grants |", slices.Max(wl.weights))
		semAlign = " ---: | ---: |"
	}
	if wl.countsAttempts() {
		head, align = " attempts/grant |", " ---: |"
	}
	tokHead, tokAlign := "", ""
	if wl.masters > 0 {
		tokHead, tokAlign = " tokens |", " --- |"
	}
	fmt.Fprintln(w, "| library | grants/s | × best peer | Jain |"+semHead+" starved | wait p50 ms | wait p99 ms | wait max ms |"+head+
		" round trips/grant | commands/grant | dials | server µs/grant | script µs/call | errors | violations |"+tokHead)
	fmt.Fprintln(w, "| --- | ---: | ---: | ---: |"+semAlign+" ---: | ---: | ---: | ---: |"+align+" ---: | ---: | ---: | ---: | ---: | ---: | ---: |"+tokAlign)
	for _, r := range rows {
		sem, attempts, tokens := "", "", ""
		if wl.permits > 0 {
			sem = fmt.Sprintf(" %s | %s |", group(round(r.PermitsPerSec)), ifGranted(r, "%.3f", r.HeaviestShare))
		}
		if wl.countsAttempts() {
			attempts = " " + ifGranted(r, "%.2f", r.AttemptsPerGrant) + " |"
		}
		if wl.masters > 0 {
			tokens = " " + tokensCell(r) + " |"
		}
		fmt.Fprintf(w, "| %s | %s | %s | %.3f |%s %d | %s | %s | %s |%s %s | %s | %d | %s | %s | %d | %d |%s\n",
			cmp.Or(r.Label, r.Library), group(round(r.GrantsPerSec)), ratio(r.VsBestPeer), r.Jain, sem, r.Starved,
			ifGranted(r, "%.2f", r.WaitP50ms), ifGranted(r, "%.2f", r.WaitP99ms), ifGranted(r, "%.1f", r.WaitMaxms),
			attempts, ifGranted(r, "%.2f", r.RoundTripsPerGrant), ifGranted(r, "%.2f", r.CommandsPerGrant), r.Dials,
			ifGranted(r, "%.1f", r.ServerUsPerGrant), scriptUs(r), r.Errors, r.Violations, tokens)
	}
	for _, r := range rows {
		if r.FirstError != "" {
			fmt.Fprintf(w, "\n%s, first error: %s\n", cmp.Or(r.Label, r.Library), r.FirstError)
		}
	}
}

// A summaryColumn is one column of the summary: a library's result in
// the first of workloads that it ran, formatted by cell; in the floor's
// row, floor's cell, or a dash when floor is nil.
type summaryColumn struct {
	head      string
	workloads []string
	cell      func(result) string
	floor     func(floorResult) string
}

// summaryColumns are every column the summary can have, in their order.
func (r *report) summaryColumns() []summaryColumn {
	hold0 := []string{hold0Key}
	return []summaryColumn{
		{head: "uncontended Lock+Unlock ops/s, context with a deadline", workloads: []string{"uncontended"}, cell: rate},
		{head: "uncontended Lock+Unlock ops/s, context.Background()", workloads: []string{"uncontended-bg"}, cell: rate},
		{head: "uncontended Lock+Unlock ops/s, context with a deadline, ContextTimeoutEnabled", workloads: []string{"uncontended-ctt"}, cell: rate},
		{head: "commands per uncontended Lock+Unlock", workloads: []string{"uncontended", "uncontended-bg"},
			cell: func(x result) string { return ifGranted(x, "%.2f", x.CommandsPerGrant) }},
		{head: "hold 0, 4×4: grants/s", workloads: hold0, cell: func(x result) string {
			if x.Library == "fairlock" && r.Floor != nil && r.Floor.FairlockRatio > 0 {
				return fmt.Sprintf("%s (%s best peer, %s floor)", group(round(x.GrantsPerSec)), ratio(x.VsBestPeer), ratio(r.Floor.FairlockRatio))
			}
			return rate(x)
		}, floor: func(f floorResult) string { return group(round(f.HandOversPerSec)) + " hand-overs/s" }},
		{head: "hold 0, 4×4: Jain / max wait", workloads: hold0, cell: jainAndMax},
		{head: "hold 0, 1×16: grants/s", workloads: []string{"hold0-1x16"}, cell: rate},
		{head: "hold 0, 1×16: Jain / max wait", workloads: []string{"hold0-1x16"}, cell: jainAndMax},
		{head: "hold 5 ms, 4×4: Jain / max wait", workloads: []string{"hold5ms"}, cell: jainAndMax},
		{head: "hold 0, 4×4: round trips per grant", workloads: hold0,
			cell:  func(x result) string { return ifGranted(x, "%.2f", x.RoundTripsPerGrant) },
			floor: func(f floorResult) string { return fmt.Sprintf("%.2f", f.RoundTripsPerHand) }},
		{head: "hold 0, 4×4: server µs per grant", workloads: hold0,
			cell:  func(x result) string { return ifGranted(x, "%.1f", x.ServerUsPerGrant) },
			floor: func(f floorResult) string { return fmt.Sprintf("%.1f", f.ServerUsPerHandOver) }},
		{head: "many locks: grants/s", workloads: []string{"many"}, cell: rate},
		{head: "several locks at once: grants/s", workloads: []string{multiKey}, cell: rate},
		{head: "several locks at once: Jain / max wait", workloads: []string{multiKey}, cell: jainAndMax},
		{head: "several locks at once: attempts / round trips per grant", workloads: []string{multiKey}, cell: attemptsAndTrips},
		{head: "semaphore: grants/s", workloads: []string{semaphoreKey}, cell: rate},
		{head: "semaphore: Jain / max wait", workloads: []string{semaphoreKey}, cell: jainAndMax},
		{head: "semaphore: attempts / round trips per grant", workloads: []string{semaphoreKey}, cell: attemptsAndTrips},
		{head: "RedLock, 3 masters: grants/s", workloads: []string{redlockKey}, cell: rate},
		{head: "RedLock, 3 masters: Jain / max wait", workloads: []string{redlockKey}, cell: jainAndMax},
		{head: "RedLock, 3 masters: round trips per grant", workloads: []string{redlockKey},
			cell: func(x result) string { return ifGranted(x, "%.2f", x.RoundTripsPerGrant) }},
		{head: "RedLock, 3 masters: tokens", workloads: []string{redlockKey}, cell: tokensCell},
		{head: "10,000 waiters: grants/s / never granted", workloads: []string{"waiters"},
			cell: func(x result) string {
				return fmt.Sprintf("%s / %s", group(round(x.GrantsPerSec)), group(int64(x.Starved)))
			}},
	}
}

// printSummary prints the headline numbers of each library, one row
// each, in the columns of the workloads that ran, and the cross-process
// floor's in a row of its own when it ran and one of its columns is
// there. fairlock's rates carry its ratio to the best peer, and in hold0
// to the floor. It prints nothing when no workload of a column ran.
func (r *report) printSummary(w io.Writer) {
	var cols []summaryColumn
	for _, c := range r.summaryColumns() {
		if slices.ContainsFunc(r.Results, func(x result) bool { return slices.Contains(c.workloads, x.Workload) }) {
			cols = append(cols, c)
		}
	}
	if len(cols) == 0 {
		return
	}
	fmt.Fprintf(w, "\n## Summary\n\n")
	head, align := "| library |", "| --- |"
	for _, c := range cols {
		head += " " + c.head + " |"
		align += " ---: |"
	}
	fmt.Fprintln(w, head)
	fmt.Fprintln(w, align)
	for _, lib := range r.libs {
		cells, ran := []string{cmp.Or(lib.label, lib.name)}, false
		for _, c := range cols {
			x, ok := r.result(c.workloads, lib.name)
			if !ok {
				cells = append(cells, "—")
				continue
			}
			cells = append(cells, c.cell(x))
			ran = true
		}
		if ran {
			fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | "))
		}
	}
	f := r.Floor
	if f == nil || !slices.ContainsFunc(cols, func(c summaryColumn) bool { return c.floor != nil }) {
		return
	}
	cells := []string{"cross-process floor"}
	for _, c := range cols {
		if c.floor == nil {
			cells = append(cells, "—")
		} else {
			cells = append(cells, c.floor(*f))
		}
	}
	fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | "))
	if f.FairlockRatio > 0 {
		fmt.Fprintf(w, "\n%s; the goal is 0.90× or more.\n", floorLine(*f))
	}
}

// rate formats grants/s; in fairlock's row, with its ratio to the best
// peer when a peer ran.
func rate(x result) string {
	if x.Library == "fairlock" && x.VsBestPeer > 0 {
		return fmt.Sprintf("%s (%s best peer)", group(round(x.GrantsPerSec)), ratio(x.VsBestPeer))
	}
	return group(round(x.GrantsPerSec))
}

// result returns the result of library in the first of workloads it ran
// in, and whether there is one.
func (r *report) result(workloads []string, library string) (result, bool) {
	for _, wl := range workloads {
		for _, x := range r.Results {
			if x.Workload == wl && x.Library == library {
				return x, true
			}
		}
	}
	return result{}, false
}

func attemptsAndTrips(x result) string {
	return fmt.Sprintf("%s / %s", ifGranted(x, "%.2f", x.AttemptsPerGrant), ifGranted(x, "%.2f", x.RoundTripsPerGrant))
}

func jainAndMax(x result) string {
	return fmt.Sprintf("%.3f / %s ms", x.Jain, ifGranted(x, "%.1f", x.WaitMaxms))
}

// ifGranted formats v, a value per grant or over the grants, or a dash
// when there was no grant to measure it on.
func ifGranted(r result, format string, v float64) string {
	if r.Grants == 0 {
		return "—"
	}
	return fmt.Sprintf(format, v)
}

func ratio(v float64) string {
	if v == 0 {
		return "—"
	}
	return fmt.Sprintf("%.2f×", v)
}

func scriptUs(r result) string {
	if r.ScriptCalls == 0 {
		return "—"
	}
	return fmt.Sprintf("%.2f", r.ScriptUsPerCall)
}

// group formats n, which is not negative, with a comma between groups of
// three digits.
func group(n int64) string {
	s := strconv.FormatInt(n, 10)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

func round(v float64) int64 { return int64(math.Round(v)) }
