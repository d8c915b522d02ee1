package main

import (
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/fairlock/fairlock/internal/deploy"
	"github.com/fairlock/fairlock/internal/redistest"
)

// Kinds of fault (-chaos). Each goes into servers the command starts on
// loopback itself, never into a deployment it was given.
const (
	// chaosRestartAOF kills a redis-server that fsyncs every write to
	// its append-only file (SIGKILL) and restarts it on that file at
	// once: it keeps every write it acknowledged.
	chaosRestartAOF = "restart-aof"
	// chaosRestartEmpty kills a redis-server without persistence and
	// restarts it empty once every hold and place in line it kept is
	// over (restartDelay).
	chaosRestartEmpty = "restart-empty"
	// chaosPause stops a redis-server (SIGSTOP) for -down, then lets it
	// go on (SIGCONT).
	chaosPause = "pause"
	// chaosFailover asks the sentinels of a primary with two replicas
	// for a failover (SENTINEL FAILOVER).
	chaosFailover = "failover"
	// chaosKillPrimary kills the primary of such a Sentinel set, or on a
	// Cluster the master serving a lock's slot, lets a replica take
	// over, and brings the killed server back as a replica.
	chaosKillPrimary = "kill-primary"
)

// chaosKinds lists the kinds of fault, in the order the usage names them.
var chaosKinds = []string{chaosRestartAOF, chaosRestartEmpty, chaosPause, chaosFailover, chaosKillPrimary}

// Deployments of -chaos kill-primary (-topology).
const (
	topoSentinel = "sentinel" // a primary, two replicas and three sentinels
	topoCluster  = "cluster"  // three masters with a replica each
)

// Defaults of the fault flags.
const (
	defaultEvery = 10 * time.Second
	defaultDown  = time.Second
)

// chaosFlags defines -chaos, -every, -down and -topology on fs.
func (c *config) chaosFlags(fs *flag.FlagSet) {
	c.Every = span{defaultEvery, defaultEvery}
	fs.StringVar(&c.Chaos, "chaos", "", "inject faults of `KIND` into servers this command starts on loopback (redis-server on PATH),\n"+
		"one at a time (with -masters N, into up to (N-1)/2 masters at once): "+chaosRestartAOF+" (SIGKILL a server\n"+
		"with an fsynced append-only file, restart it on that file at once), "+chaosRestartEmpty+" (SIGKILL a server\n"+
		"without persistence, restart it empty after the lease and the waiter TTL), "+chaosPause+" (SIGSTOP a server\n"+
		"for -down), "+chaosFailover+" (SENTINEL FAILOVER of a primary with 2 replicas and 3 sentinels) or\n"+
		chaosKillPrimary+" (SIGKILL the primary, see -topology, and bring it back as a replica); excludes -redis,\n"+
		"-cluster and -sentinel")
	fs.Var(&c.Every, "every", "with -chaos: the quiet time before each fault, `D` or LO..HI (uniform), from the start of the\n"+
		"run or from the last fault injected or over, whichever came later")
	fs.DurationVar(&c.Down, "down", defaultDown, "with -chaos "+chaosPause+": how long a server stays stopped")
	fs.StringVar(&c.Topology, "topology", topoSentinel, "with -chaos "+chaosKillPrimary+": "+topoSentinel+" (a primary, 2 replicas and 3 sentinels; clients\n"+
		"through the sentinels) or "+topoCluster+" (a Cluster of 3 masters and 3 replicas; the master serving a\n"+
		"random lock's slot is killed)")
}

// chaosMisplaced returns the error of a fault flag given without the
// -chaos it goes with.
func (c *config) chaosMisplaced(fs *flag.FlagSet) error {
	var err error
	fs.Visit(func(f *flag.Flag) {
		switch {
		case err != nil:
		case f.Name == "every" && c.Chaos == "":
			err = errors.New("-every needs -chaos")
		case f.Name == "down" && c.Chaos != chaosPause:
			err = fmt.Errorf("-down needs -chaos %s", chaosPause)
		case f.Name == "topology" && c.Chaos != chaosKillPrimary:
			err = fmt.Errorf("-topology needs -chaos %s", chaosKillPrimary)
		}
	})
	return err
}

