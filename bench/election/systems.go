package main

import (
	"context"
	"sync"
)

// A system is one of the elections compared: fairlock's on the Redis the
// run started, or etcd's on the etcd it started. Every candidate and
// every group of observers it makes has clients of its own, as separate
// processes would.
type system interface {
	// name is the system's column in the report: "fairlock" or "etcd".
	name() string
	// candidate returns a new candidate in the election called election,
	// with a client (and, for etcd, a session) of its own.
	candidate(ctx context.Context, election string) (candidate, error)
	// observe starts clients×perClient observers of the election called
	// election, perClient on each of clients clients, and calls see(i,
	// value) from observer i's goroutine with every view it receives (the
	// leader's value). stop ends them and closes their clients.
	observe(ctx context.Context, election string, clients, perClient int, see func(i int, value string)) (stop func(), err error)
	// worker returns what a worker process needs to campaign in the
	// election called election as the leader.
	worker(election string) workerSpec
}

// A candidate campaigns in one election, one Campaign at a time.
type candidate interface {
	// begin tells the candidate that a campaign is about to begin, before
	// campaign is called on another goroutine: queued then waits for it.
	begin()
	// campaign waits until the candidate leads, with value.
	campaign(ctx context.Context, value string) error
	// queued waits until the campaign begun last has its place in line
	// (or leads).
	queued(ctx context.Context) error
	// proclaim changes the value of the leadership the candidate holds.
	proclaim(ctx context.Context, value string) error
	// resign ends the leadership the candidate holds.
	resign(ctx context.Context) error
	close()
}

// watcher starts one observer on a client of a system: run reports each
// value the observer receives to see until ctx ends.
type watcher func(ctx context.Context, see func(value string)) (run func(), err error)

// observers is a system's observe: connect returns a new client's
// watcher and the function that closes the client; observers connects
// clients of them and starts perClient observers on each, observer i's
// values told to see(i, value) from its own goroutine.
func observers(ctx context.Context, clients, perClient int, see func(int, string), connect func() (watcher, func(), error)) (func(), error) {
	ctx, cancel := context.WithCancel(ctx)
	var closers []func()
	var wg sync.WaitGroup
	stop := func() {
		cancel()
		wg.Wait()
		for _, f := range closers {
			f()
		}
	}
	for ci := range clients {
		watch, closeFn, err := connect()
		if err != nil {
			stop()
			return nil, err
		}
		closers = append(closers, closeFn)
		for j := range perClient {
			i := ci*perClient + j
			run, err := watch(ctx, func(v string) { see(i, v) })
			if err != nil {
				stop()
				return nil, err
			}
			wg.Go(run)
		}
	}
	return stop, nil
}
