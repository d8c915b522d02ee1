package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock/fairlock"
)

// lockNames returns the names of the run's n locks.
func lockNames(n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = "lock-" + strconv.Itoa(i)
	}
	return names
}

// pool is the workers of one process: its clients, each with its own
// go-redis client (as separate processes would have; on a quorum, one
// per master), and their goroutines.
type pool struct {
	cfg     config
	rec     recorder
	rdbs    []redis.UniversalClient
	clients []*fairlock.Client
	workers []*worker
	// The observers of the election kind that run on this process's
	// clients; idle, when set, tells that every worker of the process is
	// done, and allIdle is closed once every worker of the run is (nil:
	// when this pool's are). See settleViewers.
	viewers []*viewer
	idle    func()
	allIdle <-chan struct{}

	budget   atomic.Int64  // attempts left to start, when cfg.Ops > 0
	stopped  chan struct{} // closed when no new attempt may start
	stopOnce sync.Once
}

// newPool builds the clients numbered ids (of the whole run's cfg.Clients)
// and cfg.Goroutines workers for each. ops is this process's share of
// cfg.Ops.
func newPool(cfg config, tgt *target, ids []int, ops int64, rec recorder, stderr io.Writer) (*pool, error) {
	p := &pool{cfg: cfg, rec: rec, stopped: make(chan struct{})}
	p.budget.Store(ops)
	log := slog.New(slog.DiscardHandler)
	if cfg.Verbose {
		log = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	names := lockNames(cfg.Locks)
	for _, ci := range ids {
		rdbs := tgt.clients() // one per master of a quorum
		opts := []fairlock.Option{
			fairlock.WithPrefix(cfg.Prefix),
			fairlock.WithLease(cfg.Lease),
			fairlock.WithWaiterTTL(cfg.WaiterTTL),
			fairlock.WithLogger(log.With("client", ci)),
			fairlock.WithObserver(attemptObserver),
			// The record of an attempt takes its events while the attempt
			// is in progress, and is judged once it ends: they must reach
			// it before the call returns, so the Observer is called on the
			// call's goroutine (it only records, under a mutex).
			fairlock.WithObserverQueue(0),
		}
		var c *fairlock.Client
		var err error
		if tgt.quorum() {
			c, err = fairlock.NewQuorum(context.Background(), rdbs, opts...)
		} else {
			c, err = fairlock.New(rdbs[0], opts...)
		}
		if err != nil {
			for _, r := range rdbs {
				_ = r.Close()
			}
			p.close()
			return nil, err
		}
		p.rdbs = append(p.rdbs, rdbs...)
		p.clients = append(p.clients, c)
		for g := range cfg.Goroutines {
			w := &worker{
				id:     fmt.Sprintf("p%d/c%d/g%d", cfg.Proc, ci, g),
				client: c,
				rng:    rand.New(rand.NewPCG(cfg.Seed, uint64(ci)<<20|uint64(g))),
			}
			for _, n := range names {
				switch cfg.Kind {
				case runSemaphore:
					w.sems = append(w.sems, c.Semaphore(n, cfg.Permits))
				case runRWMutex:
					w.rws = append(w.rws, c.RWMutex(n))
				case runElection:
					w.elections = append(w.elections, c.Election(n))
				default:
					w.mutexes = append(w.mutexes, c.Mutex(n))
				}
			}
			p.workers = append(p.workers, w)
		}
	}
	p.addViewers(ids)
	return p, nil
}

// addViewers makes the observers of the election kind that run on the
// clients numbered ids: observer k of the run watches election
// k / cfg.Observers on client k % the run's number of clients, so that
// each election's observers are spread over the clients, and so over the
// worker processes.
func (p *pool) addViewers(ids []int) {
	if p.cfg.Kind != runElection {
		return
	}
	all := cmp.Or(p.cfg.AllClients, p.cfg.Clients)
	names := lockNames(p.cfg.Locks)
	for k := range p.cfg.Locks * p.cfg.Observers {
		ci := k % all
		i := slices.Index(ids, ci)
		if i < 0 {
			continue
		}
		e := p.clients[i].Election(names[k/p.cfg.Observers])
		p.viewers = append(p.viewers, newViewer(fmt.Sprintf("p%d/c%d/o%d", p.cfg.Proc, ci, k), e))
	}
}

// stop lets no new attempt start.
func (p *pool) stop() { p.stopOnce.Do(func() { close(p.stopped) }) }

// next reports whether a worker may start another attempt.
func (p *pool) next() bool {
	select {
	case <-p.stopped:
		return false
	default:
	}
	if p.cfg.Ops > 0 {
		left := p.budget.Add(-1)
		if left <= 0 {
			p.stop()
		}
		return left >= 0
	}
	return true
}

// run runs the workers until the run ends: ctx is cancelled, cfg.Duration
// passes, or cfg.Ops attempts have started. Attempts in flight may then
// take cfg.Grace to end; those that do not are recorded as pending, and
// the clients are closed, which ends them. The observers of the election
// kind start first, each waiting for its first view (up to
// firstViewWithin), and end once the workers have (see settleViewers).
// Every goroutine has exited when run returns.
func (p *pool) run(ctx context.Context) {
	settle, cut := make(chan struct{}), make(chan struct{})
	for _, v := range p.viewers {
		go v.run(settle, cut, p.cfg.Lag, settleFor(&p.cfg)) // owned by run: it waits for v.done
	}
	firstViews := time.NewTimer(firstViewWithin)
	for _, v := range p.viewers {
		select {
		case <-v.first:
			continue
		case <-firstViews.C:
		}
		break // the candidates start; an observer still without a view lags them
	}
	firstViews.Stop()
	var wg sync.WaitGroup
	for _, w := range p.workers {
		wg.Go(func() {
			for p.next() {
				w.attempt(&p.cfg, p.rec)
			}
		})
	}
	done := make(chan struct{})
	go func() { // owned by run: it waits for done below
		wg.Wait()
		close(done)
	}()
	if p.cfg.Ops == 0 {
		t := time.AfterFunc(p.cfg.Duration, p.stop)
		defer t.Stop()
	}
	select {
	case <-done:
	case <-p.stopped:
	case <-ctx.Done():
	}
	p.stop()
	grace := time.NewTimer(p.cfg.Grace)
	defer grace.Stop()
	cutShort := false
	select {
	case <-done:
	case <-grace.C:
		for _, w := range p.workers {
			if a, ok := w.abandon(); ok {
				p.rec.Record(a)
			}
		}
		cutShort = true
	}
	p.settleViewers(cutShort, settle, cut)
	p.close()
	<-done
}

// settleViewers ends the observers once the workers are done (or were
// abandoned: cutShort), and records what they saw. Each observer is told
// when every worker of the run is done (settle), so that it can wait for
// the election's final state; the workers of other processes may take
// longer than this one's, up to the grace. Abandoned workers leave the
// final state unknown: the observers are cut at once.
func (p *pool) settleViewers(cutShort bool, settle, cut chan struct{}) {
	if len(p.viewers) == 0 {
		return
	}
	if p.idle != nil {
		p.idle()
	}
	if !cutShort && p.allIdle != nil {
		wait := time.NewTimer(p.cfg.Grace)
		select {
		case <-p.allIdle:
		case <-wait.C:
			cutShort = true
		}
		wait.Stop()
	}
	if cutShort {
		close(cut)
	} else {
		close(settle)
	}
	for _, v := range p.viewers {
		<-v.done
		p.rec.RecordWatch(v.rec)
	}
}

// close closes the clients (waiting Lock calls return, holds are released)
// and their go-redis clients.
func (p *pool) close() {
	var wg sync.WaitGroup
	for _, c := range p.clients {
		wg.Go(func() { _ = c.Close() })
	}
	wg.Wait()
	for _, r := range p.rdbs {
		_ = r.Close()
	}
}
