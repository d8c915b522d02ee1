package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/fairlock/fairlock/internal/pause"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/fairlock/fairlock/queue"
)

// faultBound bounds each wait of a fault: for a failover, for a server
// to come back, for replicas to copy the dataset.
const faultBound = time.Minute

// striker makes the faults of a run on the deployment the command
// started for them: each of its methods is a chaosPlan's strike.
type striker struct {
	tgt   *target
	cfg   config
	delay time.Duration // how long a server killed without persistence stays down
}

// server returns the server of target i, and its name for the report.
func (s *striker) server(i int) (*redistest.Server, string) {
	srv := s.tgt.local[i]
	if s.tgt.quorum() {
		return srv, fmt.Sprintf("master %d (%s)", i+1, srv.Addr)
	}
	return srv, srv.Addr
}

// restartAOF kills server i and restarts it at once on its append-only
// file.
func (s *striker) restartAOF(_ context.Context, i int, log faultLog) { s.restart(i, log, 0) }

// restartEmpty kills server i and restarts it empty once it has been down
// for the restart delay, whether the run is over or not: the delay is
// what keeps its lost keys from breaking a lock.
func (s *striker) restartEmpty(_ context.Context, i int, log faultLog) { s.restart(i, log, s.delay) }

// restart kills server i with SIGKILL and restarts it on its port, delay
// after the kill.
func (s *striker) restart(i int, log faultLog, delay time.Duration) {
	srv, name := s.server(i)
	log.set(func(f *fault) { f.Target = name })
	killed := log.now(func(f *fault, t time.Time) { f.Injected = t })
	srv.Kill()
	log.now(func(f *fault, t time.Time) { f.Exited = t })
	time.Sleep(time.Until(killed.Add(delay))) // the time it stays down
	if err := srv.Restart(); err != nil {
		log.fail(fmt.Errorf("restarting %s: %w", name, err))
		return
	}
	log.now(func(f *fault, t time.Time) { f.Back, f.Ready = t, t })
}

// pause stops server i with SIGSTOP and lets it go on with SIGCONT after
// -down.
func (s *striker) pause(_ context.Context, i int, log faultLog) {
	srv, name := s.server(i)
	log.set(func(f *fault) { f.Target = name })
	log.now(func(f *fault, t time.Time) { f.Injected = t })
	if err := srv.Suspend(); err != nil {
		log.fail(err)
		return
	}
	time.Sleep(s.cfg.Down) // the time it stays stopped
	if err := srv.Resume(); err != nil {
		log.fail(err)
		return
	}
	log.now(func(f *fault, t time.Time) { f.Back, f.Ready = t, t })
}

// failover asks the sentinels for a failover, again while they refuse
// (one still in progress, no replica good enough yet), waits until it is
// done, and then, until ready ends, until every replica is in sync with
// the new primary.
func (s *striker) failover(ready context.Context, _ int, log faultLog) {
	ss := s.tgt.sentinel
	ctx, cancel := context.WithTimeout(context.Background(), faultBound)
	defer cancel()
	var old string
	for {
		log.now(func(f *fault, t time.Time) { f.Injected = t })
		var err error
		if old, err = ss.Failover(ctx); err == nil {
			break
		}
		if !pause.For(ctx, 200*time.Millisecond) {
			log.fail(err)
			return
		}
	}
	log.set(func(f *fault) { f.Target = "primary " + old })
	s.sentinelDone(ready, old, log, func(context.Context) error { return nil })
}

// killPrimary kills the primary of the Sentinel set, waits for a replica
// to take over, and, until ready ends, brings the killed server back as
// its replica, in sync.
func (s *striker) killPrimary(ready context.Context, _ int, log faultLog) {
	ss := s.tgt.sentinel
	ctx, cancel := context.WithTimeout(context.Background(), faultBound)
	defer cancel()
	old, err := ss.Primary(ctx)
	if err != nil {
		log.fail(err)
		return
	}
	log.set(func(f *fault) { f.Target = "primary " + old })
	log.now(func(f *fault, t time.Time) { f.Injected = t })
	if err := ss.Kill(old); err != nil {
		log.fail(err)
		return
	}
	log.now(func(f *fault, t time.Time) { f.Exited = t })
	s.sentinelDone(ready, old, log, func(ctx context.Context) error { return ss.Rejoin(ctx, old) })
}

// sentinelDone waits until the sentinels have made a server other than
// old the primary; then, until ready ends, it runs then and waits until
// every replica is in sync.
func (s *striker) sentinelDone(ready context.Context, old string, log faultLog, then func(context.Context) error) {
	ss := s.tgt.sentinel
	primary, err := ss.WaitFailover(old, faultBound)
	if err != nil {
		log.fail(err)
		return
	}
	log.now(func(f *fault, t time.Time) { f.Back, f.Primary = t, primary })
	ctx, cancel := context.WithTimeout(ready, faultBound)
	defer cancel()
	err = then(ctx)
	if err == nil {
		_, err = ss.WaitSynced(ctx)
	}
	s.readied(ready, log, err)
}

// readied records that a fault whose server is back is ready for
// another, or why not (err); nothing when ready ended first: the run is
// over, and no other fault comes.
func (s *striker) readied(ready context.Context, log faultLog, err error) {
	switch {
	case ready.Err() != nil:
	case err != nil:
		log.fail(err)
	default:
		log.now(func(f *fault, t time.Time) { f.Ready = t })
	}
}

// killClusterMaster kills the master that serves the slot of a random
// lock, waits for its replica to take over, and, until ready ends,
// restarts the killed node, which rejoins the Cluster as that replica's
// replica. The fault names the locks the master served: it can touch no
// other.
func (s *striker) killClusterMaster(ready context.Context, _ int, log faultLog) {
	cl := s.tgt.cluster
	ctx, cancel := context.WithTimeout(context.Background(), faultBound)
	defer cancel()
	names := lockNames(s.cfg.Locks)
	keys := make([]string, len(names))
	for i, name := range names {
		keys[i] = lockKey(s.cfg, name)
	}
	owners, err := cl.MastersOf(ctx, keys...)
	if err != nil {
		log.fail(err)
		return
	}
	pick := rand.IntN(len(names))
	old := owners[pick]
	var served []string
	for i, o := range owners {
		if o == old {
			served = append(served, names[i])
		}
	}
	log.set(func(f *fault) { f.Target, f.Locks = "master "+old, served })
	log.now(func(f *fault, t time.Time) { f.Injected = t })
	if err := cl.Kill(old); err != nil {
		log.fail(err)
		return
	}
	log.now(func(f *fault, t time.Time) { f.Exited = t })
	primary, err := cl.WaitFailover(keys[pick], old, faultBound)
	if err != nil {
		log.fail(err)
		return
	}
	log.now(func(f *fault, t time.Time) { f.Back, f.Primary = t, primary })
	if ready.Err() != nil {
		return // the run is over: the node stays down
	}
	rctx, rcancel := context.WithTimeout(ready, faultBound)
	defer rcancel()
	err = cl.Restart(rctx, old)
	if err == nil {
		err = cl.WaitHealthy(rctx)
	}
	s.readied(ready, log, err)
}

// lockKey returns the key of lock name whose slot holds every key of the
// lock, for the run's kind of lock.
func lockKey(c config, name string) string {
	k, err := queue.For(c.Prefix, name)
	if kind, ok := weightedKinds[c.Kind]; ok {
		k, err = queue.Weighted(c.Prefix, name, kind)
	}
	if c.Kind == runElection {
		k, err = queue.Election(c.Prefix, name)
	}
	if err != nil {
		return name // not reached: the run's names are valid
	}
	return k.Lock
}
