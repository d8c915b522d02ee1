package main

import (
	"cmp"
	"container/heap"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strings"
	"time"
)

// report is what a run found, for people (write) or machines (-json).
// Latencies are in milliseconds.
type report struct {
	Redis       string  `json:"redis"`
	Prefix      string  `json:"prefix"`
	Seed        uint64  `json:"seed"`
	Kind        string  `json:"kind"`            // what each attempt took: runMutex, runMultiLock, runSemaphore, runRWMutex or runElection
	Names       string  `json:"names,omitempty"` // names per attempt of the multilock kind, "LO..HI"
	Workload    string  `json:"workload"`
	Elapsed     float64 `json:"elapsed_s"`
	Interrupted bool    `json:"interrupted,omitempty"`

	Attempts      int               `json:"attempts"`
	Outcomes      map[outcome]int   `json:"outcomes"`
	Reentries     int               `json:"reentries"` // nested Lock calls made with a held context
	Rejoined      int               `json:"rejoined"`  // waiters that lost their place and joined again
	GrantsPerSec  float64           `json:"grants_per_s"`
	Wait          latencyStats      `json:"wait_ms"`     // Lock call to grant
	Handover      latencyStats      `json:"handover_ms"` // previous holder's Unlock to the grant of a queued waiter
	Push          latencyStats      `json:"push_ms"`     // a pushed hand-over in Redis to the push reaching the waiter (Observer's estimate)
	Fairness      fairness          `json:"fairness"`
	Weighted      *weightedSums     `json:"weighted,omitempty"`          // the semaphore and rwmutex kinds
	Quorum        *quorumSums       `json:"quorum,omitempty"`            // a run on a quorum of masters (-masters)
	Election      *electionSums     `json:"election,omitempty"`          // the election kind
	Faults        *faultSums        `json:"faults,omitempty"`            // the faults injected (-chaos, -restart-master)
	Pause         float64           `json:"longest_pause_ms"`            // longest time in which no client saw anything happen
	Commands      *commandSums      `json:"redis_commands,omitempty"`    // nil: not known, see CommandsNA
	CommandsNA    string            `json:"redis_commands_na,omitempty"` // why Commands is nil
	ViolationSums violationCounts   `json:"violations"`
	Snapshots     map[string]string `json:"snapshots,omitempty"` // state after the run of the locks with violations
}

