package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/fairlock/fairlock"
)

// stamp is the text form of an instant of the server's clock.
func stamp(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05.000") + " UTC" }

// viewText is the text form of a view: each lock in use, or that none is.
func viewText(v view, masters []string) string {
	var b strings.Builder
	if !v.found() {
		fmt.Fprintf(&b, "lock %q at %s (server clock): not held, no waiters\n", v.name, stamp(v.at))
		return b.String()
	}
	for i, st := range v.locks {
		if i > 0 {
			b.WriteString("\n")
		}
		lockText(&b, v.name, st, masters)
	}
	return b.String()
}

// lockText writes the text form of one lock: its kind and use, its
// holders in the order of their grants, its line in the order it is
// served, and on a quorum each master's view.
func lockText(b *strings.Builder, name string, st fairlock.LockState, masters []string) {
	kind := string(st.Kind)
	if st.Masters != nil {
		kind += fmt.Sprintf(", quorum of %d masters: the majority's view", len(st.Masters))
	}
	fmt.Fprintf(b, "lock %q (%s) at %s (server clock)\n", name, kind, stamp(st.At))
	body(b, name, st, "")
	for i, m := range st.Masters {
		if m.Err != nil {
			fmt.Fprintf(b, "master %d %s: no answer: %v\n", i+1, masterName(masters, i), m.Err)
			continue
		}
		fmt.Fprintf(b, "master %d %s at %s:\n", i+1, masterName(masters, i), stamp(m.State.At))
		s := m.State
		s.Kind = st.Kind
		body(b, name, s, "  ")
	}
}

// body writes a lock's use, holders and line, each line after indent.
func body(b *strings.Builder, name string, st fairlock.LockState, indent string) {
	fmt.Fprintf(b, "%s%s\n", indent, useText(st))
	if len(st.Holders) > 0 {
		fmt.Fprintf(b, "%sholders (%d, in order of grant):\n", indent, len(st.Holders))
		for i, h := range st.Holders {
			fmt.Fprintf(b, "%s  %d. %s\n", indent, i+1, holderText(st, h))
		}
	}
	if len(st.Waiters) == 0 {
		fmt.Fprintf(b, "%sno waiters\n", indent)
		return
	}
	fmt.Fprintf(b, "%swaiters (%d, in order):\n", indent, len(st.Waiters))
	for i, w := range st.Waiters {
		fmt.Fprintf(b, "%s  %d. %s\n", indent, i+1, waiterText(name, w))
	}
}

// useText says how much of the lock is held.
func useText(st fairlock.LockState) string {
	switch {
	case st.Kind == fairlock.KindSemaphore && st.Capacity == 0:
		return "permits: none held (a Semaphore's permits are stored with its holds)"
	case st.Kind == fairlock.KindSemaphore:
		return fmt.Sprintf("permits: %d of %d held, %d free", st.Used, st.Capacity, max(st.Capacity-st.Used, 0))
	case st.Kind == fairlock.KindRWMutex && st.Writer:
		return "held by a writer"
	case st.Kind == fairlock.KindRWMutex && st.Readers > 0:
		return fmt.Sprintf("held by %d reader(s)", st.Readers)
	case st.Kind == fairlock.KindElection && len(st.Holders) > 0:
		return "led: the holder is the leader, its token the term"
	case st.Kind == fairlock.KindElection:
		return "no leader"
	case len(st.Holders) > 0:
		return "held"
	}
	return "not held"
}

// holderText is one hold on one line.
func holderText(st fairlock.LockState, h fairlock.Holder) string {
	role := ""
	switch {
	case st.Kind == fairlock.KindElection:
		role = "leader  "
	case st.Kind != fairlock.KindRWMutex:
	case h.Write:
		role = "writer  "
	default:
		role = "reader  "
	}
	s := fmt.Sprintf("%sowner %s  client %s  weight %d  count %d  token %d  held for %s  lease left %s",
		role, h.Owner, clientText(h.Client, h.ClientName), holderWeight(st, h), h.Count, h.Token,
		round(h.HeldFor), round(h.LeaseLeft))
	if st.Kind == fairlock.KindElection {
		s += "  value " + valueText(h.Value)
	}
	return s
}

// waiterText is one waiter on one line.
func waiterText(name string, w fairlock.Waiter) string {
	left := round(w.TimeLeft) + " left"
	if w.TimeLeft <= 0 {
		left = "gone, to be dropped"
	}
	s := fmt.Sprintf("%-7s owner %s  client %s  weight %d  waited %s  %s",
		w.Kind, w.Owner, clientText(w.Client, w.ClientName), w.Weight, round(w.WaitedFor), left)
	if w.Kind == fairlock.WaitsCampaign {
		s += "  value " + valueText(w.Value)
	}
	if w.Kind == fairlock.WaitsTicket {
		if others := otherLocks(w, name); len(others) > 0 {
			s += "  with " + strings.Join(others, ", ")
		} else if w.Locks == nil {
			s += "  (its other locks: not known, the ticket ended as it was read)"
		}
	}
	return s
}

// valueShown is the most bytes of an Election's value that the text
// shows; the JSON has it whole.
const valueShown = 120

// valueText is an Election's value, quoted as Go quotes a string, cut
// after valueShown bytes (at a character's start), with its length then.
func valueText(v string) string {
	if len(v) <= valueShown {
		return strconv.Quote(v)
	}
	cut := valueShown
	for cut > 0 && !utf8.RuneStart(v[cut]) {
		cut--
	}
	return fmt.Sprintf("%s... (%d bytes)", strconv.Quote(v[:cut]), len(v))
}

// round is d to the millisecond.
func round(d time.Duration) string { return d.Round(time.Millisecond).String() }

// clientText is a Client's id, with its name when it has one.
func clientText(id, name string) string {
	if name != "" {
		return fmt.Sprintf("%s (%q)", orUnknown(id), name)
	}
	return orUnknown(id)
}

func orUnknown(s string) string {
	if s == "" {
		return "(unknown)"
	}
	return s
}
