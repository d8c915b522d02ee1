package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/internal/deploy"
)

// config is one run's configuration, from the command line. A worker
// process receives the part it needs as JSON.
type config struct {
	deploy.Spec        // the deployment; none: the embedded Redis (or a quorum, below)
	Prefix      string `json:"prefix"` // key prefix of the run

	// A quorum of independent masters (-masters): their addresses, each
	// worker's Clients built with fairlock.NewQuorum over one go-redis
	// client per master. The parent alone knows how many it starts
	// itself on loopback (then it sets Masters once they run), and when
	// it kills and restarts the first of them.
	Masters       []string      `json:"masters,omitempty"`
	StartMasters  int           `json:"-"`
	RestartMaster time.Duration `json:"-"`

	// Faults (-chaos, see chaos.go) in servers the parent starts: their
	// kind, the quiet time before each, how long a pause lasts, and the
	// deployment of kill-primary. A worker process gets the kind only,
	// to quiet go-redis's logs of a server that is down.
	Chaos    string        `json:"chaos,omitempty"`
	Every    span          `json:"-"`
	Down     time.Duration `json:"-"`
	Topology string        `json:"-"`

	Kind      string    `json:"kind"`      // runMutex, runMultiLock, runSemaphore, runRWMutex or runElection
	Names     nameRange `json:"names"`     // names per attempt of the multilock kind
	Permits   int64     `json:"permits"`   // capacity of the semaphore kind's semaphores
	Readers   float64   `json:"readers"`   // fraction of the rwmutex kind's attempts that read
	Downgrade float64   `json:"downgrade"` // fraction of the rwmutex kind's writers that downgrade
	// The election kind: the observers of each election, the most an
	// observer may lag a change, and the fraction of leaderships that
	// proclaim new values.
	Observers  int           `json:"observers"`
	Lag        time.Duration `json:"lag"`
	Proclaim   float64       `json:"proclaim"`
	Locks      int           `json:"locks"`
	Clients    int           `json:"clients"`
	Goroutines int           `json:"goroutines"`
	Duration   time.Duration `json:"duration"`
	Ops        int64         `json:"ops"` // total attempts; 0: run for Duration
	Hold       span          `json:"hold"`
	Reentry    int           `json:"reentry"`
	GiveUp     float64       `json:"giveup"`
	Patience   span          `json:"patience"`
	Try        float64       `json:"try"`
	Lease      time.Duration `json:"lease"`
	WaiterTTL  time.Duration `json:"waiter_ttl"`
	Grace      time.Duration `json:"grace"`
	Seed       uint64        `json:"seed"`
	Verbose    bool          `json:"verbose"`

	// Parent only.
	Procs   int    `json:"-"`
	JSON    bool   `json:"-"`
	SVG     string `json:"-"`
	History string `json:"-"`

	// Worker process only: its index (naming its workers "p<Proc>/..."),
	// the numbers of the clients it runs, and how many the whole run has
	// (0: Clients), over which the election kind's observers are spread.
	Proc       int   `json:"proc"`
	ClientIDs  []int `json:"client_ids,omitempty"`
	AllClients int   `json:"all_clients,omitempty"`
}

// usageError is a command-line error: exit status 2 (exitCannotRun). A
// nil err was reported by the flag package already.
type usageError struct{ err error }

func (e usageError) Error() string {
	if e.err == nil {
		return "bad flags"
	}
	return e.err.Error()
}

