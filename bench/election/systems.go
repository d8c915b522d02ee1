package main

import "context"

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
