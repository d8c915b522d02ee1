// Fairlock is the operator command of fairlock locks: it shows who holds a
// lock and who waits for it, lists the locks in use, watches one live, and
// removes a hold that must go.
//
// Install it with
//
//	go install github.com/fairlock/fairlock/cmd/fairlock@latest
//
// Usage:
//
//	fairlock inspect [flags] NAME          the holder and the waiters in order
//	fairlock list [flags] [PATTERN]        the locks held or waited on
//	fairlock watch [flags] NAME            a live view, redrawn on every hand-over
//	fairlock unlock --force --yes [flags] NAME
//	                                       remove the hold, grant the next waiter
//
// inspect prints the holder of the lock NAME (its owner id, the ID of the
// Client whose call was granted the hold, its levels, its fencing token
// and its lease left) and the waiters in the order they joined the line,
// each with its owner id, its Client's ID and the time it keeps its place.
// list prints the names of the locks held or waited on that match the glob
// PATTERN (all without one), sorted, scanning every server with SCAN.
//
// watch shows what inspect shows and draws it again on every hand-over (it
// subscribes to the lock's wake channels, <prefix>:{<name>}:wake*) and
// every -every (default 1s). On a Redis Cluster it draws on the timer
// only: there Redis 7 publishes hand-overs with SPUBLISH on a channel per
// Client, which no pattern catches. When Redis stops answering it says so,
// keeps trying, and says when it is back. It runs until interrupted, or
// for -for. On a terminal it redraws the screen; otherwise it appends one
// view after the other. A lock that nobody holds or waits for when watch
// starts is not found (exit status 1), unless -idle asks to watch it all
// the same.
//
// unlock --force removes the hold of NAME, whoever owns it, and hands the
// lock to the next waiter (Mutex.ForceUnlock); the former holder learns it
// at its next renewal. Without --yes it removes nothing: it says whose
// hold it would remove and exits with 2. With --yes it says whose hold it
// removed, as it read it just before removing it.
//
// Flags, before or after the arguments, for every command:
//
//	-redis URL          a single Redis (default redis://127.0.0.1:6379/0)
//	-cluster ADDRS      a Redis Cluster, by seed addresses host:port,...
//	-sentinel ADDRS -master NAME
//	                    the primary that sentinels monitor as NAME
//	-prefix P           the key prefix of the locks' Clients (default "fairlock")
//	-json               JSON to stdout (watch: one object a line per view)
//	-timeout D          how long to wait for Redis (default 5s)
//
// The exit status is 0 when done; 1 when inspect or watch finds nobody
// holding the lock and nobody waiting for it, list finds no lock that matches,
// or unlock finds it not held; 2 for
// bad usage, a Redis that cannot be reached or refuses (a Redis user
// without the rights gives fairlock's ErrNoPermission message), and an
// unlock refused for want of --yes. Errors go to stderr.
package main