// parseFlags reads the command line. -h prints the usage and returns
// flag.ErrHelp; any other error is a usageError.
func parseFlags(args []string, stderr io.Writer) (config, error) {
	var c config
	c.Names = nameRange{2, 3}
	c.Hold = span{0, 2 * time.Millisecond}
	c.Patience = span{time.Millisecond, 20 * time.Millisecond}
	fs := flag.NewFlagSet("stress", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: stress [flags]\n\n"+
			"Hammers fairlock locks from many clients and checks that every hold was\n"+
			"exclusive, every grant came in FIFO order, and nothing was left behind.\n"+
			"With -kind multilock each attempt takes several names at once with a\n"+
			"MultiLock, and the check adds all-or-none, and what the deployment\n"+
			"promises of how the names are taken: one ticket on one server, granted\n"+
			"every name at once, or one order of the names on a cluster. With -kind\n"+
			"semaphore or rwmutex each attempt takes permits of a Semaphore or the\n"+
			"read or write lock of a RWMutex, and the check is that no more was held\n"+
			"at once than the lock allows, with grants in FIFO order. With -kind\n"+
			"election the workers are candidates of Elections, observed by -observers\n"+
			"per election: at most one leader at a time, rising terms, FIFO, and every\n"+
			"observer's views real, never backwards, within -lag of each change and\n"+
			"right at the end. With -masters the Mutexes (or the Elections) are\n"+
			"quorum locks over independent masters, and grants must come in their\n"+
			"bakery order. With -chaos it starts its own servers and\n"+
			"injects faults into them, and the verdicts a fault explains are excused.\n"+
			"Without -redis, -cluster, -sentinel, -masters or -chaos it runs against\n"+
			"an embedded Redis.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	c.Spec.Flags(fs, "(default: an embedded Redis)")
	fs.Var(masterFlag{&c}, "masters", "a quorum of independent Redis masters, their `addresses` host:port,host:port,..., or how many\n"+
		"to start here on free loopback ports (redis-server on PATH); every Client is fairlock.NewQuorum\n"+
		"over them; only -kind "+runMutex+" or "+runElection)
	fs.DurationVar(&c.RestartMaster, "restart-master", 0, "with -masters N: `D` after the start, kill master 1 (SIGKILL: its keys are lost), and restart it\n"+
		"empty on its port once the lease and the waiter TTL have passed (0: never)")
	c.chaosFlags(fs)
	fs.StringVar(&c.Kind, "kind", runMutex, "`KIND` of attempt: "+runMutex+" (one name each), "+runMultiLock+" (several at once, see -names), "+
		runSemaphore+" (permits of a Semaphore, see -permits), "+runRWMutex+" (a RWMutex's read or write lock, see -readers)\n"+
		"or "+runElection+" (a candidate's Campaign of an Election, see -observers)")
	fs.Var(&c.Names, "names", "names per attempt of -kind "+runMultiLock+", `N` or LO..HI (uniform), drawn from the -locks names; one name is taken with a Mutex")
	fs.Int64Var(&c.Permits, "permits", 3, "capacity of each Semaphore of -kind "+runSemaphore+"; each attempt asks for 1 to `N` permits (uniform)")
	fs.Float64Var(&c.Readers, "readers", 0.7, "fraction of the attempts of -kind "+runRWMutex+" that take the read lock; the others take the write lock")
	fs.Float64Var(&c.Downgrade, "downgrade", 0.2, "fraction of the writers of -kind "+runRWMutex+" that downgrade: take the read lock under the write hold, then unlock the write lock")
	fs.IntVar(&c.Observers, "observers", 2, "observers of each election of -kind "+runElection+" (Election.Observe), spread over the Clients of the run")
	fs.DurationVar(&c.Lag, "lag", defaultLag, "with -kind "+runElection+": the most an observer may lag a change of leadership, from the\n"+
		"return of the call that made it (or the end of a lease lost) to the receipt of a view as new")
	fs.Float64Var(&c.Proclaim, "proclaim", 0.3, "fraction of the leaderships of -kind "+runElection+" that proclaim new values while they lead (1 to\n"+
		"3 of them, each with Proclaim or with Campaign and the leadership's context)")
	fs.IntVar(&c.Locks, "locks", 3, "number of lock names (of elections, with -kind "+runElection+")")
	fs.IntVar(&c.Clients, "clients", 4, "number of fairlock clients, each with its own connections")
	fs.IntVar(&c.Goroutines, "goroutines", 4, "goroutines per client")
	fs.IntVar(&c.Procs, "procs", 0, "run the clients in `N` worker processes (0: in this process)")
	fs.DurationVar(&c.Duration, "duration", 10*time.Second, "how long to run")
	fs.Int64Var(&c.Ops, "ops", 0, "run this many attempts in all instead of -duration")
	fs.Var(&c.Hold, "hold", "hold time, `D` or MIN-MAX (uniform)")
	fs.IntVar(&c.Reentry, "reentry", 2, "re-enter each hold 0 to `N` times with the held context")
	fs.Float64Var(&c.GiveUp, "giveup", 0.1, "fraction of Lock calls made with a short deadline (see -patience)")
	fs.Var(&c.Patience, "patience", "wait deadline of -giveup calls, `D` or MIN-MAX")
	fs.Float64Var(&c.Try, "try", 0.1, "fraction of attempts made with TryLock")
	fs.DurationVar(&c.Lease, "lease", 5*time.Second, "watchdog lease of the holds")
	fs.DurationVar(&c.WaiterTTL, "waiter-ttl", 5*time.Second, "how long a silent waiter keeps its place")
	fs.DurationVar(&c.Grace, "grace", 10*time.Second, "how long attempts may take to end after the run")
	fs.Uint64Var(&c.Seed, "seed", 0, "seed of the workload's choices (0: random)")
	fs.BoolVar(&c.JSON, "json", false, "write the report as JSON to stdout")
	fs.StringVar(&c.SVG, "svg", "", "draw a timeline of the holds into `FILE`")
	fs.StringVar(&c.History, "history", "", "write every attempt to `FILE` as JSON lines")
	fs.BoolVar(&c.Verbose, "v", false, "log the clients' warnings to stderr (and, on a quorum, go-redis's failed dials of a master that is down)")

	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return c, err
		}
		return c, usageError{}
	}
	if fs.NArg() > 0 {
		return c, usageError{fmt.Errorf("unexpected argument %q", fs.Arg(0))}
	}
	if c.Seed == 0 {
		c.Seed = rand.Uint64()
	}
	// Flags of one kind only.
	needs := map[string]string{"names": runMultiLock, "permits": runSemaphore, "readers": runRWMutex, "downgrade": runRWMutex,
		"observers": runElection, "lag": runElection, "proclaim": runElection}
	// Flags an election's candidates have no use for: an Election has
	// no TryLock, and its leadership is not re-entered.
	notFor := map[string]string{"try": runElection, "reentry": runElection}
	var misplaced error
	fs.Visit(func(f *flag.Flag) {
		if kind, ok := needs[f.Name]; ok && c.Kind != kind && misplaced == nil {
			misplaced = fmt.Errorf("-%s needs -kind %s", f.Name, kind)
		}
		if kind, ok := notFor[f.Name]; ok && c.Kind == kind && misplaced == nil {
			misplaced = fmt.Errorf("-%s does not go with -kind %s", f.Name, kind)
		}
	})
	if c.Kind == runElection {
		c.Try, c.Reentry = 0, 0
	}
	if misplaced == nil {
		misplaced = c.chaosMisplaced(fs)
	}
	if misplaced != nil {
		return c, usageError{misplaced}
	}
	if err := c.validate(); err != nil {
		return c, usageError{err}
	}
	return c, nil
}