// latencyStats summarises a set of durations, in milliseconds.
type latencyStats struct {
	N   int     `json:"n"`
	P50 float64 `json:"p50"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

// fairness describes how evenly the workers were served.
type fairness struct {
	Workers       int     `json:"workers"`
	Jain          float64 `json:"jain_index"` // of grants per worker: 1 is perfectly even
	MinGrants     int     `json:"min_grants"`
	MaxGrants     int     `json:"max_grants"`
	LargestWait   float64 `json:"largest_wait_ms"`
	LargestWaitBy string  `json:"largest_wait_by,omitempty"`
}

// weightedSums describes the holds of the semaphore and rwmutex kinds.
type weightedSums struct {
	Permits    int64 `json:"permits,omitempty"`    // a Semaphore's capacity
	Reads      int   `json:"reads,omitempty"`      // granted read holds of a RWMutex
	Writes     int   `json:"writes,omitempty"`     // granted write holds
	Downgrades int   `json:"downgrades,omitempty"` // write holds that downgraded
	Refused    int   `json:"refused"`              // nested calls refused with ErrWouldDeadlock, as they must be
	// MostHeld is the most a lock certainly held at once (see
	// scale.sweep): permits of a Semaphore, holds of a RWMutex (readers,
	// when more than one).
	MostHeld int64 `json:"most_held"`
}

// electionSums describes the leaderships of the election kind and what
// their observers saw.
type electionSums struct {
	Leaderships int `json:"leaderships"` // Campaigns that returned a leadership
	Resigned    int `json:"resigned"`    // leaderships ended by a Resign that returned
	LeaseLost   int `json:"lease_lost"`  // leaderships whose lease was lost
	// Proclaims counts the values proclaimed while leading, ByCampaign
	// those of them proclaimed with Campaign and the leadership's
	// context.
	Proclaims  int `json:"proclaims"`
	ByCampaign int `json:"by_campaign"`
	// GivenBack counts the grants that came as a Campaign failed, and
	// were given back, seen by an observer.
	GivenBack int `json:"given_back"`
	// Provisional counts, on a quorum, the views of a leadership under
	// a term below the one its Campaign committed, whose read may have
	// begun before the commit.
	Provisional int `json:"provisional,omitempty"`
	// Unreached counts the Leader and Proclaim calls of leaders that
	// could not reach Redis.
	Unreached int `json:"unreached,omitempty"`
	Observers int `json:"observers"`
	Views     int `json:"views"`
	// Lag is the time from each change made certainly (Changes: a
	// Campaign, a Proclaim or a Resign that returned, a lost lease run
	// out) to the receipt of a view at least as new, for each observer
	// then watching; 0 when the view came before the call returned. Bound
	// is -lag, the most it may be.
	Changes int          `json:"changes"`
	Lag     latencyStats `json:"lag_ms"`
	Bound   float64      `json:"lag_bound_ms"`
}

// electionReport sums up the leaderships of the election kind and the
// check of their observers.
func electionReport(cfg config, attempts []attempt, ec *electionCheck) *electionSums {
	e := &electionSums{Observers: ec.observers, Views: ec.views, GivenBack: ec.givenBack, Provisional: ec.provisional,
		Changes: ec.changes, Lag: latency(ec.lags), Bound: ms(cfg.Lag)}
	for i := range attempts {
		a := &attempts[i]
		e.Unreached += a.Unreached
		for _, p := range a.Proclaims {
			if p.Err == "" {
				e.Proclaims++
				if p.Campaign {
					e.ByCampaign++
				}
			}
		}
		if !a.Held() {
			continue
		}
		e.Leaderships++
		switch {
		case a.LeaseLost:
			e.LeaseLost++
		case !a.UnlockEnd.IsZero() && !a.ResignFailed:
			e.Resigned++
		}
	}
	return e
}

// write writes the election's lines of the text report.
func (e *electionSums) write(b *strings.Builder) {
	fmt.Fprintf(b, "election:    %d leaderships (%d resigned, %d lost their lease); %d values proclaimed (%d with Campaign); %d grants given back seen",
		e.Leaderships, e.Resigned, e.LeaseLost, e.Proclaims, e.ByCampaign, e.GivenBack)
	if e.Unreached > 0 {
		fmt.Fprintf(b, "; %d Leader or Proclaim calls could not reach Redis", e.Unreached)
	}
	fmt.Fprintf(b, "\nobservers:   %d saw %d views of %d changes", e.Observers, e.Views, e.Changes)
	if e.Provisional > 0 {
		fmt.Fprintf(b, "; %d views under a provisional term, read as the Campaign committed its own", e.Provisional)
	}
	b.WriteByte('\n')
	fmt.Fprintf(b, "lag:         %s (a change's call returned to an observer's view as new; bound %.0fms)\n", e.Lag, e.Bound)
}

// commandSums counts the Redis commands the run cost: those the primaries
// ran while it went on, from their INFO counters (see cmdcount.go).
type commandSums struct {
	Detailed   bool               `json:"detailed"` // from INFO commandstats; otherwise the total of INFO stats
	Total      int64              `json:"total"`
	PerGrant   float64            `json:"per_grant"`
	Top        map[string]float64 `json:"top_per_grant,omitempty"`
	LowerBound bool               `json:"lower_bound,omitempty"` // some commands could not be counted
	Unread     []string           `json:"unread,omitempty"`      // the stretches not counted, and why
}

// violationCounts counts violations by kind, with the first few of each
// (those not excused first), and how many a fault excused: the exit
// status counts the others.
type violationCounts struct {
	Total         int                        `json:"total"`
	Excused       int                        `json:"excused"`
	Counted       int                        `json:"counted"` // Total - Excused
	ByKind        map[violationKind]int      `json:"by_kind"`
	ExcusedByKind map[violationKind]int      `json:"excused_by_kind,omitempty"`
	Examples      map[violationKind][]string `json:"examples,omitempty"`
}

const examplesPerKind = 5

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// latency summarises ds.
func latency(ds []time.Duration) latencyStats {
	if len(ds) == 0 {
		return latencyStats{}
	}
	slices.Sort(ds)
	// Nearest rank: the smallest value at or above a fraction q of them.
	at := func(q float64) float64 { return ms(ds[max(int(math.Ceil(q*float64(len(ds))))-1, 0)]) }
	return latencyStats{N: len(ds), P50: at(0.5), P99: at(0.99), Max: ms(ds[len(ds)-1])}
}

// buildReport computes the report of a run.
func buildReport(cfg config, redis string, attempts []attempt, vs []violation, elapsed time.Duration, cmds cmdTally, snaps map[string]string) *report {
	r := &report{
		Redis: redis, Prefix: cfg.Prefix, Seed: cfg.Seed, Kind: cmp.Or(cfg.Kind, runMutex), Workload: workload(cfg),
		Elapsed: elapsed.Seconds(), Attempts: len(attempts), Outcomes: map[outcome]int{},
		Snapshots: snaps,
	}
	grants := map[string]int{}
	var waits, pushes []time.Duration
	byLock := map[string][]*attempt{} // the holds of each name
	for name, as := range lines(attempts) {
		for _, a := range as {
			if a.Held() {
				byLock[name] = append(byLock[name], a)
			}
			if a.Push > 0 {
				pushes = append(pushes, time.Duration(a.Push*float64(time.Millisecond)))
			}
		}
	}
	for i := range attempts {
		a := &attempts[i]
		r.Outcomes[a.Outcome]++
		r.Reentries += a.Depth
		if len(a.Joins) > 1 {
			r.Rejoined++
		}
		if _, ok := grants[a.Worker]; !ok {
			grants[a.Worker] = 0
		}
		if !a.Held() {
			continue
		}
		grants[a.Worker]++
		if a.Kind == kindLock {
			w := a.Granted.Sub(a.Start)
			waits = append(waits, w)
			if ms(w) > r.Fairness.LargestWait {
				r.Fairness.LargestWait = ms(w)
				r.Fairness.LargestWaitBy = a.Worker + " on " + a.Lock
			}
		}
	}
	if cfg.Kind == runMultiLock {
		r.Names = cfg.Names.String()
	}
	if cfg.Kind == runSemaphore || cfg.Kind == runRWMutex {
		r.Weighted = weighted(cfg, attempts, byLock)
	}
	r.Wait = latency(waits)
	r.Pause = ms(longestPause(attempts))
	r.Handover = latency(handovers(byLock))
	r.Push = latency(pushes)
	r.Fairness.fill(grants)
	total := 0
	for _, n := range grants {
		total += n
	}
	if elapsed > 0 {
		r.GrantsPerSec = float64(total) / elapsed.Seconds()
	}
	r.Commands, r.CommandsNA = commands(cmds, total)
	r.ViolationSums = summarise(vs)
	return r
}

// longestPause returns the longest time between two consecutive events
// of the history, over all clients: a server or machine that stalled
// shows here.
func longestPause(attempts []attempt) time.Duration {
	var ts []time.Time
	for i := range attempts {
		a := &attempts[i]
		for _, t := range []time.Time{a.Start, a.Granted, a.UnlockStart, a.UnlockEnd, a.Ended} {
			if !t.IsZero() {
				ts = append(ts, t)
			}
		}
		for _, j := range a.Joins {
			ts = append(ts, j.Sent, j.Answered)
		}
		for _, p := range a.Parts {
			for _, t := range []time.Time{p.Start, p.Granted, p.Ended} {
				if !t.IsZero() {
					ts = append(ts, t)
				}
			}
			for _, j := range p.Joins {
				ts = append(ts, j.Sent, j.Answered)
			}
		}
	}
	slices.SortFunc(ts, time.Time.Compare)
	var longest time.Duration
	for i := 1; i < len(ts); i++ {
		longest = max(longest, ts[i].Sub(ts[i-1]))
	}
	return longest
}

// handovers returns, for every grant to a waiter that was queued when
// the last hold granted before it began to end before the grant (its
// Unlock called, or a writer's downgrade), the time from that to the
// grant. For a Mutex the hold before is the one granted just before.
func handovers(byLock map[string][]*attempt) []time.Duration {
	var out []time.Duration
	for _, holds := range byLock {
		slices.SortFunc(holds, func(x, y *attempt) int { return x.Granted.Compare(y.Granted) })
		var ends timeHeap  // when the holds visited began to end, not yet passed
		var last time.Time // the latest of those passed
		for _, h := range holds {
			for len(ends) > 0 && !ends[0].After(h.Granted) {
				last = heap.Pop(&ends).(time.Time)
			}
			if n := len(h.Joins); n > 0 && !last.IsZero() && h.Joins[n-1].Answered.Before(last) {
				out = append(out, h.Granted.Sub(last))
			}
			for _, t := range []time.Time{h.Downgrade, h.UnlockStart} {
				if !t.IsZero() {
					heap.Push(&ends, t)
				}
			}
		}
	}
	return out
}

// timeHeap is a min-heap of times.
type timeHeap []time.Time

func (q timeHeap) Len() int           { return len(q) }
func (q timeHeap) Less(i, j int) bool { return q[i].Before(q[j]) }
func (q timeHeap) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *timeHeap) Push(x any)        { *q = append(*q, x.(time.Time)) }
func (q *timeHeap) Pop() any {
	old := *q
	x := old[len(old)-1]
	*q = old[:len(old)-1]
	return x
}

// weighted sums up the holds of the semaphore and rwmutex kinds, and the
// most each lock certainly held at once (byLock: the holds of each name).
func weighted(cfg config, attempts []attempt, byLock map[string][]*attempt) *weightedSums {
	w := &weightedSums{}
	if cfg.Kind == runSemaphore {
		w.Permits = cfg.Permits
	}
	for i := range attempts {
		a := &attempts[i]
		w.Refused += a.Refused
		switch {
		case !a.Held() || a.Type != runRWMutex:
		case a.Write:
			w.Writes++
			if !a.Downgrade.IsZero() {
				w.Downgrades++
			}
		default:
			w.Reads++
		}
	}
	for _, holds := range byLock {
		slices.SortStableFunc(holds, func(x, y *attempt) int {
			return cmp.Or(x.Granted.Compare(y.Granted), cmp.Compare(x.Token, y.Token))
		})
		most, mostHolds := scaleOf(holds).sweep(holds, nil)
		if cfg.Kind == runRWMutex {
			most = mostHolds
		}
		w.MostHeld = max(w.MostHeld, most)
	}
	return w
}

// fill computes Jain's index of the grants per worker:
// (Σx)² / (n·Σx²), 1 when every worker got as many grants.
func (f *fairness) fill(grants map[string]int) {
	f.Workers = len(grants)
	var sum, sq float64
	first := true
	for _, n := range grants {
		sum += float64(n)
		sq += float64(n) * float64(n)
		if first || n < f.MinGrants {
			f.MinGrants = n
		}
		if first || n > f.MaxGrants {
			f.MaxGrants = n
		}
		first = false
	}
	if sq > 0 {
		f.Jain = sum * sum / (float64(len(grants)) * sq)
	}
}

func summarise(vs []violation) violationCounts {
	s := violationCounts{Total: len(vs), ByKind: map[violationKind]int{}, Examples: map[violationKind][]string{}}
	for _, v := range vs {
		s.ByKind[v.Kind]++
		if v.Excused == "" {
			continue
		}
		if s.ExcusedByKind == nil {
			s.ExcusedByKind = map[violationKind]int{}
		}
		s.Excused++
		s.ExcusedByKind[v.Kind]++
	}
	s.Counted = s.Total - s.Excused
	for _, excused := range []bool{false, true} {
		for _, v := range vs {
			if (v.Excused != "") == excused && len(s.Examples[v.Kind]) < examplesPerKind {
				s.Examples[v.Kind] = append(s.Examples[v.Kind], v.String())
			}
		}
	}
	return s
}

// workload describes the configuration in one line.
func workload(c config) string {
	where, clients := "in this process", c.Clients
	if c.Procs > 0 {
		// runProcs gives every process a Client at least.
		where, clients = fmt.Sprintf("in %d processes", c.Procs), max(c.Clients, c.Procs)
	}
	length := c.Duration.String()
	if c.Ops > 0 {
		length = fmt.Sprintf("%d attempts", c.Ops)
	}
	kind := ""
	switch c.Kind {
	case runMultiLock:
		way := "one ticket each"
		if c.multiWay() == oneByOne {
			way = "one name after another"
		}
		if c.Names.Lo == 1 {
			way = "one: a Mutex; more: " + way
		}
		kind = fmt.Sprintf("%s of %v names (%s) among ", runMultiLock, &c.Names, way)
	case runSemaphore:
		kind = fmt.Sprintf("semaphores of %d permits (1 to %d per attempt) on ", c.Permits, c.Permits)
	case runRWMutex:
		kind = fmt.Sprintf("rwmutexes (%.0f%% of attempts read, %.0f%% of writers downgrade) on ", 100*c.Readers, 100*c.Downgrade)
	case runElection:
		return fmt.Sprintf("elections on %d names, %d observers each, %d clients × %d goroutines of candidates %s, %s; "+
			"lead %v, %.0f%% of leaderships proclaim, give-up %.0f%% (after %v), lease %v, waiter TTL %v, lag bound %v",
			c.Locks, c.Observers, clients, c.Goroutines, where, length, &c.Hold, 100*c.Proclaim,
			100*c.GiveUp, &c.Patience, c.Lease, c.WaiterTTL, c.Lag)
	}
	return fmt.Sprintf("%s%d locks, %d clients × %d goroutines %s, %s; hold %v, re-entry up to %d, "+
		"give-up %.0f%% (after %v), TryLock %.0f%%, lease %v, waiter TTL %v",
		kind, c.Locks, clients, c.Goroutines, where, length, &c.Hold, c.Reentry,
		100*c.GiveUp, &c.Patience, 100*c.Try, c.Lease, c.WaiterTTL)
}

// write writes the report as text, or as JSON.
func (r *report) write(w io.Writer, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "fairlock stress on %s (prefix %s, seed %d)\n", r.Redis, r.Prefix, r.Seed)
	fmt.Fprintf(&b, "workload:    %s\n", r.Workload)
	fmt.Fprintf(&b, "ran:         %.1fs", r.Elapsed)
	if r.Interrupted {
		b.WriteString(" (interrupted)")
	}
	fmt.Fprintf(&b, "\noperations:  %d attempts:", r.Attempts)
	for i, o := range outcomes {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, " %d %s", r.Outcomes[o], o)
	}
	fmt.Fprintf(&b, "\n             %d re-entries; %d waiters lost their place and joined again\n", r.Reentries, r.Rejoined)
	if w := r.Weighted; w != nil {
		if r.Kind == runSemaphore {
			fmt.Fprintf(&b, "holds:       at most %d of the %d permits held at once; %d re-entries refused (ErrWouldDeadlock)\n", w.MostHeld, w.Permits, w.Refused)
		} else {
			fmt.Fprintf(&b, "holds:       %d read, %d write (%d downgraded); at most %d holds at once; %d upgrades refused (ErrWouldDeadlock)\n",
				w.Reads, w.Writes, w.Downgrades, w.MostHeld, w.Refused)
		}
	}
	if q := r.Quorum; q != nil {
		q.write(&b)
	}
	if e := r.Election; e != nil {
		e.write(&b)
	}
	if f := r.Faults; f != nil {
		f.write(&b)
	}
	fmt.Fprintf(&b, "throughput:  %.0f grants/s\n", r.GrantsPerSec)
	if r.Kind == runElection {
		fmt.Fprintf(&b, "wait:        %s (Campaign call to its return as leader)\n", r.Wait)
		fmt.Fprintf(&b, "hand-over:   %s (Resign called to the next candidate's election)\n", r.Handover)
		fmt.Fprintf(&b, "push:        %s (a hand-over in Redis to its push reaching the candidate, as the Observer estimates it)\n", r.Push)
	} else {
		fmt.Fprintf(&b, "wait:        %s (Lock call to grant)\n", r.Wait)
		fmt.Fprintf(&b, "hand-over:   %s (Unlock called to the next waiter's grant)\n", r.Handover)
		fmt.Fprintf(&b, "push:        %s (a hand-over in Redis to its push reaching the waiter, as the Observer estimates it)\n", r.Push)
	}
	fmt.Fprintf(&b, "fairness:    Jain's index %.4f over %d workers (grants per worker %d to %d); largest wait %.1fms (%s)\n",
		r.Fairness.Jain, r.Fairness.Workers, r.Fairness.MinGrants, r.Fairness.MaxGrants, r.Fairness.LargestWait, r.Fairness.LargestWaitBy)
	fmt.Fprintf(&b, "pauses:      longest %.1fms in which no client saw anything happen\n", r.Pause)
	if r.Commands == nil {
		fmt.Fprintf(&b, "redis:       commands per grant n/a (%s)\n", r.CommandsNA)
	} else {
		fmt.Fprintf(&b, "redis:       %s\n", r.Commands)
	}
	if r.ViolationSums.Total == 0 {
		b.WriteString("violations:  none\n")
	} else {
		vs := r.ViolationSums
		if vs.Excused > 0 {
			fmt.Fprintf(&b, "violations:  %d, %d of them excused by a fault: %d counted\n", vs.Total, vs.Excused, vs.Counted)
		} else {
			fmt.Fprintf(&b, "violations:  %d\n", vs.Total)
		}
		for _, k := range slices.Sorted(maps.Keys(vs.ByKind)) {
			if n := vs.ExcusedByKind[k]; n > 0 {
				fmt.Fprintf(&b, "  %s: %d (%d excused)\n", k, vs.ByKind[k], n)
			} else {
				fmt.Fprintf(&b, "  %s: %d\n", k, vs.ByKind[k])
			}
			for _, e := range r.ViolationSums.Examples[k] {
				fmt.Fprintf(&b, "    - %s\n", e)
			}
		}
		for _, name := range slices.Sorted(maps.Keys(r.Snapshots)) {
			fmt.Fprintf(&b, "after the run, %s", r.Snapshots[name])
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func (l latencyStats) String() string {
	if l.N == 0 {
		return "n/a"
	}
	return fmt.Sprintf("p50 %.2fms  p99 %.2fms  max %.2fms  (n=%d)", l.P50, l.P99, l.Max, l.N)
}

func (c *commandSums) String() string {
	var s string
	if c.Detailed {
		top := slices.SortedFunc(maps.Keys(c.Top), func(a, b string) int {
			return cmp.Compare(c.Top[b], c.Top[a])
		})
		parts := make([]string, len(top))
		for i, name := range top {
			parts[i] = fmt.Sprintf("%s %.2f", name, c.Top[name])
		}
		s = fmt.Sprintf("%.1f commands per grant (INFO commandstats, all clients of the deployment: %s", c.PerGrant, strings.Join(parts, ", "))
	} else {
		s = fmt.Sprintf("%.1f commands per grant (INFO commandstats n/a on this server: total_commands_processed, no breakdown", c.PerGrant)
	}
	if c.LowerBound {
		s = "at least " + s + "; not counted: " + strings.Join(c.Unread, ", ")
	}
	return s + ")"
}
