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
	TTL             string       `json:"ttl"`
	RedsyncDelay    string       `json:"redsync_retry_delay"`
	RedislockDelay  string       `json:"redislock_linear_backoff"`
	MultiWait       string       `json:"multi_max_wait,omitempty"`     // set when the multi workload runs
	SemaphoreWait   string       `json:"semaphore_max_wait,omitempty"` // set when the semaphore workload runs
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
}

// printWorkload prints the table of one workload's results; a semaphore
// workload's has columns of permits/s and of the heaviest callers' share
// of the grants after Jain, and a multi or semaphore workload's a column
// of attempts per grant after the waits.
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
	fmt.Fprintln(w, "| library | grants/s | × best peer | Jain |"+semHead+" starved | wait p50 ms | wait p99 ms | wait max ms |"+head+
		" round trips/grant | commands/grant | dials | server µs/grant | EVALSHA µs/call | errors | violations |")
	fmt.Fprintln(w, "| --- | ---: | ---: | ---: |"+semAlign+" ---: | ---: | ---: | ---: |"+align+" ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	for _, r := range rows {
		sem, attempts := "", ""
		if wl.permits > 0 {
			sem = fmt.Sprintf(" %s | %s |", group(round(r.PermitsPerSec)), ifGranted(r, "%.3f", r.HeaviestShare))
		}
		if wl.countsAttempts() {
			attempts = " " + ifGranted(r, "%.2f", r.AttemptsPerGrant) + " |"
		}
		fmt.Fprintf(w, "| %s | %s | %s | %.3f |%s %d | %s | %s | %s |%s %s | %s | %d | %s | %s | %d | %d |\n",
			cmp.Or(r.Label, r.Library), group(round(r.GrantsPerSec)), ratio(r.VsBestPeer), r.Jain, sem, r.Starved,
			ifGranted(r, "%.2f", r.WaitP50ms), ifGranted(r, "%.2f", r.WaitP99ms), ifGranted(r, "%.1f", r.WaitMaxms),
			attempts, ifGranted(r, "%.2f", r.RoundTripsPerGrant), ifGranted(r, "%.2f", r.CommandsPerGrant), r.Dials,
			ifGranted(r, "%.1f", r.ServerUsPerGrant), evalsha(r), r.Errors, r.Violations)
	}
	for _, r := range rows {
		if r.FirstError != "" {
			fmt.Fprintf(w, "\n%s, first error: %s\n", cmp.Or(r.Label, r.Library), r.FirstError)
		}
	}
}

// printSummary prints the headline numbers of each library, one row
// each, and the cross-process floor's in a row of its own when it ran.
// fairlock's rates carry its ratio to the best peer, and in hold0 to the
// floor.
func (r *report) printSummary(w io.Writer) {
	fmt.Fprintf(w, "\n## Summary\n\n")
	fmt.Fprintln(w, "| library | uncontended Lock+Unlock ops/s, context with a deadline | same, context.Background() "+
		"| commands per uncontended Lock+Unlock | hold 0, 4×4: grants/s | hold 0, 4×4: Jain / max wait "+
		"| hold 0, 1×16: grants/s | hold 0, 1×16: Jain / max wait | hold 5 ms, 4×4: Jain / max wait "+
		"| hold 0, 4×4: round trips per grant | hold 0, 4×4: server µs per grant |")
	fmt.Fprintln(w, "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	for _, lib := range r.libs {
		if lib.multiOnly {
			continue // none of the summary's workloads runs it
		}
		cells := []string{lib.name}
		cells = append(cells, r.cell("uncontended", lib.name, rate))
		cells = append(cells, r.cell("uncontended-bg", lib.name, rate))
		commands := r.cell("uncontended", lib.name, commandsPerGrant)
		if commands == "—" {
			commands = r.cell("uncontended-bg", lib.name, commandsPerGrant)
		}
		cells = append(cells, commands)
		cells = append(cells, r.cell(hold0Key, lib.name, func(x result) string {
			if x.Library == "fairlock" && r.Floor != nil && r.Floor.FairlockRatio > 0 {
				return fmt.Sprintf("%s (%s best peer, %s floor)", group(round(x.GrantsPerSec)), ratio(x.VsBestPeer), ratio(r.Floor.FairlockRatio))
			}
			return rate(x)
		}))
		cells = append(cells, r.cell(hold0Key, lib.name, jainAndMax))
		cells = append(cells, r.cell("hold0-1x16", lib.name, rate))
		cells = append(cells, r.cell("hold0-1x16", lib.name, jainAndMax))
		cells = append(cells, r.cell("hold5ms", lib.name, jainAndMax))
		cells = append(cells, r.cell(hold0Key, lib.name, func(x result) string { return ifGranted(x, "%.2f", x.RoundTripsPerGrant) }))
		cells = append(cells, r.cell(hold0Key, lib.name, func(x result) string { return ifGranted(x, "%.1f", x.ServerUsPerGrant) }))
		fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | "))
	}
	if f := r.Floor; f != nil {
		fmt.Fprintf(w, "| cross-process floor | — | — | — | %s hand-overs/s | — | — | — | — | %.2f | %.1f |\n",
			group(round(f.HandOversPerSec)), f.RoundTripsPerHand, f.ServerUsPerHandOver)
		if f.FairlockRatio > 0 {
			fmt.Fprintf(w, "\n%s; the goal is 0.90× or more.\n", floorLine(*f))
		}
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

func commandsPerGrant(x result) string { return ifGranted(x, "%.2f", x.CommandsPerGrant) }

// cell formats the result of library in workload, or a dash when it did
// not run.
func (r *report) cell(workload, library string, format func(result) string) string {
	for _, x := range r.Results {
		if x.Workload == workload && x.Library == library {
			return format(x)
		}
	}
	return "—"
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

func evalsha(r result) string {
	if r.EvalshaCalls == 0 {
		return "—"
	}
	return fmt.Sprintf("%.2f", r.EvalshaUsPerCall)
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
