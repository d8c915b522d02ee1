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
	"time"
)

// options are the command line's settings.
type options struct {
	duration        time.Duration
	waitersDuration time.Duration
	warmup          time.Duration
	jsonPath        string
	workloads       string
	libs            string
	redisURL        string
	rounds          int
	lib             libConfig
	scale           scaleConfig
}

func parseFlags(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("peers", flag.ContinueOnError)
	fs.DurationVar(&o.duration, "duration", 3*time.Second, "measured time of each (workload, library) run")
	fs.DurationVar(&o.waitersDuration, "waiters-duration", 6*time.Second, "measured time of the 10,000 waiters workload")
	fs.DurationVar(&o.warmup, "warmup", 500*time.Millisecond, "warm-up before each run, at most a sixth of its measured time")
	fs.StringVar(&o.jsonPath, "json", "", "also write the results as JSON to this file")
	fs.StringVar(&o.workloads, "workloads", "", "comma-separated workloads to run: "+workloadKeys()+" (default all)")
	fs.StringVar(&o.libs, "libs", "", "comma-separated libraries to run: fairlock, redsync, redislock, "+atomicName+" (default all; "+atomicName+" runs in multi only)")
	fs.IntVar(&o.rounds, "rounds", 1, "measure each (workload, library) this many times, the libraries in turn, and keep each one's median run (see doc.go)")
	fs.StringVar(&o.redisURL, "redis", "", "URL of an existing Redis to use (default: start a redis-server from PATH)")
	fs.DurationVar(&o.lib.ttl, "ttl", 30*time.Second, "fairlock's lease, redsync's expiry and redislock's TTL")
	fs.DurationVar(&o.lib.redsyncDelay, "redsync-delay", defaultRedsyncDelay, "redsync's retry delay")
	fs.DurationVar(&o.lib.redislockBackoff, "redislock-backoff", defaultRedislockBackoff, "redislock's linear backoff")
	fs.DurationVar(&o.lib.multiWait, "multi-wait", defaultMultiWait, "in the multi workload, the longest random wait of the peers between two attempts at a set of locks")
	fs.DurationVar(&o.lib.semaphoreWait, "semaphore-wait", defaultSemaphoreWait, "in the semaphore workload, the longest random wait of the peers between two attempts at its permits")
	fs.IntVar(&o.scale.waiters, "scale-waiters", 10000, "waiters of the scale part's large hand-over and of its waiters measurement")
	fs.IntVar(&o.scale.holds, "scale-holds", 10000, "locks the scale part holds at once through one Client")
	fs.DurationVar(&o.scale.window, "scale-window", 3*time.Second, "time over which the scale part counts the renewals of its holds")
	fs.IntVar(&o.scale.names, "scale-names", 1000000, "distinct names the scale part locks and unlocks through one Client, on one server and on a Cluster")
	fs.StringVar(&o.scale.profile, "scale-names-profile", "", "directory to write heap profiles of the names step to (default none)")
	if err := fs.Parse(args); err != nil {
		return options{}, err
	}
	if o.duration <= 0 || o.waitersDuration <= 0 || o.warmup < 0 || o.lib.ttl <= 0 || o.scale.window <= 0 || o.lib.multiWait < 0 || o.lib.semaphoreWait < 0 {
		return options{}, errors.New("durations must be positive (-warmup, -multi-wait and -semaphore-wait may be 0)")
	}
	if o.rounds < 1 {
		return options{}, errors.New("-rounds must be at least 1")
	}
	if o.scale.waiters <= 0 || o.scale.holds <= 0 || o.scale.names <= 0 {
		return options{}, errors.New("-scale-waiters, -scale-holds and -scale-names must be positive")
	}
	return o, nil
}

// The retry settings of the peers; doc.go says how they were chosen.
const (
	defaultRedsyncDelay     = 10 * time.Millisecond
	defaultRedislockBackoff = 10 * time.Millisecond
	defaultMultiWait        = time.Millisecond
	defaultSemaphoreWait    = time.Millisecond
)

func main() {
	o, err := parseFlags(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, o, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "peers:", err)
		os.Exit(1)
	}
}