// validateChaos checks -chaos and the flags that go with it.
func (c *config) validateChaos() error {
	if c.Chaos == "" {
		return nil
	}
	switch {
	case !slices.Contains(chaosKinds, c.Chaos):
		return fmt.Errorf("-chaos %q: want %s", c.Chaos, strings.Join(chaosKinds, ", "))
	case len(c.Chosen()) > 0:
		return fmt.Errorf("-chaos and %s exclude each other: faults go only into servers this command starts", c.Chosen()[0])
	case len(c.Masters) > 0:
		return errors.New("-chaos needs -masters N, not addresses: faults go only into servers this command starts")
	case c.RestartMaster > 0:
		return errors.New("-chaos and -restart-master exclude each other: give one")
	case c.StartMasters > 0 && (c.Chaos == chaosFailover || c.Chaos == chaosKillPrimary):
		return fmt.Errorf("-chaos %s acts on a primary and its replicas: not with -masters", c.Chaos)
	case c.StartMasters > 0 && c.StartMasters < 3:
		return fmt.Errorf("-chaos with -masters needs 3 or more masters, so that a majority stays up, not %d", c.StartMasters)
	case c.Every.Min <= 0:
		return fmt.Errorf("-every %v: want a positive duration", &c.Every)
	case c.Down <= 0:
		return fmt.Errorf("-down %v: want a positive duration", c.Down)
	case c.Topology != topoSentinel && c.Topology != topoCluster:
		return fmt.Errorf("-topology %q: want %s or %s", c.Topology, topoSentinel, topoCluster)
	}
	// An attempt at the end of the run may wait out a fault on the one
	// server: the grace must outlast that, or it is left behind.
	down := map[string]time.Duration{chaosRestartEmpty: restartDelay(*c), chaosPause: c.Down}[c.Chaos]
	if c.StartMasters == 0 && c.Grace <= down {
		return fmt.Errorf("-grace %v: want longer than the %v a server stays down with -chaos %s, so that attempts can wait out a fault at the end of the run",
			c.Grace, down, c.Chaos)
	}
	return nil
}

// onCluster reports whether the run's faults need a Cluster.
func (c *config) onCluster() bool { return c.Chaos == chaosKillPrimary && c.Topology == topoCluster }

// aofArgs are the directives of a server that keeps every write it
// acknowledged: each is in its append-only file, fsynced, before the
// reply.
var aofArgs = []string{"--appendonly", "yes", "--appendfsync", "always"}

// startChaosTarget starts the deployment c's faults go into: one
// redis-server (with an append-only file for restart-aof), or N masters
// with -masters N; a Sentinel set for failover and kill-primary; a
// Cluster for kill-primary -topology cluster.
func startChaosTarget(c config) (*target, error) {
	var extra []string
	if c.Chaos == chaosRestartAOF {
		extra = aofArgs
	}
	switch {
	case c.StartMasters > 0:
		t, err := startMasters(c.StartMasters, extra...)
		if t != nil && extra != nil {
			t.started += ", each with an fsynced append-only file"
		}
		return t, err
	case c.onCluster():
		cl, err := redistest.StartCluster(3, 1)
		if err != nil {
			return nil, fmt.Errorf("starting a Cluster: %w", err)
		}
		return &target{spec: deploy.Spec{Cluster: cl.Addrs()}, cluster: cl,
			started: "3 masters and 3 replicas started on loopback"}, nil
	case c.Chaos == chaosFailover || c.Chaos == chaosKillPrimary:
		ss, err := redistest.StartSentinel(2, 3)
		if err != nil {
			return nil, fmt.Errorf("starting a Sentinel set: %w", err)
		}
		return &target{spec: deploy.Spec{Sentinel: ss.SentinelAddrs(), Master: ss.MasterName()}, sentinel: ss,
			started: "a primary, 2 replicas and 3 sentinels started on loopback"}, nil
	}
	s, err := redistest.Start(extra...)
	if err != nil {
		return nil, fmt.Errorf("starting a redis-server: %w", err)
	}
	t := &target{spec: deploy.Spec{RedisURL: "redis://" + s.Addr + "/0"}, local: []*redistest.Server{s},
		started: "a redis-server started on loopback"}
	if extra != nil {
		t.started += " with an fsynced append-only file"
	}
	return t, nil
}

// driftAllowance is the clock drift a killed server's stay down allows
// for: the quorum client's default drift factor.
const driftAllowance = 0.01

// restartDelay is how long a server killed without persistence stays
// down before it is restarted empty: longer than any hold or waiter's
// place it kept could have lasted (the lease and the waiter TTL, with the
// clients' clock drift), and a second more. A server that comes back
// sooner without its keys breaks the assumption of a delayed restart,
// which the quorum lock makes of a master that loses its keys, and which
// is what lets a holder learn it lost the lock before another is granted
// it.
func restartDelay(c config) time.Duration {
	d := max(c.Lease, c.WaiterTTL)
	return d + time.Duration(float64(d)*driftAllowance) + time.Second
}
