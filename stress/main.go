// Stress hammers fairlock locks from many clients and checks, from the
// recorded history, that the lock behaved: every hold was exclusive, every
// grant came in FIFO order, TryLock never barged in, fencing tokens
// strictly increased, no waiter was left behind, and Redis kept nothing
// after the run.
//
// With -kind multilock each attempt takes several of the -locks names at
// once with a MultiLock (-names LO..HI of them; a set of one is taken with
// a Mutex), and the check covers each name's line over Mutex and
// MultiLock callers alike, and adds that every MultiLock held all of its
// names or none, and took them as the deployment promises: on one server
// with one ticket in every name's line, granted every name at once; on a
// cluster one after another, all MultiLocks in one order of the names.
//
// With -kind semaphore each attempt takes 1 to -permits permits of a
// name's Semaphore, and with -kind rwmutex the read lock (a fraction
// -readers of the attempts) or the write lock of its RWMutex, a writer
// sometimes downgrading (-downgrade). The check weighs the holds as the
// library does: never more permits held at once than a Semaphore has,
// never a writer beside another hold, grants in the order of the line
// (the readers granted together in one batch in any order), and the same
// tokens, waiters and leftovers as for a Mutex.
//
// With -kind election each attempt is a candidate's Campaign of a name's
// Election, with a value of its own (a fraction -giveup of them with a
// short deadline); once elected, it leads for the hold time, proclaiming
// new values in a fraction -proclaim of leaderships (with Proclaim, or
// with Campaign and the leadership's context), reads Leader, and
// resigns. -observers per election watch it with Observe, from Clients
// spread over the processes, and record every view. The candidates' line
// is checked as a Mutex's (at most one leader at any instant, terms that
// rise, candidates elected in FIFO order), and the views against the
// history: each stands for a real leadership (its term, a value it had,
// its Client) or for none, no observer's views go backwards, each change
// is seen within -lag of the return of the call that made it (or of the
// end of a lease lost), and every observer's last view is the election's
// final state.
//
// With -masters the Mutexes are quorum locks (fairlock.NewQuorum) over
// independent masters, given by address or started on loopback
// (-masters N), and the order checked is the quorum lock's bakery order:
// a waiter whose join reached a majority before another call began is
// granted first. -restart-master kills one of the masters it started
// during the run and restarts it empty once no hold or place in line it
// kept could still count. With -kind election the Elections are the
// quorum Client's: the leaderships are checked as the quorum's holds
// (one at a time, terms rising, candidates in bakery order), and the
// views as what a majority of the masters can show: a view of a
// leadership read as its Campaign committed the term may carry a
// provisional one, a change under way on some masters only may be read
// and then not, and only a view older than a change certainly made
// before the watcher's read began went backwards.
//
// With -chaos the command starts its own servers on loopback and injects
// faults of one kind into them, one after another with -every of quiet
// before each: a server killed and restarted on its append-only file
// (restart-aof) or empty after the lease (restart-empty), stopped for
// -down (pause), a Sentinel failover (failover), or a primary killed
// (kill-primary, of a Sentinel set or, with -topology cluster, of a
// Cluster). The report lists each fault with its times, and marks as
// excused the verdicts a fault explains (excuse.go gives the rules).
//
// Usage:
//
//	go run ./stress                                   # embedded Redis, ~10 s
//	go run ./stress -redis redis://host:6379/0        # a real server
//	go run ./stress -cluster host:7000,host:7001      # a cluster
//	go run ./stress -sentinel host:26379,host:26380 -master mymaster
//	                                                  # a primary watched by sentinels
//	go run ./stress -procs 3 -svg timeline.svg        # workers in 3 processes
//	go run ./stress -kind multilock -names 2..4 -locks 8
//	                                                  # MultiLocks of 2 to 4 names
//	go run ./stress -kind semaphore -permits 3        # Semaphores of 3 permits
//	go run ./stress -kind rwmutex -readers 0.7        # RWMutexes, 70% of attempts reading
//	go run ./stress -kind election -observers 3       # Elections, 3 observers of each
//	go run ./stress -masters 3 -restart-master 20s -duration 60s
//	                                                  # a quorum of 3 masters, one restarted
//	go run ./stress -kind election -masters 3         # Elections on a quorum of 3 masters
//	go run ./stress -chaos failover -every 3s -duration 20s
//	                                                  # Sentinel failovers, 3 s apart
//	go run ./stress -json -history attempts.jsonl     # for machines
//
// A run uses keys under a random prefix of its own ("fairlock-stress-..."),
// never touches others, and deletes its keys at the end.
//
// Every attempt is recorded with client-side wall-clock times, each of
// which brackets the real event it stands for, and the checker flags only
// what those brackets prove; docs/stress.md gives the theory. The
// report gives outcomes, throughput, wait and hand-over latencies (for
// elections also the leaderships and the observers' lag), fairness
// across workers, Redis commands per grant, and the violations; the
// exit status is 1 when there is any that no fault excuses, 2 when the
// check could not be made (bad flags, Redis unreachable, a report that
// could not be written), 130 for a clean run cut short by an interrupt.
//
// Redis commands per grant are counted from the INFO commandstats of the
// deployment's primaries (cmdcount.go; docs/stress.md says how).
//
// The embedded Redis (miniredis) checks behaviour, not speed: it runs every
// script in a fresh Lua interpreter, so its throughput is a fraction of a
// real server's.
//
// With -procs N the command runs itself N times as worker processes (the
// environment variable FAIRLOCK_STRESS_WORKER carries their part of the
// configuration); they stream their history to the parent as JSON lines,
// and the parent checks the whole. An election run's observers, once the
// candidates of their process are done, wait for the parent's word, on
// their standard input, that every process's are. Times are compared
// across processes, so they must share one wall clock: one machine.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"time"

	"github.com/redis/go-redis/v9"
)

