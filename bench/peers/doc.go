// Command peers measures fairlock against two widely used Redis locks for
// Go, github.com/go-redsync/redsync/v4 and github.com/bsm/redislock: the
// three run one after another on the same Redis server, in the same
// workloads, and each workload prints a markdown table with a row per
// library, followed by a summary of the headline numbers. The workload
// that takes several names at once, multi, has a fourth row, the atomic
// try-all: no library's, but the kind of call that sets every name in one
// script or none, written here (see Several locks at once). In the one that
// shares a semaphore's permits, semaphore, each peer is a counting
// semaphore built from its locks the way their users build one (see A
// semaphore). One workload, redlock, runs on three independent Redis
// masters that it starts, and sets redsync's RedLock against fairlock's
// quorum lock (see RedLock on three masters). Before them, a
// ring of bare scripts measures the cross-process floor, the fastest a
// strict FIFO hand-over between processes goes on the server, which
// fairlock's contended throughput is set against. A scale part, fairlock
// alone, runs last: hand-over with many waiters, and what holds and
// waiters cost.
//
// It is a module of its own, so that the peers never become dependencies
// of fairlock. Run it from its directory:
//
//	go run .                              # starts redis-server from PATH on a free loopback port
//	go run . -workloads hold0,hold5ms -duration 10s -json peers.json
//	go run . -workloads floor,uncontended,uncontended-bg,hold0,hold0-1x16
//	go run . -workloads scale -scale-waiters 1000 -scale-holds 1000
//	go run . -workloads multi -multi-wait 10ms
//	go run . -workloads semaphore -semaphore-wait 5ms
//	go run . -workloads redlock
//	go run . -redis redis://127.0.0.1:6379/0
//
// With -redis it uses an existing server and only adds keys (lock names
// under "peers:", fairlock's under "fairlock:"); CONFIG RESETSTAT still
// runs before every measured part. The redlock workload starts its
// masters from PATH all the same. -libs runs only some libraries
// (fairlock, redsync, redislock, atomic: the atomic try-all, which runs in
// multi only).
//
// # Workloads
//
// Every goroutine loops for the whole run: Lock, enter the critical
// section, hold, leave, Unlock. -workloads takes the keys:
//
//	floor           no library: the cross-process floor, run right before hold0
//	                (first when hold0 does not run); see its section
//	uncontended     1 goroutine and 1 client on one lock name
//	uncontended-bg  the same, with context.Background() for Lock and Unlock
//	uncontended-ctt uncontended, every go-redis client with ContextTimeoutEnabled
//	hold0           16 goroutines over 4 clients (4 × 4), one name, holding nothing
//	hold0-1x16      16 goroutines in 1 client (1 × 16), one name, holding nothing
//	hold5ms         16 goroutines over 4 clients, sleeping 5 ms while holding
//	many            64 goroutines over 4 clients, 1,000 names, a random one each time
//	multi           16 goroutines over 4 clients, 16 names, 2 to 4 of them at once, holding 1 ms
//	semaphore       16 goroutines over 4 clients, a semaphore of 3 permits, 8 goroutines taking 1
//	                at a time and 8 taking 2, holding 1 ms
//	redlock         16 goroutines over 4 clients, one name on 3 independent masters, holding
//	                nothing; redsync and fairlock only
//	waiters         10,000 goroutines over 4 clients, one name
//	scale           fairlock alone, run after the others: see The scale part
//
// Lock takes the run's context, which has a deadline, as a caller's
// usually has; Unlock one that ends after 5s. In uncontended-bg both take
// context.Background(), which has no deadline and no Done channel. The
// difference matters to fairlock: with a context that can end, its Lock
// runs the call to Redis on a goroutine of its own, so that Lock returns
// the moment the context ends; with one that cannot, on the caller's
// goroutine. uncontended-ctt is uncontended on go-redis clients built
// with ContextTimeoutEnabled (for every library), which bound each call by
// the context's deadline: fairlock's Lock then runs its call on the
// caller's goroutine too. The uncontended workloads print the same
// columns.
//
// In hold0-1x16 every goroutine shares one go-redis client and one locker
// of the library, as the goroutines of one process would; in hold0 each
// of 4 clients, and its locker, serves 4 goroutines, as 4 processes of 4
// workers would.
//
// Each (workload, library) pair gets fresh go-redis clients, each a
// *redis.Client with default options (a pool of 10 connections per CPU;
// ContextTimeoutEnabled in uncontended-ctt)
// and one locker of the library over it; then a warm-up on lock names of
// its own (-warmup, at most a sixth of the run, with at most 64
// goroutines), then the measured part: -duration (3s), or
// -waiters-duration (6s) for waiters. A context deadline ends it; a Lock
// still waiting then returns and counts as nothing.
//
// The libraries of a workload run one after the other, so a machine
// whose speed drifts over minutes (a shared VM) can move a ratio between
// them by more than the difference it measures. -rounds N runs each
// library N times, in turn (round r starts r libraries further along), and
// keeps each library's median run as its row; × best peer is then the
// median of the ratios taken within each round, whose runs are seconds
// apart. The JSON lists every round's grants/s (round_grants_per_sec).
//
// # Columns
//
//   - grants/s: grants before the deadline, over the measured time.
//   - × best peer: grants/s over the best peer's in the workload; in
//     fairlock's row, the ratio of fairlock to the best peer.
//   - Jain: Jain's fairness index of the goroutines' grant counts,
//     (Σx)²/(n·Σx²): 1 when all got equally many, 1/n when one got all.
//   - permits/s and weight 2: share of grants, in semaphore only: the
//     permits the counted grants took, over the measured time; and the
//     share of the grants that went to the goroutines taking 2 permits at
//     a time, 0.5 when both weights were served alike.
//   - starved: goroutines never granted the lock in the run.
//   - wait p50, p99, max: from the call of Lock to its grant, over the
//     counted grants.
//   - attempts/grant, in multi and semaphore only: the attempts at the
//     whole set of names, or at the permits, that the counted grants
//     took, over the grants (see Several locks at once, A semaphore).
//   - round trips/grant: commands and pipelines sent by the clients, counted
//     by a go-redis hook (ProcessHook and ProcessPipelineHook) on every
//     client, per grant. A message the server pushes on pub/sub is not a
//     round trip; fairlock's SUBSCRIBE commands bypass the hooks and are
//     not counted either.
//   - commands/grant: every command the server ran during the measured
//     part, per grant, from INFO commandstats (zeroed by CONFIG RESETSTAT
//     before it): the sum of the calls of every command, which counts the
//     FCALL, EVALSHA or EVAL of a script and each command the script ran, less
//     the benchmark's own INFO and CONFIG. In the uncontended workloads a
//     grant is one Lock+Unlock, and the summary prints it as commands per
//     Lock+Unlock. With -redis, other clients' commands on the server
//     count too.
//   - dials: connections the clients opened during the measured part.
//   - server µs/grant: growth of INFO's used_cpu_user + used_cpu_sys
//     during the measured part, per grant; it includes the server's own
//     housekeeping, small at these rates.
//   - script µs/call: the mean server time of a script call (FCALL,
//     EVALSHA or EVAL; fairlock calls its function library on Redis 7),
//     from INFO commandstats, zeroed by CONFIG RESETSTAT before the
//     measured part.
//   - errors: Lock or Unlock calls that failed, not by the deadline; the
//     first one is printed under the table.
//   - violations: grants that found another holder inside the critical
//     section, by an atomic count of holders per lock name (in multi, of
//     any of the grant's names). Any is a broken mutual exclusion. In
//     semaphore the count is of permits held: a grant that takes it past
//     the 3 permits is a violation.
//   - tokens, in redlock only: "none" for a library whose locks carry no
//     fencing token; else the tokens read, one under every hold, and
//     whether each was greater than the one read before it (see RedLock
//     on three masters).
//
// In redlock the round trips, commands, dials and server figures are
// those of all three masters together: the clients' hooks count what
// goes to each, and the server counters are the sums of the three's.
//
// Round trips and server counters are read at the deadline, so the
// clean-up of the waits it cut short is not counted.
//
// The summary has a row per library that ran, and the columns of the
// workloads that ran: the ops/s of both uncontended workloads, commands
// per uncontended Lock+Unlock, grants/s and Jain's index with the longest
// wait in hold0 and hold0-1x16, the same for hold5ms, round trips and
// server µs per grant in hold0; grants/s in many; grants/s, Jain's index
// with the longest wait, and attempts and round trips per grant in multi
// and in semaphore; grants/s, Jain's index with the longest wait, round
// trips per grant and the tokens in redlock; grants/s and goroutines
// never granted in waiters.
// fairlock's rates carry its ratio to the best peer's, and in hold0 to
// the floor. A last row holds the floor, when it ran with hold0: its
// hand-overs/s, round trips and server µs per hand-over.
//
// # The cross-process floor
//
// floor measures no library. Four go-redis clients with default options,
// each subscribed to a channel of its own on its own pub/sub connection,
// as four processes would be, pass one token around a ring. The client
// holding the token runs a script that INCRs a key, the count of
// hand-overs, and PUBLISHes the count on the next client's channel; the
// next client, woken by that message, runs the same script for the one
// after it, and so on. Client 0 passes first. Each client's goroutine
// reads its subscription itself (PubSub.ReceiveMessage) and runs the
// script at once: nothing stands between the message and the next pass.
// It runs before the workloads, on the same server, with fresh clients,
// the same warm-up and -duration, and the counters reset and read at the
// deadline as in the workloads. When the deadline has passed, the client
// that receives the token keeps it and tells the others to stop.
//
//   - hand-overs/s: messages received before the deadline, over the
//     measured time.
//   - round trips, commands and server µs per hand-over: as the columns
//     of the workloads. A hand-over is one EVALSHA, which runs INCR and
//     PUBLISH: three commands, one round trip.
//
// Under the hold0 table and in the summary, fairlock's grants/s in hold0
// are set against the floor's hand-overs/s; the goal is 0.9× or more.
//
// One token at a time is the comparison that fits a strict FIFO lock:
// however many goroutines wait, one lock has one holder, and each grant
// is a hand-over from the releasing holder to the head of the line, which
// fairlock's release script pushes through Redis pub/sub to the head's
// Client, in another process here or not. Grants of one lock cannot
// overlap, so several tokens in the ring would measure several locks. The
// floor is what a hand-over cannot do without: a script that records it
// and a message that wakes the next process, which answers with the next
// script. It leaves out what fairlock does besides: the lease, the
// waiter's entry in the line and the re-queueing of the goroutine that
// released, which overlap with the hand-over in the clients but not in the
// server, which runs one command at a time; and the Client's own path from
// its pub/sub reader to the waiting goroutine. Barging locks (the peers)
// are not bound by it: the goroutine that releases can take the lock again
// without a hand-over between processes.
//
// # Configuration of the libraries
//
// All three, and the atomic try-all, use a time to live of 30s (-ttl),
// fairlock's default lease, so that no hold expires during a run.
//
// fairlock: fairlock.New(rdb, fairlock.WithLease(ttl)) per go-redis
// client; Mutex(name).Lock, and Unlock with the context Lock returned.
// The Clients are closed after each run. A waiter queues in Redis and is
// woken by pub/sub.
//
// redsync: redsync.New(goredis.NewPool(rdb)) per go-redis client, a single
// pool (no quorum over several servers, but in redlock); a NewMutex per lock, since a
// Mutex keeps the value of its hold, with WithExpiry(ttl),
// WithTries(1<<30) (a wait ends at the run's deadline, not after a count
// of tries) and WithRetryDelay(10ms); LockContext and UnlockContext.
//
// redislock: redislock.New(rdb) per go-redis client; Obtain(ctx, name,
// ttl, &redislock.Options{RetryStrategy: redislock.LinearBackoff(10ms)});
// Release.
//
// Both peers poll: a waiter tries, and while the lock is taken sleeps the
// retry delay and tries again. The delay is the one that gave the peers
// their best throughput in hold0, trying 1 µs, 100 µs, 500 µs and 1, 2, 5,
// 10, 20, 50 and 100 ms on a machine with 2 CPUs. Their grants/s rise
// with the delay up to about 10 ms (redsync from about 8,300 at 1 ms to
// 9,800 at 10 ms, redislock from 11,900 to 14,800), because a goroutine
// that releases takes the lock again before the sleeping waiters wake, and
// fewer tries compete with the holder's commands. Beyond 10 ms redsync
// gains nothing and redislock little, while waiters start to starve: from
// 20 ms some goroutines of hold5ms were never granted within 3s. In
// hold5ms the hold bounds throughput at about 180 grants/s whatever the
// delay, and a shorter delay shortens the peers' longest waits (redislock
// about 0.5s at 1 ms against 1.5s at 10 ms, redsync 1.1s against 2.5s).
// In waiters the peers manage a few
// grants per second at any delay: a holder's release waits for a pool
// connection and for the CPU among thousands of polling goroutines, some
// 150 ms, and the lock stays taken until then. -redsync-delay and
// -redislock-backoff run the peers with other delays. Left to its
// defaults, redsync sleeps a random 50 to 250 ms between tries, and
// redislock does not retry at all.
//
// The numbers depend on the machine: the server, the clients and, in
// waiters, 10,000 goroutines share its CPUs.
//
// # Several locks at once
//
// In multi, each grant is of 2, 3 or 4 distinct names out of 16, picked
// at random and listed in a random order, as callers that each need a
// few resources would ask for them. The holder sleeps 1 ms inside the
// critical section of every name it holds.
//
// fairlock takes them with one MultiLock: Client.MultiLock(names).Lock,
// then Unlock with the context Lock returned. On one server, as here, it
// joins every name's line at once with one entry, a ticket, and is
// granted every name at once when the ticket heads every line and none
// of the names is held; nobody passes it, and it never gives up and tries
// again: one attempt per grant. (On a Cluster or a Ring it would take the
// names one after another, in one order that every Client follows.)
//
// Neither peer has a call for it in a release: bsm/redislock's
// ObtainMulti, which sets every key in one script or none, is on its
// main branch only, after v0.9.4, the latest release (and the module
// proxy serves no later version). So both take the names with the same
// loop, in the manner of Redisson's RedissonMultiLock: try each name
// once, without waiting, in the order given (redsync: a NewMutex and
// TryLockContext; redislock: Obtain without retries); when one is taken,
// release the names taken, wait a random time from 0 to -multi-wait,
// and start again from the first name. Each start is an attempt;
// attempts/grant above 1 is the work spent on attempts that took some
// names and gave them back, and it grows into a livelock as the wait
// shrinks.
//
// The kind of call ObtainMulti is runs as a fourth row, the atomic try-all
// (atomic.go, -libs atomic), written here, since no release of a Go peer
// has it; Redisson's RedissonFasterMultiLock and node-redlock from v5 are
// of the same kind. Over the same go-redis client, one script takes every
// name or none: MSETNX sets every name's key to a random value drawn for
// the grant when none of them exists, and PEXPIRE then gives each the time
// to live; when one exists it sets nothing. It never queues: when it took
// nothing it waits a random time from 0 to -multi-wait and runs the script
// again, as ObtainMulti would with a retry strategy of random waits. Each
// run of the script is an attempt; an attempt that fails takes and gives
// back nothing. Unlock runs a script that deletes each key that still
// holds the grant's value. It has no single-lock form, so it runs in multi
// only, where it counts as a peer in × best peer.
//
// -multi-wait (1 ms), the same for the three, is the longest wait that
// gave redsync's and redislock's loops their best throughput, trying 0, 1,
// 2, 5, 10, 20 and 50 ms with go run . -workloads multi -libs
// redsync,redislock -multi-wait D on a machine with 2 CPUs. Without a wait
// they made about 340 (redsync) and 590 (redislock) grants/s at 67 and 81
// attempts per grant; at 1 ms, about 1,100 and 1,260 at 12 and 11; at 2 to
// 10 ms, 880 to 1,150 at 9 to 3; at 50 ms, about 870 at 1.6, with longer
// waits.
//
// The atomic try-all, whose failed attempts take nothing, does not
// livelock without a wait: a shorter wait buys it grants with the
// server's time. One run each of go run . -workloads multi -libs atomic
// -multi-wait D made about 2,180 grants/s without a wait, at 42
// attempts and 270 server µs per grant; 1,790 at 1 ms (7 attempts, 79
// µs) and at 2 ms (5.4, 68 µs); 1,660 at 5 ms (3.6, 60 µs); 1,520 at 10
// ms (2.6, 56 µs); and 1,100 at 50 ms (1.5, 54 µs), with longer waits.
//
// # A semaphore
//
// In semaphore, 16 goroutines over 4 clients share one semaphore of 3
// permits: goroutines 0 to 7 take 1 permit at a time, 8 to 15 take 2
// (each client serves 2 of each), and each holds its permits 1 ms, as in
// multi. A goroutine's weight is fixed, so that Jain's index over the
// goroutines shows whether the callers that ask for more are served as
// often as those that ask for less.
//
// fairlock takes them with Client.Semaphore(name, 3).Acquire(ctx, weight)
// and Release with the context Acquire returned. Its line is strict: a
// caller whose weight does not fit beside the permits held waits, and
// nobody who asked after it passes it, even one whose 1 permit would fit;
// a release grants the callers at the head that now fit and pushes each
// its grant. It makes one attempt per grant.
//
// Neither peer has a semaphore, so each is one built from its locks, as
// their users build one: 3 lock names, name:0 to name:2, one a permit. A
// caller tries the names in turn from name:0, once each without waiting
// (redsync: a NewMutex and TryLockContext; redislock: Obtain without
// retries), passing over those held, until it holds its weight of them;
// when too few were free it gives back what it took, so that a weight of
// 2 takes 2 names or none, waits a random time from 0 to -semaphore-wait
// and starts again. Each start is an attempt. A name is a lock, held by
// one caller at a time, so no more than 3 permits are ever out; the
// violations column checks it.
//
// -semaphore-wait (1 ms) is the wait that gave both peers their best
// throughput, trying 0, 0.5, 1, 2, 5, 10 and 20 ms, two runs each of go
// run . -workloads semaphore -libs redsync,redislock -semaphore-wait D on
// a machine with 2 CPUs: about 1,500 to 1,650 grants/s at 1 ms, at 7.6
// to 9 attempts per grant; 950 to 1,430 without a wait, at 10 to 22;
// 1,090 to 1,580 at 0.5 ms; and 1,000 to 1,540 from 2 to 20 ms. The runs
// moved by up to a third between them. A longer wait is fairer, since the
// callers of 1 permit then barge less often: Jain's index rose from about
// 0.62 at 1 ms to 0.76 to 0.86 at 20 ms, and the share of the grants of 2
// permits from about 0.12 to 0.22 to 0.30, at 2 attempts per grant.
//
// # RedLock on three masters
//
// redlock runs on three redis-servers that the benchmark starts for it,
// without persistence and each on a free loopback port: independent
// masters, sharing nothing but the machine, each a loopback round trip
// away (a deployment puts them in separate failure domains, further
// apart). Its shape is hold0's: 16 goroutines over 4 clients on one lock
// name, holding nothing. A client is one locker of the library's quorum
// lock over three go-redis clients, one per master, all with the counting
// hook, so that round trips count the commands sent to every master.
// redislock has no quorum lock and the atomic try-all is no lock of one
// name, so neither runs in it.
//
// redsync: redsync.New(pool1, pool2, pool3), one goredis pool per master
// (RedLock), with the options of the single-pool runs (WithExpiry(ttl),
// WithTries(1<<30), WithRetryDelay(10ms)) and its defaults otherwise: a
// quorum of 2, a drift factor of 0.01, each try bounded by 5% of the
// expiry. A try sends SET NX to the three masters at once and holds the
// lock when 2 of them set it within the validity; otherwise it deletes its
// value on all three and sleeps the retry delay. Its waiters poll, as
// over one pool, and three callers that each set the key on one master
// leave it to nobody until they try again. Its holds carry no token (the
// value is random): the tokens column reads "none".
//
// fairlock: fairlock.NewQuorum(context.Background(), []redis.UniversalClient{c1, c2, c3},
// fairlock.WithLease(ttl)) per client; Mutex(name).Lock, Token with the
// context Lock returned, Unlock. Its line lives on the masters, and a
// caller is served before every caller whose Lock began after its join
// reached a majority of them. Every hold calls Token inside the critical
// section, as a holder that passes its token to the resource would: the
// first call of a hold commits the token to a majority of the masters, one
// round more than redsync's hold, inside it. The holds of the one name
// exclude each other, so the tokens are read in the order of the grants,
// and each must be greater than the one before it; one that is not is
// counted as not rising.
//
// # The scale part
//
// It measures fairlock alone, in five steps, each on fresh go-redis
// clients with default options and one fairlock Client over each, and
// prints a table for each (two for the holds: while held, and their
// Close). -scale-waiters (10,000), -scale-holds (10,000) and -scale-names
// (1,000,000) set its sizes. It is skipped when -libs leaves fairlock out.
// -workloads names runs its last step alone.
//
// Hand-over: 16 goroutines over 4 Clients (4 each), for -duration, then
// -scale-waiters goroutines over 4 Clients, for -waiters-duration, each
// after a warm-up as above, on one lock and with the lease of -ttl. Every
// goroutine loops Lock and Unlock, holding nothing; a context deadline
// ends the run.
//
//   - hand-over p50, p99, max: from an Unlock's return to the next Lock's
//     return. The time of the latest Unlock's return is kept in one atomic,
//     and each grant reads it; the first grant, which follows no Unlock,
//     has none. The releasing goroutine stores the time when it runs again
//     after Unlock returned, so on a busy machine a grant may read the
//     time of the Unlock before (a longer hand-over) or one stored late (a
//     shorter one).
//   - grants/s: grants before the deadline, over the measured time.
//   - the ratio printed under the table: the p50 of the larger run over
//     the p50 of the smaller; about 1 when a hand-over does not slow down
//     with the length of the line.
//
// Spread: the hand-over with 16 goroutines again, for -duration each,
// over 1 Client (16 goroutines in it), 4 Clients (4 each) and 16 Clients
// (1 each), run between the two hand-overs above (the large one's waiters
// leave the line with a script each after it ends, which would weigh on
// the server's time per grant): many processes of one worker each is the common shape of a
// deployment. Each waiting Client hears only the grants to its own
// waiters, so the server writes each grant to one subscriber whatever
// the number of Clients.
//
//   - grants/s and hand-over p50 as above;
//   - server µs/grant: the server's CPU time (used_cpu_user plus
//     used_cpu_sys from INFO) over the measured time, per grant.
//
// Holds: -scale-holds locks (scale:hold:0, scale:hold:1, ...) taken one
// after another through one Client with fairlock.WithLease(3s), so a hold
// is renewed every second, and all kept held. Before the first, one Lock
// and Unlock of another name opens the connection and loads the scripts.
//
//   - goroutines: runtime.NumGoroutine before the Client exists, with a
//     tenth of the holds taken and with all of them. The Client renews
//     every hold from one goroutine, so the last two should be equal but
//     for a renewal under way.
//   - Go heap B/hold: growth of MemStats.HeapAlloc, each read after
//     runtime.GC, from before the first hold to all held, over the holds;
//     it includes the handle and context kept for each hold.
//   - Redis B/hold: growth of INFO's used_memory over the same span, over
//     the holds.
//   - renewals/s, round trips/s: with every hold held, over -scale-window
//     (3s), a go-redis hook counts script calls (FCALL, EVALSHA or
//     EVAL, alone or inside a pipeline) as renewals and every command or pipeline sent as
//     a round trip. Renewals that fall due together go out in one
//     pipeline, so round trips are far fewer than renewals.
//
// Then the Client is closed with every hold held, as a process that
// shuts down would close it; Close ends each hold and releases it in
// Redis. A go-redis hook reads the reply of every release script it
// sends.
//
//   - holds lost before Close: holds whose context had ended (lease
//     lost) when Close was called: none while the renewals keep up.
//   - Close s: how long Close took.
//   - releases that found their hold: release scripts that found the
//     owner still holding the lock (and released it); found it expired:
//     those that found it gone; failed: those that got an error.
//   - holds left to expire: holds live at Close that no release found:
//     each of them blocked its lock until its lease ran out.
//   - hold keys left: hold keys still in Redis when Close returned
//     (EXISTS on each).
//   - contexts not ended: holds whose context was still live when Close
//     returned.
//
// Waiters: a Client of its own holds the lock scale:wait throughout, so
// nobody is granted; -scale-waiters goroutines over 4 Clients call Lock
// on it. One waiter per Client is queued first and the footprint read
// then, so that what each Client spends once (its pub/sub connection, the
// subscription) is left out; the footprint is read again once the lock's
// queue (the list fairlock:{scale:wait}:queue) holds every waiter. Per
// waiter, over the waiters:
//
//   - Go heap B/waiter: growth of MemStats.HeapAlloc after runtime.GC.
//   - goroutine stacks B/waiter: growth of MemStats.StackInuse.
//   - heap + stacks B/waiter: the sum of the two.
//   - Redis B/waiter: growth of the lock's queue and deadline keys, by
//     MEMORY USAGE with every element counted: what the waiters add to
//     Redis, as INFO's used_memory would show it on a server where
//     nothing else changes (here, keys of the earlier steps expire
//     meanwhile, and moved used_memory by more than the waiters did).
//   - goroutines/waiter: growth of runtime.NumGoroutine; 1 is the waiting
//     goroutine itself.
//
// The figures include the connections the go-redis pools open for the
// waiters' calls (at most 10 per CPU per Client), a cost that a larger
// number of waiters spreads thinner. The waits are then cancelled, the
// lock released and the Clients closed.
//
// Names: 32 goroutines of one Client lock and unlock -scale-names distinct
// names (scale:names:0, scale:names:1, ...), each once, holding nothing,
// first on the scale part's server, then on a Redis Cluster of 3 masters
// without replicas that the step starts from PATH, through a
// *redis.ClusterClient. On a Cluster the Client runs its failover audit
// (docs/operations.md), which remembers the calls that ended and reads
// them again once a second for 10 s; on one server it has none. Before
// the names, each of the 32 goroutines locks and unlocks a name of its
// own, so that the go-redis pools hold the connections the step needs.
//
//   - names/s: the names over the time from the first Lock to the last
//     Unlock's return.
//   - Unlock p50, p99, p99.9, max: the time each Unlock call took.
//   - Go heap: MemStats.HeapAlloc after runtime.GC, before the first
//     name; its peak, the largest /memory/classes/heap/objects:bytes
//     sampled every 50 ms while the names ran (live objects and garbage
//     not yet collected); after GC right after the last Unlock; idle,
//     once the audit has read nothing for 3 s (at most 3 minutes after
//     the last Unlock); and after the Client's Close. An array of a
//     duration per name, for the percentiles, is made before the first
//     reading and so is in all of them (8 MB for a million names).
//   - audit reads / round trips: a go-redis hook on the client (on a
//     Cluster, on each master's client) counts the audit's reads (HMGET,
//     HGET and ZSCORE, which the Lock and Unlock of a Mutex do not send)
//     and the round trips that carried them, while the names ran and
//     after the last Unlock; for s is the time from the last Unlock to
//     the last of them.
//
// -scale-names-profile DIR writes heap profiles (one allocation sampled
// every 4 KiB) right after the last Unlock and when idle, as
// DIR/heap-<one|cluster>-<after|idle>.pprof, for go tool pprof.
package main
