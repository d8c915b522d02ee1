package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// result is what one library did in one workload.
type result struct {
	Workload     string  `json:"workload"`
	Library      string  `json:"library"`
	Label        string  `json:"label,omitempty"` // names the row in the tables, when not Library
	Goroutines   int     `json:"goroutines"`
	Seconds      float64 `json:"seconds"`
	Grants       int64   `json:"grants"`
	GrantsPerSec float64 `json:"grants_per_sec"`
	// VsBestPeer is GrantsPerSec over the best peer's in the same
	// workload (fairlock's row holds the ratio of fairlock to the best
	// peer); 0 when no peer ran or none was granted anything.
	VsBestPeer float64 `json:"vs_best_peer"`
	// RoundGrantsPerSec holds each round's grants/s when -rounds is
	// above 1: the row is the median round's run, and VsBestPeer the
	// median of the rounds' ratios.
	RoundGrantsPerSec []float64 `json:"round_grants_per_sec,omitempty"`
	Jain              float64   `json:"jain"`
	Starved           int       `json:"starved"` // goroutines never granted
	WaitP50ms         float64   `json:"wait_p50_ms"`
	WaitP99ms         float64   `json:"wait_p99_ms"`
	WaitMaxms         float64   `json:"wait_max_ms"`
	AttemptsPerGrant  float64   `json:"attempts_per_grant,omitempty"` // multi and semaphore workloads: attempts at the whole set or the permits per grant, 1 when none was retried
	// PermitsPerSec and HeaviestShare are set in the semaphore workload:
	// the permits the grants took, per second, and the share of the
	// grants that went to the goroutines of the largest weight.
	PermitsPerSec      float64 `json:"permits_per_sec,omitempty"`
	HeaviestShare      float64 `json:"heaviest_share,omitempty"`
	RoundTripsPerGrant float64 `json:"round_trips_per_grant"`
	Dials              int64   `json:"dials"`
	ServerUsPerGrant   float64 `json:"server_cpu_us_per_grant"`
	ScriptCalls        int64   `json:"script_calls"`
	ScriptUsPerCall    float64 `json:"script_usec_per_call"`
	// Commands counts every command the server ran in the measured part,
	// those of scripts included (commandCalls); in the uncontended
	// workloads, CommandsPerGrant is the commands of one Lock+Unlock.
	Commands         int64   `json:"commands"`
	CommandsPerGrant float64 `json:"commands_per_grant"`
	Errors           int64   `json:"errors"`
	Violations       int64   `json:"violations"`
	// Fenced is set, in a workload on several masters, when the
	// library's holds carry fencing tokens, and Tokens counts those read
	// under the holds; TokensNotRising, those no greater than the token
	// read before them.
	Fenced          bool   `json:"fenced,omitempty"`
	Tokens          int64  `json:"tokens,omitempty"`
	TokensNotRising int64  `json:"tokens_not_rising,omitempty"`
	FirstError      string `json:"first_error,omitempty"`
}

// warmGoroutines caps the goroutines of a warm-up, which only has to open
// the connections and load the scripts.
const warmGoroutines = 64

// reading is what the counters said when the measured part of a run ended.
type reading struct {
	at     time.Time
	calls  count
	server serverStats
	err    error
}

// measure runs w with lib on on, the one server or the masters of a
// workload on several: fresh clients, a warm-up of warm on locks of their
// own, then d measured. Round trips and server statistics
// are read at the deadline, so that the waits the deadline cut short
// (and leaving their queue) are not counted. runID keeps the lock names
// of one invocation apart from any other's.
func measure(ctx context.Context, on servers, w workload, lib library, d, warm time.Duration, runID string) (res result, err error) {
	opts := on.options()
	if w.contextTimeouts {
		for i, o := range opts {
			withTimeouts := *o
			withTimeouts.ContextTimeoutEnabled = true
			opts[i] = &withTimeouts
		}
	}
	set, err := openClients(lib, opts, w.clients)
	if err != nil {
		return result{}, fmt.Errorf("%s: open clients: %w", lib.name, err)
	}
	defer func() {
		if cerr := set.close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("%s: close: %w", lib.name, cerr))
		}
	}()
	prefix := fmt.Sprintf("peers:%s:%s:%s", runID, w.key, lib.name)
	if warm > 0 {
		wctx, cancel := context.WithTimeout(ctx, warm)
		drive(wctx, w, set.lockers, prefix+":warm", min(w.goroutines, warmGoroutines))
		cancel()
	}

	var t *tally
	before, end, elapsed, err := measureWindow(ctx, on, set.hook, d, func(rctx context.Context) error {
		t = drive(rctx, w, set.lockers, prefix, w.goroutines)
		return nil
	})
	if err != nil {
		return result{}, err
	}
	res = summarize(w, lib, t, elapsed, end, before)
	if _, ok := set.lockers[0].(fencer); ok && w.masters > 0 {
		res.Fenced, res.Tokens, res.TokensNotRising = true, t.tokens.Load(), t.backwards.Load()
	}
	return res, nil
}

