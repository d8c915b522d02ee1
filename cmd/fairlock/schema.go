package main

import (
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/fairlock/fairlock"
)

// schemaVersion names the JSON output's schema, in its "schema" field.
// Its fields are documented in docs/operations.md ("The operator
// command's JSON"); a change that removes or redefines a field makes a
// new version.
const schemaVersion = "fairlock/v1"

// The rule of the clocks: every instant in the output (at, since,
// down_since) is a reading of the Redis server's clock, as the server
// that answered gave it (TIME; a leadership's since, as Redis kept it
// at its grant); every duration (_ms) is elapsed time, measured by the
// server's clock too, except watch's down_for_ms while Redis does not
// answer, which only the watcher can measure.

// inspectJSON is the output of inspect.
type inspectJSON struct {
	Schema  string     `json:"schema"`
	Command string     `json:"command"` // "inspect"
	Name    string     `json:"name"`
	At      time.Time  `json:"at"`
	Locks   []lockJSON `json:"locks"`
}

// watchJSON is one line of watch's output: a view, or why there is none.
type watchJSON struct {
	Schema    string     `json:"schema"`
	Command   string     `json:"command"` // "watch"
	Name      string     `json:"name"`
	Why       string     `json:"why"` // start, hand-over, follow, timer, reconnected, error
	At        *time.Time `json:"at"`  // null when Redis did not answer
	Locks     []lockJSON `json:"locks"`
	Error     *string    `json:"error"`
	DownSince *time.Time `json:"down_since"`
	DownForMS int64      `json:"down_for_ms"`
}

// listJSON is the output of list.
type listJSON struct {
	Schema  string     `json:"schema"`
	Command string     `json:"command"` // "list"
	Pattern string     `json:"pattern"`
	Names   []nameJSON `json:"names"`
}

type nameJSON struct {
	Name  string        `json:"name"`
	Locks []summaryJSON `json:"locks"`
}

// summaryJSON is a lock in list's output.
type summaryJSON struct {
	Kind     string `json:"kind"`
	Capacity *int64 `json:"capacity"`
	Used     *int64 `json:"used"`
	Readers  *int   `json:"readers"`
	Writer   *bool  `json:"writer"`
	Holders  int    `json:"holders"`
	Waiters  int    `json:"waiters"`
}

// unlockJSON is the output of unlock.
type unlockJSON struct {
	Schema       string      `json:"schema"`
	Command      string      `json:"command"` // "unlock"
	Name         string      `json:"name"`
	Kind         *string     `json:"kind"` // null when no lock of the name is held
	At           *time.Time  `json:"at"`   // the read before the removal; null when none was made
	Removed      bool        `json:"removed"`
	Holder       *holderJSON `json:"holder"`
	Next         *waiterJSON `json:"next"`
	OverlapMaxMS int64       `json:"overlap_max_ms"`
}

// lockJSON is one lock: its kind, capacity and use, holders, line, and
// on a quorum each master's view.
type lockJSON struct {
	Kind     string       `json:"kind"`
	At       time.Time    `json:"at"`
	Capacity *int64       `json:"capacity"` // a Mutex's 1, a Semaphore's permits; null for a RWMutex
	Used     *int64       `json:"used"`     // the weights held; null for a RWMutex
	Readers  *int         `json:"readers"`  // a RWMutex's; null for the others
	Writer   *bool        `json:"writer"`   // a RWMutex's; null for the others
	Holders  []holderJSON `json:"holders"`
	Waiters  []waiterJSON `json:"waiters"`
	Masters  []masterJSON `json:"masters"` // null unless a quorum's
}

type holderJSON struct {
	Owner       string     `json:"owner"`
	Client      string     `json:"client"`
	ClientName  string     `json:"client_name"`
	Weight      int64      `json:"weight"`
	Write       bool       `json:"write"`
	Count       int        `json:"count"`
	Token       int64      `json:"token"`
	Since       *time.Time `json:"since"`
	HeldForMS   int64      `json:"held_for_ms"`
	LeaseLeftMS int64      `json:"lease_left_ms"`
	Value       *string    `json:"value"` // an election's leader's value; null for the other kinds
}

