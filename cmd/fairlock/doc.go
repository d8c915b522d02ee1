// Fairlock is the operator command of fairlock locks: it shows who holds
// the locks of a name and who waits for them, whatever their kind (a
// Mutex, a MultiLock's ticket, a Semaphore, a RWMutex, an Election, a
// quorum's Mutex), lists the locks in use, watches one name live, shows
// and follows an election's leader, and removes a hold (or ends a
// leadership) that must go.
//
// Install it with
//
//	go install github.com/fairlock/fairlock/cmd/fairlock@latest
//
// Usage:
//
//	fairlock inspect [flags] NAME          every lock called NAME: holders and line
//	fairlock list [flags] [PATTERN]        the locks held or waited on, with their kinds
//	fairlock watch [flags] NAME            a live view, redrawn on every hand-over
//	fairlock unlock --force --yes [-kind KIND] [-owner OWNER] [flags] NAME
//	                                       remove a hold, let the line in
//	fairlock leader [flags] NAME           an election's leader and candidates
//	fairlock leader -watch [-for D] [flags] NAME  (or: fairlock leader NAME watch)
//	                                       one line per change of its leader
//
// inspect prints each lock called NAME that is in use (a name may be used
// by a Mutex, a Semaphore, a RWMutex and an Election at once: four locks,
// shown in that order): its kind;
// its capacity and use (a Semaphore's permits held of its capacity, a
// RWMutex's readers or writer); its holders in the order of their grants,
// each with its owner id, the ID and name (WithName) of the Client it was
// granted through, its weight, its levels, its fencing token, the time
// it has been held and its lease left; and its line in the order it is
// served, each waiter with its kind (lock, ticket, permits, read, write),
// owner, Client, weight, the time it has waited and the time it keeps its
// place, and for a MultiLock's ticket the other names it waits for. An
// Election's holder is its leader, whose token is the term, shown with
// its value; its waiters are the candidates (kind campaign), each with
// the value it campaigns with. With -masters it shows the majority's
// view, then each master's.
//
// list prints one line per name and kind in use that matches the glob
// PATTERN (all without one), sorted by name: its kind, its use, and how
// many hold it and wait for it. It scans every server with SCAN, then
// inspects each name it found.
//
// watch shows what inspect shows and draws it again on every hand-over:
// it subscribes to the wake channels of the name's Mutex, Semaphore,
// RWMutex and Election (<prefix>:{<name>}:wake*, :sem:wake*, :rw:wake*,
// :e:wake*; a quorum's :q:wake* on every master) and to the Election's
// leader channel (:e:leader, told of a new value and of a leader gone
// with nobody in line too), and while a MultiLock's ticket waits in the
// line, to those of the ticket's first lock, where its grant is
// published. It also draws every -every (default 1s): a lock taken while
// free, or handed to a waiter of the very Client that gave it up, is
// published nowhere. On a Redis Cluster it draws on the timer only: there
// Redis 7 publishes hand-overs with SPUBLISH on a channel per Client,
// which no pattern catches. When Redis stops answering it says so, keeps
// trying, and says when it is back. It runs until interrupted, or for
// -for. On a terminal it redraws the screen; otherwise it appends one
// view after the other. A name that nobody holds or waits for when watch
// starts is not found (exit status 1), unless -idle asks to watch it all
// the same.
//
// unlock --force removes a hold of NAME, whoever owns it, and lets the
// line in: a Mutex's one hold (Mutex.ForceUnlock; -owner, if given, must
// be its owner), an Election's leadership (Election.ForceResign: the
// first candidate in line is elected, under a higher term; -owner as for
// a Mutex), or on a Semaphore or a RWMutex the hold of -owner, which is
// required there. When locks of several kinds of the name are
// held, -kind names one. Without --yes it removes nothing: it says whose
// hold it would remove and exits with 2. With --yes it says whose hold it
// removed, as it read it just before removing it, and how long the
// former holder may still act beside the next: its Client cancels the
// hold's context within a push's latency, or at the latest when its
// lease would have ended should the push be lost; code that uses neither
// that context nor a fencing token may act on for as long as it runs.
//
// leader prints the leader of the election NAME (Election.Inspect): its
// value, its term, since when and for how long it has led, the ID and
// name of its Client, its owner id and its lease left; then the
// candidates in line, in the order they would be elected, each with its
// position, Client, value, owner id and the time it has waited. An
// election without a leader is exit status 1. With -watch it follows the
// leadership with Election.Observe: one line (with -json, one JSON
// object) for the leadership when it starts, then one per change, each
// saying why it was written (start, elected: a new leader and term;
// proclaimed: a new value under the same term; ended: no leader), until
// interrupted or for -for. The changes are pushed on the election's
// leader channel, and written within milliseconds; while Redis does not
// answer, it writes nothing, and writes the leadership once Redis
// answers if it changed meanwhile (-v shows the Client's retries). A
// quorum (-masters) has no elections.
//
// Flags, before or after the arguments, for every command:
//
//	-redis URL          a single Redis (default redis://127.0.0.1:6379/0)
//	-cluster ADDRS      a Redis Cluster, by seed addresses host:port,...
//	-sentinel ADDRS -master NAME
//	                    the primary that sentinels monitor as NAME
//	-masters ADDRS      a quorum's masters (NewQuorum), host:port or
//	                    redis:// URLs, in the order its Clients list them
//	-prefix P           the key prefix of the locks' Clients (default "fairlock")
//	-json               JSON to stdout (watch: one object a line per view;
//	                    leader -watch: one a line per change)
//	-timeout D          how long to wait for Redis (default 5s); with
//	                    -masters, for each master's answer to each read
//	-v                  go-redis's and the Client's log lines to stderr
//
// The JSON has a "schema" field, "fairlock/v1", and one object shape per
// command, documented in docs/operations.md ("The operator command's
// JSON"). Every instant in the output, text or JSON, is the Redis
// server's clock (TIME, read with the state); durations are measured by
// that clock too, except how long Redis has not answered, which only the
// watcher can measure.
//
// The exit status is 0 when done; 1 when inspect or watch finds nobody
// holding a lock of the name and nobody waiting for one, list finds no
// lock that matches, unlock finds no such hold, or leader finds no
// leader; 2 for bad usage, a
// Redis that cannot be reached or refuses (a Redis user without the
// rights gives fairlock's ErrNoPermission message), and an unlock refused
// for want of --yes or -owner. Errors go to stderr (go-redis's own log
// lines only with -v).
package main