// measureWindow runs body for d on srv, one server or several, whose
// statistics it resets first, and reads the clients' round trips (hook) and the server's
// counters at the deadline, so that what the deadline cut short (and
// leaving a queue) is not counted. It returns the server's counters
// before, the reading at the deadline, the measured time, and body's
// error or the reading's.
func measureWindow(ctx context.Context, srv statsReader, hook *roundTrips, d time.Duration, body func(context.Context) error) (before serverStats, end reading, elapsed time.Duration, err error) {
	if err := srv.resetStats(ctx); err != nil {
		return serverStats{}, reading{}, 0, err
	}
	if before, err = srv.stats(ctx); err != nil {
		return serverStats{}, reading{}, 0, err
	}
	calls := hook.read()
	rctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	read := make(chan reading, 1)
	start := time.Now()
	go func() {
		<-rctx.Done()
		r := reading{at: time.Now(), calls: hook.read().minus(calls)}
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), unlockTimeout)
		defer cancel()
		r.server, r.err = srv.stats(sctx)
		read <- r
	}()
	err = body(rctx)
	end = <-read
	if err == nil {
		err = end.err
	}
	return before, end, end.at.Sub(start), err
}

// summarize turns a run's tally and counters into its result.
func summarize(w workload, lib library, t *tally, elapsed time.Duration, end reading, before serverStats) result {
	grants := t.grants()
	waits := summarizeWaits(t.waits)
	perGrant := func(x float64) float64 {
		if grants == 0 {
			return 0
		}
		return x / float64(grants)
	}
	res := result{
		Workload:           w.key,
		Library:            lib.name,
		Label:              lib.label,
		Goroutines:         w.goroutines,
		Seconds:            elapsed.Seconds(),
		Grants:             grants,
		GrantsPerSec:       float64(grants) / elapsed.Seconds(),
		Jain:               jain(t.counts),
		Starved:            t.starved(),
		WaitP50ms:          ms(waits.P50),
		WaitP99ms:          ms(waits.P99),
		WaitMaxms:          ms(waits.Max),
		RoundTripsPerGrant: perGrant(float64(end.calls.calls)),
		Dials:              end.calls.dials,
		ServerUsPerGrant:   perGrant(float64((end.server.cpu - before.cpu).Microseconds())),
		ScriptCalls:        end.server.scriptCalls,
		Commands:           end.server.commands - before.commands,
		CommandsPerGrant:   perGrant(float64(end.server.commands - before.commands)),
		Errors:             t.errors.Load(),
		Violations:         t.violations.Load(),
	}
	if w.countsAttempts() {
		res.AttemptsPerGrant = t.attemptsPerGrant()
	}
	if w.permits > 0 {
		permits, heaviest := w.weighed(t.counts)
		res.PermitsPerSec, res.HeaviestShare = float64(permits)/elapsed.Seconds(), heaviest
	}
	if end.server.scriptCalls > 0 {
		res.ScriptUsPerCall = float64(end.server.scriptUsec) / float64(end.server.scriptCalls)
	}
	if err := t.firstError(); err != nil {
		res.FirstError = err.Error()
	}
	return res
}

// compareToPeers sets VsBestPeer in the results of one workload.
// roundNote names round r of n in the log, when there are several.
func roundNote(r, n int) string {
	if n == 1 {
		return ""
	}
	return fmt.Sprintf(" (round %d of %d)", r+1, n)
}

// medianRuns returns, for each library, the run of runs[i] (one per round)
// whose grants/s is the median (the lower of the two middle ones for an
// even count), with every round's grants/s in RoundGrantsPerSec, and its
// ratio to the best peer as the median of the rounds' ratios: each round
// sets the libraries side by side within a few seconds, so that the
// machine's speed, which drifts over minutes, moves both sides of a ratio
// alike. With one round it is the run itself, compared as compareToPeers
// does.
func medianRuns(runs [][]result) []result {
	rows := make([]result, len(runs))
	rounds := len(runs[0])
	for i, rs := range runs {
		byRate := slices.Clone(rs)
		slices.SortFunc(byRate, func(a, b result) int { return cmp.Compare(a.GrantsPerSec, b.GrantsPerSec) })
		rows[i] = byRate[(len(byRate)-1)/2]
		if rounds > 1 {
			for _, r := range rs {
				rows[i].RoundGrantsPerSec = append(rows[i].RoundGrantsPerSec, r.GrantsPerSec)
			}
		}
	}
	if rounds == 1 {
		compareToPeers(rows)
		return rows
	}
	ratios := make([][]float64, len(runs))
	for r := range rounds {
		round := make([]result, len(runs))
		for i := range runs {
			round[i] = runs[i][r]
		}
		compareToPeers(round)
		for i := range round {
			ratios[i] = append(ratios[i], round[i].VsBestPeer)
		}
	}
	for i := range rows {
		slices.Sort(ratios[i])
		rows[i].VsBestPeer = ratios[i][(len(ratios[i])-1)/2]
	}
	return rows
}

func compareToPeers(rows []result) {
	var best float64
	for _, r := range rows {
		if r.Library != "fairlock" {
			best = max(best, r.GrantsPerSec)
		}
	}
	for i := range rows {
		if best > 0 {
			rows[i].VsBestPeer = rows[i].GrantsPerSec / best
		}
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
