// Package fairlock provides fair (strict FIFO), lease-renewed distributed
// locks on Redis: a Mutex, a MultiLock of several names taken
// all or none, a weighted Semaphore, a RWMutex and a leader Election, on
// one Redis deployment, and for a Mutex that must outlive the loss of a
// server, on a quorum of independent masters (NewQuorum).
//
// Waiters queue in Redis and are granted the lock in the order they joined
// (strict FIFO): a release hands the lock straight to the head of the
// line, so the lock is never free between two holders and nobody can
// barge in. The next holder is woken by pub/sub, not by polling, and
// starts without a round trip of its own. TryLock never jumps the line.
//
// A hold belongs to an owner carried by a context. Lock returns a context
// that carries the hold; passing it (or a context derived from it) to Lock
// again re-enters the hold, to Unlock releases one level. Unrelated
// contexts exclude each other, like separate callers of sync.Mutex.
// ContextWithOwner names the owner explicitly, so that several processes
// can share one hold.
//
// Holds of different locks nest: Lock with a context that carries a hold
// of another lock returns a context that carries both, and either lock
// can be re-entered or unlocked through it, in any order (see the nested
// example of Mutex.Lock). A context re-enters only the very same lock: a
// hold taken through another Client counts only if that Client's Redis
// has it; the same name and prefix in another DB or on another deployment
// is another lock, and Lock takes it as one. A context whose hold of the
// lock was lost makes Lock fail with ErrLeaseLost: a re-entry is never a
// fresh grant. The context Lock returned ends with its hold, so it cannot
// wait for the lock again; a live context that still carries an unlocked
// hold of the lock (one derived from another lock's hold) takes a fresh
// one.
//
// MultiLock takes several locks together, all or none: Lock returns one
// context that carries a hold of every name and ends when any of them
// does. On one server it waits in every name's line at once and holds
// nothing until it is granted all of them; on a Cluster or a Ring it takes
// the names one after another in one order that every Client follows.
// Either way, callers of overlapping sets, and Mutex callers of single
// names, never deadlock.
//
// Semaphore and RWMutex are fair weighted locks on the same line: a
// Semaphore grants Acquire(ctx, n) while the permits asked for fit in its
// capacity, and a RWMutex grants readers together and a writer alone.
// Both serve callers strictly in the order they asked: a request that
// does not fit beside what is held waits, and nobody behind it passes it,
// so neither a large request nor a writer starves. A release grants every
// waiter at the head of the line that now fits, at once. Their holds have
// leases, fencing tokens and contexts as a Mutex's do; a Semaphore hold is
// not re-entrant, and a RWMutex's read hold cannot be upgraded
// (ErrWouldDeadlock).
//
// Election elects one leader among candidates, in the order they joined
// the line: Campaign returns the leadership's context, which ends when
// the leadership does (Resign hands it to the next candidate by push, a
// lost lease ends it with ErrLeaseLost), and the leadership's term is its
// fencing token. Leader reads the leadership, with the value its leader
// campaigned with or proclaimed, and Observe follows every change, pushed
// through the Client's one pub/sub connection. An Election is a Mutex
// whose hold is the leadership; see "Leader elections" in
// docs/algorithm.md.
//
// NewQuorum makes a Client whose Mutex locks live on N independent Redis
// masters and count while a majority holds them, for a lock that must
// survive the loss of a server and never be granted twice by a failover.
// Every Mutex method works as with New; Lock serves callers in bakery
// order (a caller is served before every caller whose Lock began after
// its own had joined the line of a majority), and Token commits the
// fencing token to a majority on its first call, so that tokens rise
// across holders even when a holder pauses past its validity or a
// master's clock steps. Fewer than a majority answering gives
// ErrNoQuorum; every call still ends at its context, as a Mutex's does,
// and a hold lives on while a majority renews it, whatever the others do.
//
// A hold has a lease. By default a watchdog renews it every third of the
// lease (WithLease, 30s), so a hold lasts until Unlock, and a crashed
// holder's lock expires one lease after its last renewal. WithFixedLease
// makes a hold expire a fixed time after its grant instead. When a lease
// is lost (Redis lost the key, renewal failed for too long, the fixed
// lease ran out, ForceUnlock), the hold's context is cancelled with cause
// ErrLeaseLost: the work under the lock should stop, because another owner
// may already hold it. A fixed lease lasts its full length from the grant,
// however the grant came; its context ends a few milliseconds early and
// the hold is then released, so that Redis and the holder agree.
//
// A waiter that stops polling (its process died) keeps its place for the
// waiter TTL (WithWaiterTTL, 10s) and is then dropped; a waiter whose
// context ends leaves the line at once and leaves nothing in Redis.
//
// Every fresh grant carries a fencing token (Token) that strictly
// increases per lock name, also across a restart of Redis without
// persistence and across a failover, as long as the new server's clock is
// ahead of the old one's and a server's clock does not go back (a token of
// a Client made by New is never below the server's clock in milliseconds
// × 1000; for NewQuorum's, see docs/algorithm.md). Redis replicates asynchronously: a failover can
// lose a lock, and a paused holder can outlive its lease. WithReplicas
// narrows the first (every grant and release then counts only once
// replicas acknowledged it), but cannot close it. A lock alone cannot make
// a protected resource safe against that; a resource that rejects writes
// carrying a token lower than one it has seen can.
//
// Client, Mutex, MultiLock, Semaphore, RWMutex and the contexts their
// calls return are safe for concurrent use.
// One Client per process and Redis deployment is enough: it keeps one
// pub/sub connection for all its waiters (one per shard over a
// *redis.Ring). Close stops everything it started, within about one call
// timeout (10s) even when Redis does not answer.
package fairlock
