// Command leader runs a job scheduler with one leader at a time, elected
// with a fairlock Election: the case for leader election, and for
// fencing what a leader writes with its term.
//
// Several schedulers, goroutines each with a fairlock Client of its own
// as processes would have, campaign in one Election. The leader runs the
// jobs of its term, job-1, job-2, ..., each once, and writes each job's
// result to a store (a Redis list, written by a Lua script) stamped with
// its term; the store refuses a write whose term is lower than the
// highest it has seen. The others follow the election with Observe and
// print who leads. A leader resigns when it has run its jobs, and the
// next candidate in line is elected, under a higher term.
//
// One leader (-kill, the second by default) does not resign: in the
// middle of its jobs it stalls, as a process stopped by a long GC pause
// or a SIGSTOP would, and its Client's link to Redis is cut, so that
// nothing renews its lease. Its lease runs out, the next candidate is
// elected and runs its own term. When the stalled leader wakes, it writes
// the job it was running with its old term, unaware that it no longer
// leads: the store refuses the write, because it has seen the new
// leader's higher term. A store that took writes without terms would have
// taken it, next to the new leader's.
//
//	go run ./examples/leader                  # Redis at redis://127.0.0.1:6379/0
//	go run ./examples/leader -kill 0          # every leader resigns
//	go run ./examples/leader -schedulers 5 -terms 8 -kill 3
//	go run ./examples/leader -redis redis://127.0.0.1:6380/0
//
// While it runs, "fairlock leader -watch -prefix leader jobs" (the
// operator command, cmd/fairlock) follows the same election. The store
// keeps its highest term in leader:store:term, its accepted writes in
// leader:store:log and the refused ones in leader:store:refused (-prefix),
// sets them afresh at the start, and leaves them in Redis for a look with
// redis-cli. The election's keys are under the same prefix: no leadership
// or line outlives the run, only its term counter and, for a minute or
// so, the receipts of its last calls.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"time"

	"github.com/redis/go-redis/v9"
)

// config is what the flags set.
type config struct {
	redisURL   string
	prefix     string        // of the store's keys, and the Clients' key prefix
	election   string        // the Election's name
	schedulers int           // how many schedulers campaign
	jobs       int           // jobs a leader runs in its term
	terms      int           // leaderships in all: the run ends when the last resigns
	kill       int           // the leadership (1 for the first) whose leader stalls mid-term; 0 for none
	jobTime    time.Duration // how long a job runs
	lease      time.Duration // the leadership's lease
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("leader", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.redisURL, "redis", "redis://127.0.0.1:6379/0", "`URL` of the Redis to use")
	fs.StringVar(&c.prefix, "prefix", "leader", "key `prefix` of the store and the election")
	fs.StringVar(&c.election, "election", "jobs", "the election's `name`")
	fs.IntVar(&c.schedulers, "schedulers", 3, "number of schedulers campaigning")
	fs.IntVar(&c.jobs, "jobs", 3, "jobs a leader runs in its term")
	fs.IntVar(&c.terms, "terms", 4, "leaderships in all")
	fs.IntVar(&c.kill, "kill", 2, "the leadership whose leader stalls mid-term and is cut off from Redis (1 for the\nfirst; 0 for none): its late write is refused")
	fs.DurationVar(&c.jobTime, "job-time", 20*time.Millisecond, "how long a job runs")
	fs.DurationVar(&c.lease, "lease", time.Second, "the leadership's lease: how long a stalled leader keeps it")
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	switch {
	case c.schedulers < 2:
		return config{}, errors.New("-schedulers: an election needs at least 2 candidates")
	case c.jobs < 1 || c.terms < 1:
		return config{}, errors.New("-jobs and -terms must be positive")
	case c.kill < 0 || c.kill >= c.terms && c.kill != 0:
		return config{}, errors.New("-kill: 0, or a leadership before the last (-terms), so that another leader comes after it")
	case c.jobTime < 0 || c.lease < 100*time.Millisecond:
		return config{}, errors.New("-job-time must not be negative, -lease must be at least 100ms")
	}
	return c, nil
}

func main() {
	c, err := parseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "leader:", err)
		os.Exit(2)
	}
	redis.SetLogger(quietSevered{os.Stderr})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	o, err := run(ctx, c, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "leader:", err)
		os.Exit(1)
	}
	report(os.Stdout, c, o)
}

// report prints what a run did: each term, the store's writes, and what
// the followers saw.
func report(w io.Writer, c config, o outcome) {
	fmt.Fprintf(w, "\n%d terms, %d schedulers, %d jobs a term:\n", len(o.terms), c.schedulers, c.jobs)
	for _, t := range o.terms {
		fmt.Fprintf(w, "  term %d: %s ran %d of %d jobs, %s\n", t.term, t.leader, len(o.jobsOf(t.term)), c.jobs, t.end)
	}
	order := "in rising terms"
	if !o.rising() {
		order = "NOT in rising terms"
	}
	fmt.Fprintf(w, "store: %d writes accepted, %s; %d refused\n", len(o.accepted), order, len(o.refused))
	for _, r := range o.refused {
		fmt.Fprintf(w, "  refused: %s of %s, term %d, after a write of term %d\n", r.job, r.by, r.term, r.highest)
	}
	if missed := o.unseen(); len(missed) == 0 {
		fmt.Fprintln(w, "followers: every scheduler saw every leader elected while it was connected")
	} else {
		for _, m := range missed {
			fmt.Fprintf(w, "followers: %s\n", m)
		}
	}
}