// run measures every selected (workload, library) pair, then the scale
// part when selected, printing each table to out as soon as it is done and
// progress to log.
func run(ctx context.Context, o options, out, log io.Writer) error {
	sel, err := selectWorkloads(o.workloads)
	if err != nil {
		return err
	}
	libs, err := selectLibraries(libraries(o.lib), o.libs)
	if err != nil {
		return err
	}
	srv, err := openServer(ctx, o.redisURL)
	if err != nil {
		return err
	}
	defer srv.close()

	r := &report{
		Server:          srv.desc,
		Go:              fmt.Sprintf("%s %s/%s", runtime.Version(), runtime.GOOS, runtime.GOARCH),
		GOMAXPROCS:      runtime.GOMAXPROCS(0),
		Duration:        o.duration.String(),
		WaitersDuration: o.waitersDuration.String(),
		Warmup:          o.warmup.String(),
		Rounds:          o.rounds,
		TTL:             o.lib.ttl.String(),
		RedsyncDelay:    o.lib.redsyncDelay.String(),
		RedislockDelay:  o.lib.redislockBackoff.String(),
		libs:            libs,
	}
	if slices.ContainsFunc(sel.workloads, func(w workload) bool { return w.multi[1] > 0 }) {
		r.MultiWait = o.lib.multiWait.String()
	}
	if slices.ContainsFunc(sel.workloads, func(w workload) bool { return w.permits > 0 }) {
		r.SemaphoreWait = o.lib.semaphoreWait.String()
	}
	// The workloads on several masters run on masters started for them.
	var masters servers
	if n := quorumMasters(sel.workloads, libs); n > 0 {
		if masters, err = openMasters(ctx, n); err != nil {
			return err
		}
		defer masters.close()
		r.Masters = masters.describe()
	}
	r.printHeader(out)
	runID := rand.Text()[:8]
	// The floor is measured right before the workload it is set against,
	// hold0, so that the two share the machine's state as closely as they
	// can; first when hold0 does not run.
	floor := func() error {
		warm := min(o.warmup, (o.duration / 6).Round(time.Millisecond))
		fmt.Fprintf(log, "peers: %s: %v warm-up, %v measured\n", floorKey, warm, o.duration)
		f, err := measureFloor(ctx, srv, o.duration, warm, runID)
		if err != nil {
			return fmt.Errorf("%s: %w", floorKey, err)
		}
		printFloor(out, f)
		r.Workloads = append(r.Workloads, floorKey)
		r.Floor = &f
		return nil
	}
	if sel.floor && !slices.ContainsFunc(sel.workloads, func(w workload) bool { return w.key == hold0Key }) {
		if err := floor(); err != nil {
			return err
		}
	}
	for _, w := range sel.workloads {
		if w.key == hold0Key && sel.floor {
			if err := floor(); err != nil {
				return err
			}
		}
		d := o.duration
		if w.long {
			d = o.waitersDuration
		}
		warm := min(o.warmup, (d / 6).Round(time.Millisecond))
		var active []library
		for _, lib := range libs {
			if lib.runsIn(w) {
				active = append(active, lib)
			}
		}
		if len(active) == 0 {
			fmt.Fprintf(log, "peers: %s: skipped, no library that -libs selects runs in it\n", w.key)
			continue
		}
		on := servers{srv}
		if w.masters > 0 {
			on = masters
		}
		// runs[i] are the runs of active[i], one per round; each round
		// runs every library once, starting one further along each time.
		runs := make([][]result, len(active))
		for r := range o.rounds {
			for j := range active {
				i := (j + r) % len(active)
				lib := active[i]
				fmt.Fprintf(log, "peers: %s, %s: %v warm-up, %v measured%s\n", w.key, lib.name, warm, d, roundNote(r, o.rounds))
				id := runID
				if o.rounds > 1 {
					id = fmt.Sprintf("%s:r%d", runID, r)
				}
				res, err := measure(ctx, on, w, lib, d, warm, id)
				if err != nil {
					return fmt.Errorf("%s: %w", w.key, err)
				}
				runs[i] = append(runs[i], res)
			}
		}
		rows := medianRuns(runs)
		printWorkload(out, w, rows)
		if w.key == hold0Key && r.Floor != nil {
			compareToFloor(r.Floor, rows)
			if r.Floor.FairlockRatio > 0 {
				fmt.Fprintf(out, "\n%s.\n", floorLine(*r.Floor))
			}
		}
		r.Workloads = append(r.Workloads, w.key)
		r.Results = append(r.Results, rows...)
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	if len(r.Results) > 0 {
		r.printSummary(out)
	}
	switch {
	case !sel.scale && !sel.names:
	case !slices.ContainsFunc(libs, func(l library) bool { return l.name == "fairlock" }):
		fmt.Fprintln(log, "peers: scale: skipped, it measures fairlock, which -libs leaves out")
	default:
		var s scaleResult
		if sel.scale {
			if s, err = runScale(ctx, srv, o, log); err != nil {
				return fmt.Errorf("scale: %w", err)
			}
			r.Workloads = append(r.Workloads, scaleKey)
		} else {
			if s.Names, err = measureNamesEverywhere(ctx, srv, o.scale, log); err != nil {
				return fmt.Errorf("scale: names: %w", err)
			}
			r.Workloads = append(r.Workloads, namesKey)
		}
		printScale(out, s)
		r.Scale = &s
	}
	if o.jsonPath != "" {
		return r.writeJSON(o.jsonPath)
	}
	return nil
}

// selectLibraries returns the libraries named in the comma-separated list,
// in their usual order, or all of them when it is empty.
func selectLibraries(all []library, list string) ([]library, error) {
	if list == "" {
		return all, nil
	}
	names := strings.Split(list, ",")
	for i, n := range names {
		names[i] = strings.TrimSpace(n)
		if !slices.ContainsFunc(all, func(l library) bool { return l.name == names[i] }) {
			return nil, fmt.Errorf("unknown library %q", n)
		}
	}
	return slices.DeleteFunc(slices.Clone(all), func(l library) bool { return !slices.Contains(names, l.name) }), nil
}