// The kinds of run: what each attempt takes.
const (
	runMutex     = "mutex"     // one name, with a Mutex
	runMultiLock = "multilock" // several names at once, with a MultiLock
	runSemaphore = "semaphore" // permits of one name's Semaphore
	runRWMutex   = "rwmutex"   // the read or the write lock of one name's RWMutex
	runElection  = "election"  // a candidate's Campaign of one name's Election
)

// defaultLag is the default of -lag, the most an observer may lag a
// change of leadership. A change is pushed: the script that makes it
// publishes on the election's channel, and each Client's watcher reads
// the leadership once told, a round trip (well under a millisecond on
// loopback, a few on a busy machine), and hands the view to its
// observers. A lease that runs out is read when it ends. A second is a
// thousand times that, room for a machine shared with other work, a
// garbage collection or a scheduler's stall, and still far below
// anything a view that waited for a poll or a lease (a third of the
// waiter TTL, the lease: seconds) would take: a lag past it is a push
// lost, not a slow one.
const defaultLag = time.Second

// runKinds lists the kinds of run.
var runKinds = []string{runMutex, runMultiLock, runSemaphore, runRWMutex, runElection}

// Bounds that keep a typo from starting a million goroutines.
const (
	maxWorkers = 10000
	maxLocks   = 100000
	maxProcs   = 64
	maxReentry = 100
	maxPermits = 1000
	maxMasters = 15
	maxWatch   = 1000 // observers per election
)

// multiWay returns how the run's MultiLocks take their names: with one
// ticket on one server (-redis, -sentinel, the embedded Redis), whose
// client is a *redis.Client, one name after another on a -cluster.
func (c *config) multiWay() multiWay {
	if len(c.Cluster) > 0 {
		return oneByOne
	}
	return oneTicket
}

