package main

import (
	"context"
	"slices"
	"time"

	"github.com/fairlock/fairlock"
)

// view is what the command shows of one name: every lock of that name in
// use, of every kind, read at one instant of the server's clock.
type view struct {
	name  string
	at    time.Time            // the server's clock when the locks were read
	locks []fairlock.LockState // those in use: a Mutex, a Semaphore, a RWMutex, an Election, in that order
}

// found reports whether anyone holds a lock of the name or waits for one.
func (v view) found() bool { return len(v.locks) > 0 }

// readView reads every lock called name (InspectAll), and the server's
// clock: when none is in use, from the state of the free Mutex
// (Inspect), which also shows a lock taken meanwhile.
func readView(ctx context.Context, fl *fairlock.Client, name string) (view, error) {
	sts, err := fl.InspectAll(ctx, name)
	if err != nil {
		return view{}, err
	}
	if len(sts) == 0 {
		st, err := fl.Inspect(ctx, name)
		if err != nil {
			return view{}, err
		}
		sts = []fairlock.LockState{st}
	}
	v := view{name: name}
	for _, st := range sts {
		if st.At.After(v.at) {
			v.at = st.At
		}
		if inUse(st) {
			v.locks = append(v.locks, st)
		}
	}
	return v, nil
}

// inUse reports whether anyone holds st or waits for it: on a quorum, in
// the majority's view or in any master's.
func inUse(st fairlock.LockState) bool {
	return len(st.Holders) > 0 || len(st.Waiters) > 0 ||
		slices.ContainsFunc(st.Masters, func(m fairlock.MasterState) bool { return m.Err == nil && inUse(m.State) })
}

// holderWeight is the weight shown for a hold: a Semaphore's permits, 1
// for the others (a RWMutex's writer holds it all, which Write says).
func holderWeight(st fairlock.LockState, h fairlock.Holder) int64 {
	if st.Kind == fairlock.KindSemaphore {
		return h.Weight
	}
	return 1
}

// otherLocks are the names a ticket waits for besides name.
func otherLocks(w fairlock.Waiter, name string) []string {
	var out []string
	for _, n := range w.Locks {
		if n != name {
			out = append(out, n)
		}
	}
	return out
}

// ms is d in whole milliseconds.
func ms(d time.Duration) int64 { return d.Milliseconds() }
