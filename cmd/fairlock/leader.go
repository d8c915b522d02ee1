package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/queue"
)

// leaderMain is the leader command: an election's leader and its
// candidates in line, or with -watch every change of its leadership.
func leaderMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var (
		c     common
		watch bool
		dur   time.Duration
	)
	fs := c.flags("leader", "[flags] NAME [watch]",
		"Prints the leader of the election NAME (its value, term, since when and for\n"+
			"how long it has led, its Client's id and name, its lease left) and the\n"+
			"candidates in line, in the order they would be elected (Client, value,\n"+
			"time waited). Exits with 1 when the election has no leader.\n"+
			"With -watch (or the word watch after NAME) it follows the leadership\n"+
			"instead (Election.Observe): one line\n"+
			"(with -json, one JSON object) for the leadership when it starts, then one\n"+
			"per change (a new leader, a new value, no leader), until interrupted or\n"+
			"for -for.\n", stderr)
	fs.BoolVar(&watch, "watch", false, "follow the leadership: one line per change, until interrupted")
	fs.DurationVar(&dur, "for", 0, "with -watch, stop after this long (0: run until interrupted)")
	pos, code, ok := c.parse(fs, args, stderr)
	if !ok {
		return code
	}
	if len(pos) == 2 && pos[1] == "watch" {
		pos, watch = pos[:1], true // "fairlock leader NAME watch" reads as -watch
	}
	switch {
	case len(pos) != 1:
		return c.usageError(stderr, fmt.Errorf("want one election NAME, got %d arguments", len(pos)))
	case dur < 0:
		return c.usageError(stderr, fmt.Errorf("-for %v: want a positive duration, or 0", dur))
	case dur > 0 && !watch:
		return c.usageError(stderr, errors.New("-for goes with -watch"))
	case len(c.masters) > 0:
		return c.usageError(stderr, errors.New("-masters: a quorum Client (NewQuorum) offers no Election"))
	}
	name := pos[0]
	if _, err := queue.Election(c.prefix, name); err != nil {
		return c.usageError(stderr, err)
	}
	if watch {
		return c.followLeader(ctx, name, dur, stdout, stderr)
	}
	d, ctx, done, err := c.session(ctx)
	if err != nil {
		return c.fail(stderr, err)
	}
	defer done()
	st, err := d.fl.Election(name).Inspect(ctx)
	if err != nil {
		return c.fail(stderr, err)
	}
	if c.json {
		writeJSON(stdout, leaderOf(st))
	} else {
		fmt.Fprint(stdout, leaderText(st))
	}
	if !st.Held {
		fmt.Fprintf(stderr, "fairlock leader: election %q has no leader (prefix %q)\n", name, c.prefix)
		return exitNotFound
	}
	return exitOK
}

// leaderText is the text form of an election's state: its leader, then
// its candidates in line.
func leaderText(st fairlock.LockState) string {
	var b strings.Builder
	fmt.Fprintf(&b, "election %q at %s (server clock)\n", st.Name, stamp(st.At))
	if len(st.Holders) == 0 {
		b.WriteString("leader: none\n")
	} else {
		h := st.Holders[0]
		fmt.Fprintf(&b, "leader: %s  term %d  since %s (for %s)  client %s  owner %s  lease left %s\n",
			valueText(h.Value), h.Token, stamp(h.Since), round(h.HeldFor), clientText(h.Client, h.ClientName), h.Owner, round(h.LeaseLeft))
	}
	if len(st.Waiters) == 0 {
		b.WriteString("no candidates in line\n")
		return b.String()
	}
	fmt.Fprintf(&b, "candidates (%d, in the order they would be elected):\n", len(st.Waiters))
	for i, w := range st.Waiters {
		left := round(w.TimeLeft) + " left"
		if w.TimeLeft <= 0 {
			left = "gone, to be dropped"
		}
		fmt.Fprintf(&b, "  %d. client %s  value %s  waited %s  owner %s  %s\n",
			i+1, clientText(w.Client, w.ClientName), valueText(w.Value), round(w.WaitedFor), w.Owner, left)
	}
	return b.String()
}

// leaderJSON is the output of leader.
type leaderJSON struct {
	Schema     string          `json:"schema"`
	Command    string          `json:"command"` // "leader"
	Name       string          `json:"name"`
	At         time.Time       `json:"at"`
	Leader     *leadershipJSON `json:"leader"` // null when the election has no leader
	Candidates []candidateJSON `json:"candidates"`
}

// leadershipJSON is an election's leader, as leader reads it.
type leadershipJSON struct {
	Value       string    `json:"value"`
	Term        int64     `json:"term"`
	Since       time.Time `json:"since"`
	HeldForMS   int64     `json:"held_for_ms"`
	Client      string    `json:"client"`
	ClientName  string    `json:"client_name"`
	Owner       string    `json:"owner"`
	LeaseLeftMS int64     `json:"lease_left_ms"`
}

// candidateJSON is a candidate in line.
type candidateJSON struct {
	Position    int    `json:"position"` // 1 for the next to be elected
	Value       string `json:"value"`
	Client      string `json:"client"`
	ClientName  string `json:"client_name"`
	Owner       string `json:"owner"`
	WaitedForMS int64  `json:"waited_for_ms"`
	TimeLeftMS  int64  `json:"time_left_ms"`
}

