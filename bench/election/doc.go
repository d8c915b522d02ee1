// Command election measures fairlock's Election beside etcd's
// concurrency.Election (go.etcd.io/etcd/client/v3/concurrency), on the same
// machine, and sets beside them the figures that client-go's leader
// election (k8s.io/client-go/tools/leaderelection) gets from its
// documented defaults, since that one cannot run without a Kubernetes API
// server. It prints a plain-text table with a row per measure and a column
// per system, and with -json writes every figure and sample to a file.
//
// It is a module of its own, so that etcd's client never becomes a
// dependency of fairlock. Run it from its directory:
//
//	go run .                                  # about a minute
//	go run . -measures handover,observe -rounds 200 -observer-rounds 50
//	go run . -systems fairlock -measures kill -kill-rounds 10
//	go run . -etcd-dir DIR                    # etcd's data under DIR (a tmpfs, say)
//	go run . -json election.json
//
// It starts what it measures and stops it at the end: a redis-server from
// PATH on a free loopback port, without persistence, for fairlock; and an
// etcd from PATH (Debian's package etcd-server), a cluster of one member
// on two free loopback ports (clients and peers), with its data in a new
// directory in the system's temporary directory, or under -etcd-dir, which
// it removes. Both servers, the benchmark and its worker processes share
// the machine's cores.
//
// # How the systems are set up
//
// Every candidate has a client of its own, as a candidate in a process of
// its own would: for fairlock a go-redis client and a fairlock Client (New
// with WithPrefix and WithLease), for etcd an etcd client and a
// concurrency.Session (WithTTL). The leadership's lease is the same for
// both, -lease (5s; whole seconds, as etcd's TTLs are): fairlock's
// WithLease, renewed by its watchdog every third of it, and the session's
// TTL, which etcd's client keeps alive every third of it too. A candidate
// campaigns with Election.Campaign, proclaims with Proclaim and resigns
// with Resign in both; fairlock's calls take the leadership's context
// that its Campaign returned.
//
// A measure waits for a Campaign to be in line before it goes on: for
// fairlock, until the candidate's Client reports (its Observer) that the
// call joined the line or was granted; for etcd, until the candidate's key
// (the election's prefix and its session's lease) exists, which Campaign
// puts before it waits.
//
// Every measured change, a Resign or a Proclaim, comes -settle (150ms)
// after the change before it. etcd registers a watch that starts at the
// store's current revision as unsynced, and catches unsynced watches up
// with the store every 100ms: an event in a watch's first ~100ms reaches
// it up to 100ms late. etcd's Campaign waits on such a watch, and its
// Observe starts one after every new leader. Leaders change seconds or
// hours apart, not milliseconds, so the benchmark measures what a change
// costs once the watches are in place. With -settle 0, changes back to
// back, etcd's Resign -> new leader is tens of ms (its p90 near 100ms),
// and fairlock's faster than with the pause (the processes stay awake).
//
// # The measures
//
// -measures chooses among handover, kill, observe and order (default
// all); -systems between fairlock and etcd (default both).
//
// Resign -> new leader (handover): -candidates (3) candidates stand in
// line; the leader resigns, the next one's Campaign returns, and the one
// that resigned campaigns again at the back. A sample is the time from the
// Resign call to the next candidate's Campaign returning, -rounds (80)
// per system; the row gives the median, p90 and p99 (nearest rank).
//
// SIGKILL -> new leader (kill): each round the benchmark starts a copy of
// itself as a worker process that campaigns in a new election and reports
// on its standard output once it leads; a candidate of the benchmark
// campaigns behind it, and once the candidate is in line the worker is
// killed with SIGKILL. A sample is the time from the kill to the
// candidate's Campaign returning, -kill-rounds (3) per system. The worker
// is killed a few ms after its lease was last set to the whole -lease:
// fairlock's at the grant (Campaign returns half a round trip later),
// etcd's at the first keep-alive of the session's lease, which the worker
// sends itself and waits for before it campaigns (the session's own
// keep-alive then joins it), and reports how long before its Campaign
// returned that was. So the lease left at the kill is known, to within
// the time the worker's report takes to arrive (well under a ms, which
// makes the figure below a little early rather than late), and the row
// after it gives how long after the lease ran out the new leader was
// elected: fairlock's waiter polls when the leader's lease ends (the
// script tells it the lease's PTTL); etcd revokes expired leases in a
// loop that looks every 500ms, and the revocation deletes the leader's key
// that the candidate watches. A round waits out a whole lease, so the two
// systems' rounds run at the same time, etcd's half a lease after
// fairlock's: each spends its round waiting, and their leases end
// seconds apart.
//
// Change -> observers (observe): -observers (100) observers watch an
// election, spread evenly over -observer-clients (10) clients, 10 on each
// in both systems: fairlock's Election.Observe on 10 Clients (each Client
// watches the election once, on its pub/sub connection, and reads the
// leadership once per change for its 10 observers); etcd's
// Election.Observe on 10 clients, each with a session (each observer
// holds a watch of its own, and after a new leader reads the election
// and starts a new watch). Two candidates take turns: the leader
// proclaims a new value, then resigns to the other, which waits in line,
// and campaigns again behind it. A sample is the time from the Proclaim
// or Resign call to the last of the observers receiving the new value
// (every value is unique), -observer-rounds (20) of each per system.
//
// Order (order): -order-candidates (20) candidates, each with a client
// of its own, begin to campaign one after the other while a holder leads;
// once all are in line the holder resigns, and each candidate resigns as
// soon as it is elected. A pair elected in the other order than it began
// is an inversion; the row counts them over -order-rounds (3) rounds. The
// first order row starts each candidate once the one before is in line;
// the second starts them -order-gap (2ms) apart, without waiting. A
// candidate's place is where its first call reaches the server, not
// where the call was made: with 2ms between two starts, a call that is
// slower to reach the server, on a loaded machine or, for fairlock, on a
// Client that has never waited before (its first wait subscribes to the
// Client's pub/sub connection, a few ms, before it joins the line), can
// be overtaken. The first round's candidates are fresh clients in both
// systems; the JSON has the inversions of each round.
//
// # client-go, from its documentation
//
// client-go's leaderelection keeps the leader's record in a Kubernetes
// object (a Lease) on the API server, and cannot run without one. Its
// column is computed from the defaults its LeaderElectionConfig documents
// ("Core clients default this value to 15 seconds" for LeaseDuration, 10
// seconds for RenewDeadline, 2 seconds for RetryPeriod), and from what the
// package's documentation and code say its candidates do:
//
//   - RetryPeriod "is the duration the LeaderElector clients should wait
//     between tries of actions": a candidate that does not lead tries to
//     acquire the record every RetryPeriod (LeaderElector.acquire, by
//     wait.JitterUntil with JitterFactor 1.2, so each wait is
//     RetryPeriod to RetryPeriod×2.2: wait.Jitter "returns a time.Duration
//     between duration and duration + maxFactor * duration").
//   - Resign -> new leader: a leader that stops with ReleaseOnCancel
//     writes a record without a holder; the next candidate takes it at
//     its next try, 0 to RetryPeriod later by the documented period (up to
//     4.4s with the jitter). Without ReleaseOnCancel a stopped leader is
//     replaced as a crashed one is.
//   - SIGKILL -> new leader: LeaseDuration "is the duration that
//     non-leader candidates will wait to force acquire leadership. This
//     is measured against time of last observed ack": the candidates take
//     over at their first try LeaseDuration after they last saw the
//     record renewed, 15 to 17 s after that renewal by the documented
//     period (the kill comes up to a RetryPeriod after the renewal, and a
//     candidate sees the renewal up to a try late, so from the kill it is
//     13 s at the least and, with the jitter, up to about 24 s).
//   - Change -> observers: OnNewLeader "is called when the client
//     observes a leader that is not the previously observed leader", and
//     a client observes the record at its tries: an observer is a
//     candidate (LeaderElector.Run) polling every RetryPeriod, told 0 to
//     RetryPeriod after the change (with the jitter, up to 4.4s). The
//     record holds the holder's identity, no value, so nothing is
//     proclaimed.
//   - Order: the first candidate to try after the release, or after the
//     lease ran out, takes the record; candidates keep no line.
//
// # Reading the figures
//
// Both servers run on loopback, so the figures are the systems' own work
// and their round trips on one machine, without a network; on a network
// each round trip adds its latency, and etcd's writes also wait for a
// quorum of its members' disks. The Redis that fairlock runs on keeps
// nothing on disk; etcd writes its log to -etcd-dir and syncs it, as it
// always does. With a handful of rounds the kill rows are a few samples:
// fairlock's is the lease plus a few ms every time, etcd's the lease plus
// 0 to 500ms, wherever its revocation loop happens to be.
package main
