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
//     with the lease lost when the lease runs out first).
//
// A fault excuses only verdicts on the locks it could touch. No other
// verdict is ever excused: an overlap, a capacity overrun, a token that
// repeats or goes back, a waiter left behind, residue, an error, a worker
// that failed, a MultiLock that held part of its names or took them out
// of order, a bakery pass (the bakery check itself leaves out the pairs a
// master's lost keys can explain). Nor does a restart-aof excuse any: its
// server keeps every write it acknowledged and is back at once.
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
	if v.hold == nil || !f.touches(v.Lock) {
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

// live reports whether hold a may have been live during o: its call
// began before o ended, and its Unlock had not returned when o began.
func live(a *attempt, o outage) bool {
	return began(a).Before(o.To) && (a.UnlockEnd.IsZero() || !a.UnlockEnd.Before(o.From))
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