func (c *config) validate() error {
	if err := c.Spec.Validate(); err != nil {
		return err
	}
	if err := c.validateQuorum(); err != nil {
		return err
	}
	if err := c.validateChaos(); err != nil {
		return err
	}
	switch {
	case !slices.Contains(runKinds, c.Kind):
		return fmt.Errorf("-kind %q: want %s, %s, %s, %s or %s", c.Kind, runMutex, runMultiLock, runSemaphore, runRWMutex, runElection)
	case c.Locks < 1 || c.Locks > maxLocks:
		return fmt.Errorf("-locks %d: want 1 to %d", c.Locks, maxLocks)
	case c.Kind == runMultiLock && (c.Names.Lo < 1 || c.Names.Hi > min(c.Locks, fairlock.MaxMultiNames)):
		return fmt.Errorf("-names %v: want 1 <= LO <= HI <= -locks %d (and at most %d)", &c.Names, c.Locks, fairlock.MaxMultiNames)
	case c.Kind == runSemaphore && (c.Permits < 1 || c.Permits > maxPermits):
		return fmt.Errorf("-permits %d: want 1 to %d", c.Permits, maxPermits)
	case c.Kind == runRWMutex && !(c.Readers >= 0 && c.Readers <= 1):
		return fmt.Errorf("-readers %v: want a fraction from 0 to 1", c.Readers)
	case c.Kind == runRWMutex && !(c.Downgrade >= 0 && c.Downgrade <= 1):
		return fmt.Errorf("-downgrade %v: want a fraction from 0 to 1", c.Downgrade)
	case c.Kind == runElection && (c.Observers < 0 || c.Observers > maxWatch):
		return fmt.Errorf("-observers %d: want 0 to %d", c.Observers, maxWatch)
	case c.Kind == runElection && c.Lag <= 0:
		return fmt.Errorf("-lag %v: want a positive duration", c.Lag)
	case c.Kind == runElection && !(c.Proclaim >= 0 && c.Proclaim <= 1):
		return fmt.Errorf("-proclaim %v: want a fraction from 0 to 1", c.Proclaim)
	case c.Clients < 1 || c.Goroutines < 1:
		return fmt.Errorf("-clients %d -goroutines %d: want at least 1 each", c.Clients, c.Goroutines)
	case c.Clients*c.Goroutines > maxWorkers || c.Clients > maxWorkers || c.Goroutines > maxWorkers:
		return fmt.Errorf("-clients × -goroutines: more than %d workers", maxWorkers)
	case c.Procs < 0 || c.Procs > maxProcs:
		return fmt.Errorf("-procs %d: want 0 to %d", c.Procs, maxProcs)
	case c.Ops < 0:
		return fmt.Errorf("-ops %d: negative", c.Ops)
	case c.Ops > 0 && c.Ops < int64(c.Procs):
		return fmt.Errorf("-ops %d: fewer than -procs %d", c.Ops, c.Procs)
	case c.Ops == 0 && c.Duration <= 0:
		return fmt.Errorf("-duration %v: want a positive duration (or -ops)", c.Duration)
	case c.Reentry < 0 || c.Reentry > maxReentry:
		return fmt.Errorf("-reentry %d: want 0 to %d", c.Reentry, maxReentry)
	case !(c.GiveUp >= 0 && c.GiveUp <= 1):
		return fmt.Errorf("-giveup %v: want a fraction from 0 to 1", c.GiveUp)
	case !(c.Try >= 0 && c.Try <= 1):
		return fmt.Errorf("-try %v: want a fraction from 0 to 1", c.Try)
	case c.Patience.Min <= 0:
		return fmt.Errorf("-patience %v: want a positive duration", c.Patience)
	case c.Lease < fairlock.MinDuration:
		return fmt.Errorf("-lease %v: want at least %v", c.Lease, fairlock.MinDuration)
	case c.WaiterTTL < fairlock.MinDuration:
		return fmt.Errorf("-waiter-ttl %v: want at least %v", c.WaiterTTL, fairlock.MinDuration)
	case c.Grace <= 0:
		return fmt.Errorf("-grace %v: want a positive duration", c.Grace)
	}
	return nil
}

// quorum reports whether the run is on a quorum of masters (-masters).
func (c *config) quorum() bool { return len(c.Masters) > 0 || c.StartMasters > 0 }

// validateQuorum checks -masters and -restart-master.
func (c *config) validateQuorum() error {
	switch {
	case c.quorum() && len(c.Chosen()) > 0:
		return fmt.Errorf("-masters and %s exclude each other: give one", c.Chosen()[0])
	case c.quorum() && c.Kind != runMutex && c.Kind != runElection:
		return fmt.Errorf("-masters needs -kind %s or %s: a quorum Client has Mutexes and Elections only", runMutex, runElection)
	case c.RestartMaster < 0:
		return fmt.Errorf("-restart-master %v: negative", c.RestartMaster)
	case c.RestartMaster > 0 && c.StartMasters == 0:
		return errors.New("-restart-master needs -masters N: it restarts a master this command started")
	case c.RestartMaster > 0 && c.StartMasters < 3:
		return fmt.Errorf("-restart-master needs -masters 3 or more, so that a majority stays up, not %d", c.StartMasters)
	case c.RestartMaster > 0 && c.Ops == 0 && c.RestartMaster >= c.Duration:
		return fmt.Errorf("-restart-master %v: not within -duration %v", c.RestartMaster, c.Duration)
	}
	return nil
}
