package main

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// fault is one fault the run injected (-chaos, -restart-master), for the
// report and the rules of excuse. Times are wall clock, zero when the
// step was not reached; the same times in seconds after the start of the
// run, and the outcome in words, are filled in when the run is over.
type fault struct {
	N      int    `json:"n"` // 1 for the first
	Kind   string `json:"kind"`
	Target string `json:"target"` // the server it hit, in words
	// Locks are the locks the fault could touch, when not every one: on
	// a Cluster, those served by the master it killed.
	Locks []string `json:"locks,omitempty"`

	Injected time.Time `json:"injected"`          // SIGKILL or SIGSTOP sent, SENTINEL FAILOVER asked
	Exited   time.Time `json:"exited,omitzero"`   // the killed process had exited
	Back     time.Time `json:"back,omitzero"`     // answering again (restarted or resumed), or the failover done
	Ready    time.Time `json:"ready,omitzero"`    // ready for another fault: the killed server back as a replica, and in sync
	Primary  string    `json:"primary,omitempty"` // the primary after a failover
	Err      string    `json:"err,omitempty"`     // the fault could not be made or waited out

	InjectedAt float64 `json:"injected_at_s"`
	BackAt     float64 `json:"back_at_s,omitempty"`
	ReadyAt    float64 `json:"ready_at_s,omitempty"`
	Outcome    string  `json:"outcome"`
}

// lostWrites returns the stretch in which the fault may have undone
// writes a server had acknowledged, for the faults that can: from the
// SIGKILL of a server without persistence until its process had exited
// (restart-empty); from the SIGKILL of a primary, or from SENTINEL
// FAILOVER, until the set was ready for another fault, the old primary a
// replica in sync with the new one (kill-primary, failover). A killed
// primary's replicas may not have had its last writes yet; a graceful
// failover's old primary takes writes until it is made a replica, which
// the sentinels do only when they next look at it, and then drops them;
// and until the set is settled Sentinel, or the Cluster, may fail over
// again: a replica promoted in haste may itself be judged down (a second
// before it answers, on a busy machine) and replaced by another, which
// never had what the first acknowledged. A stretch whose end was never
// reached lasts for ever.
func (f *fault) lostWrites() (outage, bool) {
	switch f.Kind {
	case chaosRestartEmpty:
		return outage{f.Injected, firstSet(f.Exited, forever)}, !f.Injected.IsZero()
	case chaosKillPrimary, chaosFailover:
		return outage{f.Injected, firstSet(f.Ready, forever)}, !f.Injected.IsZero()
	}
	return outage{}, false
}

// heldUp returns the stretch in which the fault may have taken a hold
// away or kept its renewals from being answered, for the faults that
// can: the stretch of lostWrites (a hold live then could be neither
// renewed nor released, or may be gone from what the fault left); for a
// pause, from the SIGSTOP until the SIGCONT; for a restart-aof, from the
// SIGKILL until the server answered again, its file loaded (it loses no
// hold, but a hold whose renewals it kept unanswered for five sixths of
// the lease is given up by its holder, as the lock promises).
func (f *fault) heldUp() (outage, bool) {
	switch f.Kind {
	case chaosPause, chaosRestartAOF:
		return outage{f.Injected, firstSet(f.Back, forever)}, !f.Injected.IsZero()
	}
	return f.lostWrites()
}

// touches reports whether the fault could touch the lock named lock (a
// MultiLock's names joined by "+": any of them).
func (f *fault) touches(lock string) bool {
	if len(f.Locks) == 0 {
		return true
	}
	for name := range strings.SplitSeq(lock, "+") {
		if slices.Contains(f.Locks, name) {
			return true
		}
	}
	return false
}

// over reports whether the fault is over: its server back (or the
// failover done), or the fault failed.
func (f *fault) over() bool { return !f.Back.IsZero() || f.Err != "" }

// settle fills in the times relative to start, the start of the run, and
// the outcome.
func (f *fault) settle(start time.Time) {
	rel := func(t time.Time) float64 {
		if t.IsZero() {
			return 0
		}
		return t.Sub(start).Seconds()
	}
	f.InjectedAt, f.BackAt, f.ReadyAt = rel(f.Injected), rel(f.Back), rel(f.Ready)
	f.Outcome = f.describe(rel)
}

// faultSteps names the steps of each kind of fault, as the report says
// them: its injection, its server back (or the failover done; PRIMARY
// stands for the new primary), and, where it is another step, ready for
// another fault.
var faultSteps = map[string][3]string{
	chaosRestartAOF:   {"SIGKILL", "restarted on its append-only file", ""},
	chaosRestartEmpty: {"SIGKILL (its keys lost)", "restarted empty", ""},
	chaosPause:        {"SIGSTOP", "SIGCONT", ""},
	chaosFailover:     {"SENTINEL FAILOVER", "PRIMARY the primary", "its replicas in sync"},
	chaosKillPrimary:  {"SIGKILL", "PRIMARY took over", "the killed server back as its replica, in sync"},
}

// describe says what the fault did, its times given by rel.
func (f *fault) describe(rel func(time.Time) float64) string {
	steps := faultSteps[f.Kind]
	var parts []string
	if !f.Injected.IsZero() {
		parts = append(parts, fmt.Sprintf("%s at +%.2fs", steps[0], rel(f.Injected)))
	}
	if !f.Back.IsZero() {
		parts = append(parts, fmt.Sprintf("%s at +%.2fs (%.2fs after)",
			strings.ReplaceAll(steps[1], "PRIMARY", f.Primary), rel(f.Back), f.Back.Sub(f.Injected).Seconds()))
	}
	if !f.Ready.IsZero() && steps[2] != "" {
		parts = append(parts, fmt.Sprintf("%s at +%.2fs", steps[2], rel(f.Ready)))
	}
	if f.Err != "" {
		parts = append(parts, "failed: "+f.Err)
	}
	return strings.Join(parts, ", ")
}

// faultSums is what the report says of the faults: the plan, and each
// fault injected, in order.
type faultSums struct {
	Kind   string  `json:"kind"`
	Plan   string  `json:"plan"`
	Faults []fault `json:"faults"`
}

// write writes the faults' lines of the text report.
func (s *faultSums) write(b *strings.Builder) {
	n := len(s.Faults)
	switch n {
	case 0:
		fmt.Fprintf(b, "faults:      %s: none injected, the run ended first\n", s.Plan)
		return
	case 1:
		fmt.Fprintf(b, "faults:      %s: 1 injected\n", s.Plan)
	default:
		fmt.Fprintf(b, "faults:      %s: %d injected\n", s.Plan, n)
	}
	for _, f := range s.Faults {
		where := f.Target
		if len(f.Locks) > 0 {
			where += " (serving " + strings.Join(f.Locks, ", ") + ")"
		}
		fmt.Fprintf(b, "  %3d. +%.2fs %s %s: %s\n", f.N, f.InjectedAt, f.Kind, where, f.Outcome)
	}
}