// workerEnv marks a worker process and carries its configuration.
const workerEnv = "FAIRLOCK_STRESS_WORKER"

func main() {
	if spec := os.Getenv(workerEnv); spec != "" {
		os.Exit(workerMain(spec, os.Stdin, os.Stdout, os.Stderr))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// Exit statuses.
const (
	exitOK          = 0
	exitViolations  = 1 // the check found violations that no fault excuses
	exitCannotRun   = 2 // bad flags, Redis unreachable, a report not written: nothing was checked
	exitInterrupted = 130
)

// run is the command: it parses args, runs the stress test, writes the
// report to stdout, and returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	// The progress line, the worker processes and this goroutine all
	// write to stderr.
	terminal := isTerminal(stderr)
	stderr = &lockedWriter{w: stderr}
	cfg, err := parseFlags(args, stderr)
	var ue usageError
	switch {
	case errors.Is(err, flag.ErrHelp):
		return exitOK
	case errors.As(err, &ue):
		if ue.err != nil {
			fmt.Fprintf(stderr, "stress: %v\nRun 'stress -h' for usage.\n", ue.err)
		}
		return exitCannotRun
	case err != nil:
		fmt.Fprintf(stderr, "stress: %v\n", err)
		return exitCannotRun
	}

	quietRedis(cfg)
	tgt, err := openTarget(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "stress: %v\n", err)
		return exitCannotRun
	}
	defer tgt.close()
	cfg.Prefix = "fairlock-stress-" + randomHex(6)
	admins := tgt.clients() // one per master of a quorum
	defer func() {
		for _, a := range admins {
			_ = a.Close()
		}
	}()
	for i, a := range admins {
		if err := a.Ping(ctx).Err(); err != nil {
			where := tgt.String()
			if tgt.quorum() {
				where = fmt.Sprintf("master %d (%s)", i+1, tgt.masters[i])
			}
			fmt.Fprintf(stderr, "stress: cannot reach %s: %v\n", where, err)
			return exitCannotRun
		}
	}
	fmt.Fprintf(stderr, "stress: %s, prefix %s, seed %d\n", tgt, cfg.Prefix, cfg.Seed)
	switch {
	case tgt.mini == nil && cfg.Kind == runElection && tgt.quorum():
		fmt.Fprintf(stderr, "stress: to look at an election meanwhile, read its keys %s:{lock-0}:e:q* on each master (a quorum lock's, and its values)\n", cfg.Prefix)
	case tgt.mini == nil && cfg.Kind == runElection:
		fmt.Fprintf(stderr, "stress: to look at an election meanwhile, read its keys %s:{lock-0}:e* (a Mutex's, and its values)\n", cfg.Prefix)
	case tgt.mini == nil && !tgt.quorum():
		fmt.Fprintf(stderr, "stress: to look at a lock meanwhile, run go run ./cmd/fairlock inspect with %s and -prefix %s lock-0\n", tgt.inspectFlags(), cfg.Prefix)
	}
	if tgt.started != "" {
		tgt.describe(&cfg) // the deployment the command started, for the check and the report
	}
	plan := newChaosPlan(cfg, tgt)

	smp, statsErr := startSampler(ctx, tgt, sampleEvery)
	hist := &history{}
	started := time.Now()
	var faults *injector
	if plan != nil {
		var end time.Time
		if cfg.Ops == 0 {
			end = started.Add(cfg.Duration)
		}
		faults = plan.start(started, end, cfg.Seed)
	}
	prog := startProgress(stderr, terminal, hist, cfg, started, faults)
	var failures []violation
	if cfg.Procs > 0 {
		failures = runProcs(ctx, cfg, tgt, hist, stderr)
	} else if p, err := newPool(cfg, tgt, clientIDs(cfg.Clients), cfg.Ops, hist, stderr); err != nil {
		failures = append(failures, violation{Kind: errored, Detail: "starting the clients: " + err.Error()})
	} else {
		p.run(ctx)
	}
	elapsed := time.Since(started)
	var injected []fault
	if faults != nil {
		injected = faults.finish()
		for _, f := range injected {
			if f.Err != "" {
				failures = append(failures, violation{Kind: errored, At: f.Injected,
					Detail: fmt.Sprintf("fault %d (%s of %s): %s", f.N, f.Kind, f.Target, f.Err)})
			}
		}
	}
	prog.stop()
	interrupted := ctx.Err() != nil

	// The run is over: what follows must finish even after an interrupt.
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	cmds := cmdTally{Err: statsErr}
	if statsErr == nil {
		cmds = smp.stop(pctx)
	}
	attempts := hist.Attempts()
	var q *quorumCheck
	if tgt.quorum() {
		q = &quorumCheck{}
		for _, f := range injected {
			if o, ok := f.lostWrites(); ok {
				q.Outages = append(q.Outages, o)
			}
		}
	}
	violations := append(checkRun(attempts, cfg.WaiterTTL, cfg.multiWay(), q), failures...)
	watches := hist.Watches()
	var el *electionCheck
	if cfg.Kind == runElection {
		el = &electionCheck{Bound: cfg.Lag, Lease: cfg.Lease, Quorum: tgt.quorum()}
		violations = append(violations, el.check(attempts, watches)...)
	}
	var snaps map[string]string
	if tgt.quorum() {
		snaps = quorumFinalState(pctx, admins, tgt.masters, cfg, &violations)
	} else {
		snaps = finalState(pctx, admins[0], cfg, &violations)
	}
	for _, a := range admins {
		if _, err := cleanup(pctx, a, cfg.Prefix); err != nil {
			fmt.Fprintf(stderr, "stress: deleting the keys under %s: %v\n", cfg.Prefix, err)
		}
	}

	excuse(violations, injected, started)
	rep := buildReport(cfg, tgt.String(), attempts, violations, elapsed, cmds, snaps)
	rep.Interrupted = interrupted
	if q != nil {
		rep.Quorum = quorumReport(tgt, q)
	}
	if el != nil {
		rep.Election = electionReport(cfg, attempts, el)
	}
	if plan != nil {
		rep.Faults = &faultSums{Kind: plan.kind, Plan: plan.desc, Faults: injected}
	}
	if err := rep.write(stdout, cfg.JSON); err != nil {
		fmt.Fprintf(stderr, "stress: writing the report: %v\n", err)
		return exitCannotRun
	}
	written := true
	if cfg.History != "" {
		if err := writeHistoryFile(cfg.History, attempts, watches); err != nil {
			fmt.Fprintf(stderr, "stress: %v\n", err)
			written = false
		}
	}
	if cfg.SVG != "" {
		if err := writeSVGFile(cfg.SVG, attempts, lockNames(cfg.Locks), violations); err != nil {
			fmt.Fprintf(stderr, "stress: %v\n", err)
			written = false
		}
	}
	switch {
	case counted(violations) > 0: // the report says so, whatever else failed
		return exitViolations
	case !written:
		return exitCannotRun
	case interrupted:
		return exitInterrupted
	}
	return exitOK
}

// finalState inspects every lock after the run, adds what is left in Redis
// to violations, and returns the snapshots of the locks involved in any
// violation.
func finalState(ctx context.Context, admin redis.UniversalClient, cfg config, violations *[]violation) map[string]string {
	snaps := map[string]string{}
	all := map[string]string{}
	settle(ctx, admin, cfg.Prefix, lockNames(cfg.Locks))
	for _, name := range lockNames(cfg.Locks) {
		s, left, err := leftovers(ctx, admin, cfg, name)
		if err != nil {
			*violations = append(*violations, violation{Kind: errored, Lock: name, Detail: "inspecting after the run: " + err.Error()})
			continue
		}
		*violations = append(*violations, left...)
		all[name] = s
	}
	for _, v := range *violations {
		if s, ok := all[v.Lock]; ok {
			snaps[v.Lock] = s
		}
	}
	return snaps
}

// clientIDs returns 0, ..., n-1.
func clientIDs(n int) []int {
	ids := make([]int, n)
	for i := range ids {
		ids[i] = i
	}
	return ids
}

// randomHex returns n random bytes in hex.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails
	return hex.EncodeToString(b)
}
