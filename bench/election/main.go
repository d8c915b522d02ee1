package main

import (
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// options are the command line's settings.
type options struct {
	lease           time.Duration
	rounds          int
	candidates      int
	killRounds      int
	observers       int
	observerClients int
	observerRounds  int
	orderCandidates int
	orderRounds     int
	orderGap        time.Duration
	settle          time.Duration
	systems         []string
	measures        []string
	etcdDir         string
	jsonPath        string
}

// allMeasures are the measures -measures chooses from, in the order they
// run.
var allMeasures = []string{keyHandOver, keyKill, measureObserve, keyOrder}

func parseFlags(args []string) (options, error) {
	var o options
	var systems, measures string
	fs := flag.NewFlagSet("election", flag.ContinueOnError)
	fs.DurationVar(&o.lease, "lease", 5*time.Second, "the leadership's lease: fairlock's WithLease and etcd's session TTL (whole seconds, at least 2s)")
	fs.DurationVar(&o.settle, "settle", 150*time.Millisecond, "the pause before every measured Resign or Proclaim, after the change before it (see doc.go)")
	fs.IntVar(&o.rounds, "rounds", 80, "Resign -> new leader: rounds per system")
	fs.IntVar(&o.candidates, "candidates", 3, "Resign -> new leader: candidates taking turns (at least 2)")
	fs.IntVar(&o.killRounds, "kill-rounds", 3, "SIGKILL -> new leader: rounds per system, each about a lease long")
	fs.IntVar(&o.observers, "observers", 100, "observers of the change -> observers measure")
	fs.IntVar(&o.observerClients, "observer-clients", 10, "clients the observers are spread over, evenly (a divisor of -observers)")
	fs.IntVar(&o.observerRounds, "observer-rounds", 20, "change -> observers: rounds per system, each a Proclaim and a new leader")
	fs.IntVar(&o.orderCandidates, "order-candidates", 20, "order: candidates per round")
	fs.IntVar(&o.orderRounds, "order-rounds", 3, "order: rounds per system")
	fs.DurationVar(&o.orderGap, "order-gap", 2*time.Millisecond, "order: time between two candidates beginning to campaign, in the second order row (the first begins each once the one before is in line)")
	fs.StringVar(&systems, "systems", "fairlock,etcd", "comma-separated systems to run: fairlock, etcd")
	fs.StringVar(&measures, "measures", strings.Join(allMeasures, ","), "comma-separated measures to run: "+strings.Join(allMeasures, ", "))
	fs.StringVar(&o.etcdDir, "etcd-dir", "", "directory to keep etcd's data in, in a new directory removed at the end (default: the system's temporary directory)")
	fs.StringVar(&o.jsonPath, "json", "", "also write the results as JSON to this file")
	if err := fs.Parse(args); err != nil {
		return options{}, err
	}
	var err error
	if o.systems, err = list(systems, []string{fairlockName, etcdName}); err != nil {
		return options{}, fmt.Errorf("-systems: %w", err)
	}
	if o.measures, err = list(measures, allMeasures); err != nil {
		return options{}, fmt.Errorf("-measures: %w", err)
	}
	switch {
	case o.lease < 2*time.Second || o.lease%time.Second != 0:
		return options{}, errors.New("-lease must be whole seconds, at least 2s: etcd's TTLs are seconds, and it raises shorter ones to its minimum")
	case o.rounds < 1 || o.killRounds < 1 || o.observerRounds < 1 || o.orderRounds < 1:
		return options{}, errors.New("-rounds, -kill-rounds, -observer-rounds and -order-rounds must be at least 1")
	case o.candidates < 2 || o.orderCandidates < 2:
		return options{}, errors.New("-candidates and -order-candidates must be at least 2")
	case o.observers < 1 || o.observerClients < 1 || o.observers%o.observerClients != 0:
		return options{}, errors.New("-observers must be a positive multiple of -observer-clients")
	case o.orderGap <= 0 || o.settle < 0:
		return options{}, errors.New("-order-gap must be positive, -settle not negative")
	}
	return o, nil
}

// list splits a comma-separated list of names from known, keeping known's
// order.
func list(s string, known []string) ([]string, error) {
	var names []string
	for n := range strings.SplitSeq(s, ",") {
		n = strings.TrimSpace(n)
		if !slices.Contains(known, n) {
			return nil, fmt.Errorf("unknown %q (want %s)", n, strings.Join(known, ", "))
		}
		names = append(names, n)
	}
	return slices.DeleteFunc(slices.Clone(known), func(k string) bool { return !slices.Contains(names, k) }), nil
}

func main() {
	if spec, ok := os.LookupEnv(workerEnv); ok {
		os.Exit(workerMain(spec, os.Stdin, os.Stdout))
	}
	o, err := parseFlags(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "election:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, o, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "election:", err)
		os.Exit(1)
	}
}

// run starts the servers of the systems chosen, runs the measures chosen
// on each, and prints the report to out, progress to log.
func run(ctx context.Context, o options, out, log io.Writer) error {
	runID := rand.Text()[:8]
	r := &report{
		Go:         fmt.Sprintf("%s %s/%s", runtime.Version(), runtime.GOOS, runtime.GOARCH),
		GOMAXPROCS: runtime.GOMAXPROCS(0),
		Settings: settings{
			Lease: o.lease.String(), Rounds: o.rounds, Candidates: o.candidates, KillRounds: o.killRounds,
			Observers: o.observers, ObserverClients: o.observerClients, ObserverRounds: o.observerRounds,
			OrderCandidates: o.orderCandidates, OrderRounds: o.orderRounds, OrderGap: o.orderGap.String(),
			Settle:   o.settle.String(),
			EtcdData: "the system's temporary directory",
		},
	}
	if o.etcdDir != "" {
		r.Settings.EtcdData = o.etcdDir
	}
	var systems []system
	for _, name := range o.systems {
		switch name {
		case fairlockName:
			rs, err := redistest.Start()
			if err != nil {
				return err
			}
			defer rs.Stop()
			version, err := redisVersion(ctx, rs.Addr)
			if err != nil {
				return err
			}
			r.Redis = fmt.Sprintf("Redis %s at %s (started for this run, no persistence)", version, rs.Addr)
			systems = append(systems, &fairlockSystem{addr: rs.Addr, prefix: "election-" + runID, lease: o.lease})
		case etcdName:
			es, err := startEtcd(ctx, o.etcdDir)
			if err != nil {
				return err
			}
			defer es.stop()
			r.Etcd = fmt.Sprintf("etcd %s at %s (started for this run, one member, data in %s)", es.version, es.endpoint, r.Settings.EtcdData)
			systems = append(systems, &etcdSystem{endpoint: es.endpoint, prefix: "/election-" + runID, ttl: o.lease})
		}
	}

	for _, m := range o.measures {
		for _, key := range measureRows[m] {
			r.Rows = append(r.Rows, &row{Key: key, Measure: rowTitle(key, o), ClientGo: clientGo(key)})
		}
	}
	for _, m := range o.measures {
		var err error
		if m == keyKill {
			err = runKill(ctx, o, systems, r, log)
		} else {
			for _, sys := range systems {
				if err = runMeasure(ctx, m, o, sys, r, log); err != nil {
					break
				}
			}
		}
		if err != nil {
			return err
		}
	}
	r.print(out)
	if o.jsonPath != "" {
		return r.writeJSON(o.jsonPath)
	}
	return nil
}

// measureRows are the rows of the report each measure fills, in order.
var measureRows = map[string][]string{
	keyHandOver:    {keyHandOver},
	keyKill:        {keyKill, keyKillAfter},
	measureObserve: {keyObserveProclaim, keyObserveLeader},
	keyOrder:       {keyOrder, keyOrderGap},
}

// rowTitle is the first column of the row key.
func rowTitle(key string, o options) string {
	switch key {
	case keyHandOver:
		return "Resign -> new leader"
	case keyKill:
		return fmt.Sprintf("SIGKILL -> new leader (lease %v)", o.lease)
	case keyKillAfter:
		return "  of which after the lease ran out"
	case keyObserveProclaim:
		return fmt.Sprintf("Proclaim -> last of %d observers", o.observers)
	case keyObserveLeader:
		return fmt.Sprintf("new leader -> last of %d observers", o.observers)
	case keyOrder:
		return "order: out of order, each begun in line"
	case keyOrderGap:
		return fmt.Sprintf("order: out of order, begun %v apart", o.orderGap)
	}
	return key
}

// set records sys's result for the row key.
func (r *report) set(key string, sys system, res *result) {
	for _, rw := range r.Rows {
		if rw.Key != key {
			continue
		}
		if sys.name() == fairlockName {
			rw.Fairlock = res
		} else {
			rw.Etcd = res
		}
	}
}

// runMeasure runs the measure m on sys and records its results in r.
func runMeasure(ctx context.Context, m string, o options, sys system, r *report, log io.Writer) error {
	name := sys.name()
	switch m {
	case keyHandOver:
		fmt.Fprintf(log, "election: %s: Resign -> new leader, %d rounds, %d candidates\n", name, o.rounds, o.candidates)
		samples, err := measureHandOver(ctx, sys, "handover", o.rounds, o.candidates, o.settle)
		if err != nil {
			return fmt.Errorf("%s: Resign -> new leader: %w", name, err)
		}
		s := summarize(samples)
		r.set(keyHandOver, sys, &result{Text: s.percentiles(), Summary: s})
	case measureObserve:
		per := o.observers / o.observerClients
		fmt.Fprintf(log, "election: %s: change -> %d observers over %d clients, %d rounds\n", name, o.observers, o.observerClients, o.observerRounds)
		proclaimed, leaders, err := measureObservers(ctx, sys, "observe", o.observerRounds, o.observerClients, per, o.settle)
		if err != nil {
			return fmt.Errorf("%s: change -> observers: %w", name, err)
		}
		p, l := summarize(proclaimed), summarize(leaders)
		r.set(keyObserveProclaim, sys, &result{Text: p.percentiles(), Summary: p})
		r.set(keyObserveLeader, sys, &result{Text: l.percentiles(), Summary: l})
	case keyOrder:
		for _, key := range []string{keyOrder, keyOrderGap} {
			gap := time.Duration(0)
			if key == keyOrderGap {
				gap = o.orderGap
			}
			fmt.Fprintf(log, "election: %s: order, %d rounds of %d candidates, %s\n", name, o.orderRounds, o.orderCandidates, gapText(gap))
			res, err := measureOrder(ctx, sys, key, o.orderRounds, o.orderCandidates, gap)
			if err != nil {
				return fmt.Errorf("%s: order: %w", name, err)
			}
			r.set(key, sys, &result{Text: fmt.Sprintf("%d of %d pairs", res.Inversions, res.Pairs), Order: &res})
		}
	}
	return nil
}

// gapText says how candidates begin to campaign, gap apart.
func gapText(gap time.Duration) string {
	if gap == 0 {
		return "each once the one before is in line"
	}
	return fmt.Sprintf("%v apart", gap)
}

// runKill runs SIGKILL -> new leader on every system at once, each system
// starting half a lease after the one before: a round spends nearly all
// its time waiting for the lease to run out, and the staggering keeps the
// systems' ends of leases apart.
func runKill(ctx context.Context, o options, systems []system, r *report, log io.Writer) error {
	errs := make([]error, len(systems))
	samples := make([][]killSample, len(systems))
	var logMu sync.Mutex // the systems' goroutines write log in turn: it may be any writer
	var wg sync.WaitGroup
	for i, sys := range systems {
		wg.Go(func() {
			select {
			case <-time.After(time.Duration(i) * o.lease / 2):
			case <-ctx.Done():
				errs[i] = ctx.Err()
				return
			}
			logMu.Lock()
			fmt.Fprintf(log, "election: %s: SIGKILL -> new leader, %d rounds of about %v\n", sys.name(), o.killRounds, o.lease)
			logMu.Unlock()
			var err error
			samples[i], err = measureKill(ctx, sys, "kill", o.killRounds, o.lease)
			if err != nil {
				errs[i] = fmt.Errorf("%s: SIGKILL -> new leader: %w", sys.name(), err)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	for i, sys := range systems {
		var elected, after []time.Duration
		for _, k := range samples[i] {
			elected = append(elected, k.Elected)
			after = append(after, k.After())
		}
		s, a := summarize(elected), summarize(after)
		r.set(keyKill, sys, &result{Text: s.span(), Summary: s, Kill: samples[i]})
		r.set(keyKillAfter, sys, &result{Text: a.span(), Summary: a})
	}
	return nil
}

// redisVersion returns the version of the Redis server at addr.
func redisVersion(ctx context.Context, addr string) (string, error) {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	info, err := rdb.Info(ctx, "server").Result()
	if err != nil {
		return "", fmt.Errorf("redis at %s: %w", addr, err)
	}
	return redistest.InfoField(info, "redis_version"), nil
}