// leaderOf is the JSON of an election's state.
func leaderOf(st fairlock.LockState) leaderJSON {
	j := leaderJSON{Schema: schemaVersion, Command: "leader", Name: st.Name, At: st.At.UTC(), Candidates: []candidateJSON{}}
	if len(st.Holders) > 0 {
		h := st.Holders[0]
		j.Leader = &leadershipJSON{Value: h.Value, Term: h.Token, Since: h.Since.UTC(), HeldForMS: ms(h.HeldFor),
			Client: h.Client, ClientName: h.ClientName, Owner: h.Owner, LeaseLeftMS: ms(h.LeaseLeft)}
	}
	for i, w := range st.Waiters {
		j.Candidates = append(j.Candidates, candidateJSON{Position: i + 1, Value: w.Value, Client: w.Client,
			ClientName: w.ClientName, Owner: w.Owner, WaitedForMS: ms(w.WaitedFor), TimeLeftMS: ms(w.TimeLeft)})
	}
	return j
}

// leaderChangeJSON is one line of leader -watch's output: the
// leadership when the watch starts, or a change of it.
type leaderChangeJSON struct {
	Schema  string          `json:"schema"`
	Command string          `json:"command"` // "leader-watch"
	Name    string          `json:"name"`
	Why     string          `json:"why"`    // start, elected, proclaimed, ended
	Leader  *leaderViewJSON `json:"leader"` // null when the election has no leader
}

// leaderViewJSON is a leadership as Observe sends it.
type leaderViewJSON struct {
	Value      string    `json:"value"`
	Term       int64     `json:"term"`
	Since      time.Time `json:"since"`
	Client     string    `json:"client"`
	ClientName string    `json:"client_name"`
}

// Why a line of leader -watch was written.
const (
	whyStart      = "start"      // the leadership when the watch began
	whyElected    = "elected"    // a new leader: a new term
	whyProclaimed = "proclaimed" // the leader's new value, under the same term
	whyEnded      = "ended"      // the leadership ended with nobody to take it
)

// change says why l follows prev, the line before it (first: none).
func change(prev, l fairlock.Leadership, first bool) string {
	switch {
	case first:
		return whyStart
	case !l.HasLeader():
		return whyEnded
	case l.Term == prev.Term:
		return whyProclaimed
	}
	return whyElected
}

// leaderLine is the text of one line of leader -watch.
func leaderLine(why string, l fairlock.Leadership) string {
	if !l.HasLeader() {
		return why + ": no leader\n"
	}
	return fmt.Sprintf("%s: leader %s  term %d  since %s (server clock)  client %s\n",
		why, valueText(l.Value), l.Term, stamp(l.Since), clientText(l.Client, l.ClientName))
}

// followLeader is leader -watch: it writes the leadership of the
// election name, then every change of it that Observe sends, until ctx
// ends or dur has passed.
func (c *common) followLeader(ctx context.Context, name string, dur time.Duration, stdout, stderr io.Writer) int {
	ctx, d, done, code, ok := c.following(ctx, dur, stderr)
	if !ok {
		return code
	}
	defer done()
	el := d.fl.Election(name)
	// One read first, bounded by -timeout: a Redis that does not answer,
	// or refuses the read, fails the command here. Observe itself waits
	// for Redis without a word.
	rctx, cancel := context.WithTimeout(ctx, c.bound())
	_, err := el.Leader(rctx)
	cancel()
	switch {
	case ctx.Err() != nil:
		return exitOK
	case err != nil && !errors.Is(err, fairlock.ErrNoLeader):
		return c.fail(stderr, err)
	}
	octx, stop := context.WithCancel(ctx)
	defer stop()
	views, err := el.Observe(octx)
	if err != nil {
		return c.fail(stderr, err)
	}
	// The first view comes once the Client has subscribed to the
	// election's channel and read the leadership.
	timer := time.NewTimer(c.bound())
	defer timer.Stop()
	late := timer.C // nil once the first view came
	var prev fairlock.Leadership
	for first := true; ; first = false {
		var l fairlock.Leadership
		var open bool
		select {
		case l, open = <-views:
		case <-late:
			return c.fail(stderr, fmt.Errorf("no view of election %q: %w (Redis did not answer, or refused the subscription to the election's channel; -v says why)",
				name, context.DeadlineExceeded))
		}
		if !open {
			return exitOK // ctx ended: interrupted, or -for has passed
		}
		late = nil
		why := change(prev, l, first)
		if c.json {
			j := leaderChangeJSON{Schema: schemaVersion, Command: "leader-watch", Name: name, Why: why}
			if l.HasLeader() {
				j.Leader = &leaderViewJSON{Value: l.Value, Term: l.Term, Since: l.Since.UTC(), Client: l.Client, ClientName: l.ClientName}
			}
			writeJSON(stdout, j)
		} else {
			io.WriteString(stdout, leaderLine(why, l))
		}
		prev = l
	}
}
