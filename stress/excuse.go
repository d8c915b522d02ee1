package main

import (
	"fmt"
	"time"
)

// excuse marks the violations that a fault of the run explains, by one
// rule per kind of verdict and of fault (docs/stress.md, "Faults
// (-chaos)"), each as narrow as the record allows:
//   - fifo, barging: the waiter passed may have lost its place to the
//     fault, and the grant came after: a fault that may have undone
//     acknowledged writes (see fault.lostWrites) overlaps the stretch from
//     the send of the waiter's join to the grant that passed it. The
//     waiter's join, or the polls that kept its place, may be among the
//     writes undone; a grant before the fault cannot have passed it for
//     that reason.
//   - lease-lost: the hold was live while the fault could take it away
//     or hold its renewals or its release up (see fault.heldUp): its call
//     began before that stretch ended, and its Unlock had not returned
//     when the stretch began (an Unlock that Redis does not answer ends
//     with the lease lost when the lease runs out first). A quorum's
//     Campaign that failed as it lost the lease before it could commit
//     its term: the call had not returned when the stretch began.
//   - lag, final-view (the election kind): a stretch in which the fault
//     held Redis up, and the observers' reads and pushes with it, or
//     recoverWithin after it (a Client's watcher of an election backs
//     off up to that while Redis does not answer), overlaps the stretch
//     in which the observer was to see the change: from the time the
//     change was certain to the bound after it; for a final view, from
//     the word that every candidate had ended to the observer's end.
//   - view-order (the election kind) of a value older than one seen, or
//     of a term after its end: a fault that may have undone
//     acknowledged writes overlaps the stretch from the receipt of the
//     newer view to that of the older: the proclaim or the release the
//     newer view showed may be among the writes undone. A term lower
//     than one seen before is never excused: Observe never sends one.
//   - view (the election kind) of a candidate's value under another
//     term than its own: a fault that may have undone acknowledged
//     writes overlaps the stretch from the candidate's Campaign (or the
//     proclaim of the value) to the receipt of the view. The election
//     the candidate was told of may be among the writes undone, and its
//     entry, still in line in what the fault left, elected again, under
//     a term of its own, with the candidate's value: a leadership whose
//     Client no longer waits for it, until the lease runs out or the
//     Client's audit of its ended calls clears it.
//
// A fault excuses only verdicts on the locks it could touch. No other
// verdict is ever excused: an overlap, a capacity overrun, a token that
// repeats or goes back, a waiter left behind, residue, an error, a worker
// that failed, a MultiLock that held part of its names or took them out
// of order, a bakery pass (the bakery check itself leaves out the pairs a
// master's lost keys can explain), any other view that stands for no
// state of the election, an observer's term lower than one it saw. A restart-aof
// excuses no lost write: its server keeps every write it acknowledged;
// it excuses only what holding Redis up explains (lease-lost, lag,
// final-view).
//
// origin is the start of the run, for the times of the reasons.
func excuse(vs []violation, faults []fault, origin time.Time) {
	for i := range vs {
		v := &vs[i]
		for j := range faults {
			if why := explains(&faults[j], v); why != "" {
				v.Excused = fmt.Sprintf("fault %d (%s of %s at +%.2fs) %s",
					faults[j].N, faults[j].Kind, faults[j].Target, faults[j].Injected.Sub(origin).Seconds(), why)
				break
			}
		}
	}
}

// explains says how fault f explains violation v, or returns "" if it
// does not (see excuse).
func explains(f *fault, v *violation) string {
	if !f.touches(v.Lock) {
		return ""
	}
	switch {
	case v.window != nil:
		return explainsView(f, v)
	case v.hold == nil:
		return ""
	}
	switch v.Kind {
	case outOfOrder, barged:
		o, ok := f.lostWrites()
		if ok && v.waiter != nil && len(v.waiter.Joins) > 0 && lostKeys([]outage{o}, v.waiter.Joins[0].Sent, v.hold.Granted) {
			return "may have undone the waiter's place in line before the grant that passed it"
		}
	case leaseLost:
		o, ok := f.heldUp()
		if ok && live(v.hold, o) {
			return "came while the hold was live"
		}
	}
	return ""
}

// explainsView says how fault f explains v, a verdict on an election's
// observer with its window, or returns "" if it does not (see excuse).
func explainsView(f *fault, v *violation) string {
	w := *v.window
	switch v.Kind {
	case viewLag, viewFinal:
		o, ok := f.heldUp()
		if ok && lostKeys([]outage{{o.From, o.To.Add(recoverWithin)}}, w.From, w.To) {
			return "held Redis up while the observer was to see the change"
		}
	case viewBack:
		o, ok := f.lostWrites()
		if ok && lostKeys([]outage{o}, w.From, w.To) {
			return "may have undone what the newer view showed before the older was read"
		}
	case viewFalse:
		o, ok := f.lostWrites()
		if ok && lostKeys([]outage{o}, w.From, w.To) {
			return "may have undone the candidate's election, its entry left in line to be elected again"
		}
	}
	return ""
}

// live reports whether hold a may have been live during o: its call
// began before o ended, and its Unlock (or, for a Campaign that failed
// as it lost the leadership's lease, the call) had not returned when o
// began.
func live(a *attempt, o outage) bool {
	end := firstSet(a.UnlockEnd, a.Ended)
	return began(a).Before(o.To) && (end.IsZero() || !end.Before(o.From))
}

// counted returns how many of vs are not excused: what the exit status
// counts.
func counted(vs []violation) int {
	n := 0
	for _, v := range vs {
		if v.Excused == "" {
			n++
		}
	}
	return n
}
