package main

import (
	"context"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/fairlock/fairlock"
)

// part is what a MultiLock attempt did on one of its names, as the
// Client's Observer reported it. Every time is read by the Observer on
// the goroutine of the call, so each brackets its event as an attempt's
// times do. How the names are taken depends on the deployment:
//   - on one server, with one call, a ticket, that joins every name's line
//     at once and is granted every name at once: its wait events carry
//     the names (fairlock.Event.Locks), and the attempt keeps one part per
//     name, each with the call's id and every time of its wait (Ticket);
//   - on a Cluster, one name after another, each with a call of that
//     name's Mutex: one part per call.
//
// Each hold ends with an event of its own name either way.
type part struct {
	Name     string    `json:"name"`
	Call     string    `json:"call"`              // the Observer's id of the call
	Ticket   bool      `json:"ticket,omitempty"`  // the call was a ticket for all the parts that share it
	Start    time.Time `json:"start"`             // WaitStarted seen: before the call sent anything
	Joins    []join    `json:"joins,omitempty"`   // appended to the name's queue
	Kept     time.Time `json:"kept,omitzero"`     // its place in line is certain until then (see keep)
	Granted  time.Time `json:"granted,omitzero"`  // Granted seen: after the grant
	Token    int64     `json:"token,omitempty"`   // the grant's fencing token, as the Observer gave it (a ticket's: its first name's only)
	Push     float64   `json:"push_ms,omitempty"` // a pushed hand-over's latency (fairlock.Event.HandOver; a ticket's: on its first name)
	Ended    time.Time `json:"ended,omitzero"`    // WaitEnded seen: the call failed, before anything it failed for was given back
	Released time.Time `json:"released,omitzero"` // HoldEnded seen: the hold of the name had ended

	broken bool // a poll came too late to be sure of the place (see keep)
}

// clone returns a copy of a that shares nothing with it.
func (a *attempt) clone() attempt {
	b := *a
	b.Joins = slices.Clone(a.Joins)
	b.Names = slices.Clone(a.Names)
	b.Parts = slices.Clone(a.Parts)
	for i := range b.Parts {
		b.Parts[i].Joins = slices.Clone(b.Parts[i].Joins)
	}
	b.Tokens = maps.Clone(a.Tokens)
	b.Proclaims = slices.Clone(a.Proclaims)
	return b
}

// multiAttempt makes one attempt on a random set of names: TryLock or
// Lock (maybe with a short deadline) of a MultiLock, then, when granted,
// re-enters the holds, keeps them for a while and unlocks every level. A
// set of one name is taken with that name's Mutex, so that Mutex and
// MultiLock callers mix.
func (w *worker) multiAttempt(cfg *config, rec recorder) {
	n := cfg.Names.draw(w.rng)
	picked := make([]int, 0, n) // n distinct names; n is at most len(w.mutexes)
	for len(picked) < n {
		if i := w.rng.IntN(len(w.mutexes)); !slices.Contains(picked, i) {
			picked = append(picked, i)
		}
	}
	p := w.draw(cfg)
	if n == 1 {
		w.lockMutex(w.mutexes[picked[0]], p, cfg, rec)
		return
	}
	names := make([]string, n)
	for i, j := range picked {
		names[i] = w.mutexes[j].Name()
	}
	ml := w.client.MultiLock(names)
	names = ml.Names()
	a := &attempt{Worker: w.id, Lock: strings.Join(names, "+"), Kind: p.kind, Names: names, Outcome: outPending}
	if !w.begin(a) {
		return
	}
	defer w.finish(rec)
	ctx := context.WithValue(context.Background(), steps{}, w.partSteps(cfg.WaiterTTL))
	held, end := w.call(ctx, p, ml)
	if held == nil {
		return
	}
	tokens := make(map[string]int64, len(names))
	for _, name := range names {
		t, err := ml.Token(held, name)
		if err != nil {
			w.fail("token of %s: %v", name, err)
		}
		tokens[name] = t
	}
	w.update(func(a *attempt) { a.Granted, a.Tokens = end, tokens })
	w.hold(holding{
		held: held,
		nest: reenter(ml),
		same: func(ictx context.Context) {
			for name, token := range tokens {
				if t, err := ml.Token(ictx, name); err != nil || t != token {
					w.fail("re-entry has token %d of %s (%v), the hold %d", t, name, err, token)
				}
			}
		},
		release: ml.Unlock,
	}, p.holdFor, p.depth)
}

// partSteps returns the record of a MultiLock attempt's steps: each event
// of a call goes to the parts of that call (an EventHoldEnded to the part of its
// own name), and a ticket's EventGranted token to the part of its first name,
// the one whose token the event carries. Re-entries (no call id) and the
// events of calls that are not the attempt's are left out.
func (w *worker) partSteps(ttl time.Duration) func(fairlock.Event) {
	return func(e fairlock.Event) {
		now := wall(time.Now())
		if e.Call == "" {
			return
		}
		w.update(func(a *attempt) {
			if e.Kind == fairlock.EventWaitStarted {
				if len(e.Locks) == 0 {
					a.Parts = append(a.Parts, part{Name: e.Lock, Call: e.Call, Start: now})
				}
				for _, name := range e.Locks {
					a.Parts = append(a.Parts, part{Name: name, Call: e.Call, Ticket: true, Start: now})
				}
				return
			}
			tokenOf := e.Lock // the name whose token a Granted event carries
			if len(e.Locks) > 0 {
				tokenOf = e.Locks[0]
			}
			for i := range a.Parts {
				p := &a.Parts[i]
				if p.Call != e.Call {
					continue
				}
				switch e.Kind {
				case fairlock.EventQueued:
					p.Joins = append(p.Joins, join{Sent: wall(e.Sent), Answered: wall(e.Answered)})
				case fairlock.EventPolled:
					keep(&p.Kept, wall(e.Sent), wall(e.Answered), ttl, &p.broken)
				case fairlock.EventGranted:
					p.Granted = now
					if p.Name == tokenOf {
						p.Token = e.Token
						if e.HandOver > 0 {
							p.Push = ms(e.HandOver)
						}
					}
				case fairlock.EventWaitEnded:
					p.Ended = now
				case fairlock.EventHoldEnded:
					if p.Name == e.Lock {
						p.Released = now
					}
				}
			}
		})
	}
}
