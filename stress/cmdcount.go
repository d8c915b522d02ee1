package main

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"
)

// The Redis commands a run cost are counted from the INFO counters of the
// deployment's servers, read in rounds: one before the run, one every
// sampleEvery during it, one after it. Counters belong to a server process
// (INFO server run_id), not to an address, and a process that ends takes
// its last counts with it; so each node is followed from reading to
// reading, and only what two readings of one process prove is counted:
//
//   - Two readings of the same process, a primary at both: the difference.
//     A replica's counters are left out, whatever its role later: it runs
//     every write of its primary again, as replicated commands.
//   - A new process at a known address (a new run_id, or counters that went
//     down: a restart, or CONFIG RESETSTAT): it started after the previous
//     reading, so, when it is a primary, all its counts. The old one's
//     commands between its last reading and its end are unread.
//   - A node first seen during the run: all its counts when its process
//     started after the run began (by INFO server uptime_in_seconds),
//     otherwise none; then, if it is a primary, its commands from the start
//     of the run to this reading are unread.
//   - A node that stops answering keeps its last reading; if it was a
//     primary, its commands from then to the first reading it missed are
//     unread. One that answers again as the same process is counted on as
//     if nothing happened.
//   - A node whose role changed between two readings: the commands between
//     them are unread (those of a client and those of the replication
//     stream cannot be told apart).
//   - Two addresses that answer with one run_id in one round name one
//     process: it is counted under one of them.
//
// So the count is exact when nothing is unread, and otherwise a lower
// bound. The report names every unread stretch (a death, a restart or a
// role change leaves one at most a round long), and gives no figure when
// they add up to more than maxUnread of the run.

// reading is what one node's INFO said, or that the node did not answer.
type reading struct {
	Addr     string
	At       time.Time        // when the reply came, or the call failed
	Err      error            // the node did not answer; only Addr, At and Primary are set
	RunID    string           // INFO server run_id; "" from a server without one (the embedded one)
	Primary  bool             // INFO replication role:master (no role: a lone server); on Err, discovery's view
	Uptime   time.Duration    // INFO server uptime_in_seconds; -1 when not reported
	Detailed bool             // from INFO commandstats
	Total    int64            // all commands: the sum of Calls (Detailed), or total_commands_processed
	Calls    map[string]int64 // per command, when Detailed
}

// unread is a stretch of time in which the commands of a primary could not
// be counted.
type unread struct {
	Addr     string
	From, To time.Time
	Why      string
}

func (u unread) String() string {
	return fmt.Sprintf("%.1fs of %s (%s)", u.To.Sub(u.From).Seconds(), u.Addr, u.Why)
}

// cmdTally is what the counting found over the run.
type cmdTally struct {
	Err      error            // the counters could not be read before the run; nothing else is set
	Detailed bool             // every count came from INFO commandstats
	Total    int64            // commands counted
	Calls    map[string]int64 // per command, when Detailed
	Span     time.Duration    // from the first round to the last
	Unread   []unread         // in order of time; empty: the count is exact
}

// unreadTime returns the sum of the unread stretches.
func (t cmdTally) unreadTime() time.Duration {
	var d time.Duration
	for _, u := range t.Unread {
		d += u.To.Sub(u.From)
	}
	return d
}

// top returns the n commands run most, most first.
func (t cmdTally) top(n int) []string {
	names := slices.Collect(maps.Keys(t.Calls))
	sort.Slice(names, func(i, j int) bool {
		if t.Calls[names[i]] != t.Calls[names[j]] {
			return t.Calls[names[i]] > t.Calls[names[j]]
		}
		return names[i] < names[j]
	})
	return names[:min(n, len(names))]
}

// cmdCounter adds up the readings, round by round.
type cmdCounter struct {
	start time.Time             // of the first round
	nodes map[string]*nodeTrack // by address
	alias map[string]bool       // addresses found to name a process followed under another
	tally cmdTally
}

// nodeTrack follows one address.
type nodeTrack struct {
	last    reading   // the last answer; valid when read
	read    bool      // the node has answered
	primary bool      // discovery's view, while the node has not answered
	missed  time.Time // the first failed reading after last; zero when none
}

func newCmdCounter() *cmdCounter {
	return &cmdCounter{
		nodes: map[string]*nodeTrack{}, alias: map[string]bool{},
		tally: cmdTally{Detailed: true, Calls: map[string]int64{}},
	}
}

// round takes one round of readings, made at about the time at. The first
// round sets the starting points and counts nothing.
func (c *cmdCounter) round(at time.Time, rs []reading) {
	first := c.start.IsZero()
	if first {
		c.start = at
	}
	c.dedupe(rs)
	for _, r := range rs {
		if c.alias[r.Addr] {
			continue
		}
		n := c.nodes[r.Addr]
		if n == nil {
			n = &nodeTrack{}
			c.nodes[r.Addr] = n
		}
		switch {
		case r.Err != nil:
			if n.read && n.missed.IsZero() {
				n.missed = r.At
			}
			n.primary = n.primary || r.Primary
			continue
		case !n.read && first:
			// The starting point.
		case !n.read:
			c.appeared(n, r)
		case r.RunID != n.last.RunID || decreased(n.last, r):
			c.restarted(n, r)
		case n.last.Primary && r.Primary:
			c.count(n.last, r)
		case n.last.Primary != r.Primary:
			role := "became a replica"
			if r.Primary {
				role = "became the primary"
			}
			c.gap(r.Addr, n.last.At, r.At, role)
		}
		n.last, n.read, n.missed = r, true, time.Time{}
	}
}