type waiterJSON struct {
	Kind        string   `json:"kind"`
	Owner       string   `json:"owner"`
	Client      string   `json:"client"`
	ClientName  string   `json:"client_name"`
	Weight      int64    `json:"weight"`
	Locks       []string `json:"locks"` // a ticket's names, this one among them; null for other waiters
	WaitedForMS int64    `json:"waited_for_ms"`
	TimeLeftMS  int64    `json:"time_left_ms"`
	Value       *string  `json:"value"` // a candidate's value (kind "campaign"); null for other waiters
}

type masterJSON struct {
	Master string    `json:"master"`
	Error  *string   `json:"error"`
	Lock   *lockJSON `json:"lock"` // null when the master did not answer
}

// locksJSON is the JSON of a view's locks; masters names a quorum's.
func locksJSON(v view, masters []string) []lockJSON {
	out := []lockJSON{}
	for _, st := range v.locks {
		out = append(out, lockOf(st, masters))
	}
	return out
}

// lockOf is the JSON of st.
func lockOf(st fairlock.LockState, masters []string) lockJSON {
	j := lockJSON{Kind: string(st.Kind), At: st.At.UTC(), Holders: []holderJSON{}, Waiters: []waiterJSON{}}
	summarize(st, &j.Capacity, &j.Used, &j.Readers, &j.Writer)
	for _, h := range st.Holders {
		j.Holders = append(j.Holders, holderOf(st, h))
	}
	for _, w := range st.Waiters {
		j.Waiters = append(j.Waiters, waiterOf(w))
	}
	if st.Masters != nil {
		j.Masters = []masterJSON{}
		for i, m := range st.Masters {
			mj := masterJSON{Master: masterName(masters, i)}
			if m.Err != nil {
				mj.Error = ptr(m.Err.Error())
			} else {
				s := m.State
				s.Kind = st.Kind
				l := lockOf(s, nil)
				mj.Lock = &l
			}
			j.Masters = append(j.Masters, mj)
		}
	}
	return j
}

// summarize sets the capacity and use of st that its kind has.
func summarize(st fairlock.LockState, capacity, used **int64, readers **int, writer **bool) {
	switch st.Kind {
	case fairlock.KindRWMutex:
		*readers, *writer = ptr(st.Readers), ptr(st.Writer)
	case fairlock.KindSemaphore:
		*capacity, *used = ptr(st.Capacity), ptr(st.Used)
	default:
		*capacity, *used = ptr(int64(1)), ptr(int64(len(st.Holders)))
	}
}

// summaryOf is list's JSON of st.
func summaryOf(st fairlock.LockState) summaryJSON {
	j := summaryJSON{Kind: string(st.Kind), Holders: len(st.Holders), Waiters: len(st.Waiters)}
	summarize(st, &j.Capacity, &j.Used, &j.Readers, &j.Writer)
	return j
}

func holderOf(st fairlock.LockState, h fairlock.Holder) holderJSON {
	j := holderJSON{Owner: h.Owner, Client: h.Client, ClientName: h.ClientName, Weight: holderWeight(st, h), Write: h.Write,
		Count: h.Count, Token: h.Token, HeldForMS: ms(h.HeldFor), LeaseLeftMS: ms(h.LeaseLeft)}
	if !h.Since.IsZero() {
		j.Since = ptr(h.Since.UTC())
	}
	if st.Kind == fairlock.KindElection {
		j.Value = ptr(h.Value)
	}
	return j
}

func waiterOf(w fairlock.Waiter) waiterJSON {
	j := waiterJSON{Kind: string(w.Kind), Owner: w.Owner, Client: w.Client, ClientName: w.ClientName, Weight: w.Weight,
		Locks: w.Locks, WaitedForMS: ms(w.WaitedFor), TimeLeftMS: ms(w.TimeLeft)}
	if w.Kind == fairlock.WaitsCampaign {
		j.Value = ptr(w.Value)
	}
	return j
}

// masterName is the name of a quorum's master i.
func masterName(masters []string, i int) string {
	if i < len(masters) {
		return masters[i]
	}
	return fmt.Sprintf("master %d", i+1)
}

func ptr[T any](v T) *T { return &v }

// writeJSON writes v as one line of JSON.
func writeJSON(w io.Writer, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		b = fmt.Appendf(nil, `{"schema":%q,"error":%q}`, schemaVersion, err.Error()) // not reached: plain types
	}
	fmt.Fprintf(w, "%s\n", b)
}
