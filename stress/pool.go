package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
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
				default:
					w.mutexes = append(w.mutexes, c.Mutex(n))
				}
			}
			p.workers = append(p.workers, w)
		}
	}
	return p, nil
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
// the clients are closed, which ends them. Every goroutine has exited when
// run returns.
func (p *pool) run(ctx context.Context) {
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
	select {
	case <-done:
	case <-grace.C:
		for _, w := range p.workers {
			if a, ok := w.abandon(); ok {
				p.rec.Record(a)
			}
		}
	}
	p.close()
	<-done
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