// dedupe finds addresses that name one process (one run_id in one round):
// it is followed under the address it was followed under before, or the
// first, and the others are left out from then on.
func (c *cmdCounter) dedupe(rs []reading) {
	byRun := map[string][]string{}
	for _, r := range rs {
		if r.Err == nil && r.RunID != "" && !c.alias[r.Addr] {
			byRun[r.RunID] = append(byRun[r.RunID], r.Addr)
		}
	}
	for _, addrs := range byRun {
		if len(addrs) < 2 {
			continue
		}
		keep := addrs[0]
		for _, a := range addrs {
			if n := c.nodes[a]; n != nil && n.read {
				keep = a
				break
			}
		}
		for _, a := range addrs {
			if a != keep {
				c.alias[a] = true
				delete(c.nodes, a)
			}
		}
	}
}

// appeared counts a node first read after the first round.
func (c *cmdCounter) appeared(n *nodeTrack, r reading) {
	// uptime_in_seconds is rounded down: the process may be up to a
	// second older than it says.
	if r.Uptime >= 0 && r.At.Add(-r.Uptime-time.Second).After(c.start) {
		if r.Primary {
			c.count(reading{}, r)
		}
		return
	}
	if r.Primary || n.primary {
		c.gap(r.Addr, c.start, r.At, "first read during the run")
	}
}

// restarted counts a new process at a known address.
func (c *cmdCounter) restarted(n *nodeTrack, r reading) {
	why, end := "restarted", r.At
	if r.RunID == n.last.RunID {
		why = "counters reset"
	} else if r.Uptime >= 0 && r.At.Add(-r.Uptime).After(n.last.At) {
		// The old process ended before the new one started.
		end = r.At.Add(-r.Uptime)
	}
	if n.last.Primary {
		c.gap(r.Addr, n.last.At, end, why)
	}
	if r.Primary {
		c.count(reading{}, r)
	}
}

// decreased reports whether any counter of r is below that of prev: they
// were reset.
func decreased(prev, r reading) bool {
	if r.Total < prev.Total {
		return true
	}
	for k, v := range prev.Calls {
		if r.Calls[k] < v {
			return true
		}
	}
	return false
}

// count adds the commands r shows over from (the zero reading: all of
// them).
func (c *cmdCounter) count(from, r reading) {
	t := &c.tally
	t.Detailed = t.Detailed && r.Detailed
	t.Total += r.Total - from.Total
	for k, v := range r.Calls {
		if d := v - from.Calls[k]; d > 0 {
			t.Calls[k] += d
		}
	}
}

func (c *cmdCounter) gap(addr string, from, to time.Time, why string) {
	c.tally.Unread = append(c.tally.Unread, unread{Addr: addr, From: from, To: to, Why: why})
}

// finish returns the tally after the last round, made at about end.
func (c *cmdCounter) finish(end time.Time) cmdTally {
	for _, addr := range slices.Sorted(maps.Keys(c.nodes)) {
		n := c.nodes[addr]
		switch {
		case n.read && !n.missed.IsZero() && n.last.Primary:
			c.gap(addr, n.last.At, n.missed, "stopped answering")
		case !n.read && n.primary:
			c.gap(addr, c.start, end, "never answered")
		}
	}
	t := c.tally
	t.Span = end.Sub(c.start)
	if !t.Detailed {
		t.Calls = nil
	}
	slices.SortStableFunc(t.Unread, func(a, b unread) int { return a.From.Compare(b.From) })
	return t
}

// maxUnread is the largest share of the run whose commands may go unread
// for a figure to be given, as a lower bound.
const maxUnread = 0.5

// commands returns the figure of the tally over grants, or why there is
// none.
func commands(t cmdTally, grants int) (*commandSums, string) {
	gaps := make([]string, len(t.Unread))
	for i, u := range t.Unread {
		gaps[i] = u.String()
	}
	switch {
	case t.Err != nil:
		return nil, "INFO not readable: " + t.Err.Error()
	case grants == 0:
		return nil, "nothing granted"
	case t.unreadTime() > time.Duration(maxUnread*float64(t.Span)):
		return nil, fmt.Sprintf("the primaries' commands went unread for %.1fs of %.1fs: %s",
			t.unreadTime().Seconds(), t.Span.Seconds(), strings.Join(gaps, ", "))
	case t.Total <= 0:
		return nil, "no command counted"
	}
	c := &commandSums{
		Detailed: t.Detailed, Total: t.Total, PerGrant: float64(t.Total) / float64(grants),
		LowerBound: len(gaps) > 0, Unread: gaps,
	}
	if t.Detailed {
		c.Top = map[string]float64{}
		for _, name := range t.top(6) {
			c.Top[name] = float64(t.Calls[name]) / float64(grants)
		}
	}
	return c, ""
}
