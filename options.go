package fairlock

import (
	"fmt"
	"log/slog"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock/fairlock/queue"
)

// MinDuration is the shortest lease, fixed lease or waiter TTL accepted.
// Redis keeps expiries in milliseconds; below this, timers and round trips
// would eat the whole lease.
const MinDuration = 10 * time.Millisecond

// config is a Client's configuration.
type config struct {
	prefix      string
	lease       time.Duration
	waiterTTL   time.Duration
	logger      *slog.Logger
	callTimeout time.Duration
	heartbeat   time.Duration
	replicas    int           // 0: no waiting for replicas
	replicaWait time.Duration // WAIT's timeout when replicas > 0
	observer    Observer      // nil: none
	// observerQueue is the size of the Observer's event queue; 0: none,
	// the Observer is called on the step's goroutine.
	observerQueue int
	name          string  // "": no name
	drift         float64 // a quorum's drift factor (WithDriftFactor)
	driftSet      bool    // WithDriftFactor was given
	err           error   // the first invalid option
}

// defaults returns the configuration of a Client built without options.
func defaults() config {
	return config{
		prefix:        "fairlock",
		lease:         30 * time.Second,
		waiterTTL:     10 * time.Second,
		logger:        slog.New(slog.DiscardHandler),
		callTimeout:   10 * time.Second,
		heartbeat:     time.Second,
		drift:         0.01,
		observerQueue: defaultObserverQueue,
	}
}

// An Option configures a Client. Options are made by the WithX functions
// of this package.
type Option interface {
	applyClient(*config)
}

type clientOption func(*config)

func (f clientOption) applyClient(c *config) { f(c) }

// invalid records the first invalid option.
func (c *config) invalid(format string, args ...any) {
	if c.err == nil {
		c.err = fmt.Errorf("%w: "+format, append([]any{ErrInvalidOption}, args...)...)
	}
}

// WithPrefix sets the prefix of every Redis key and channel of the
// Client's locks. Default "fairlock". Clients that share a prefix and a
// Redis share their locks. An empty prefix, one longer than 256 bytes, one
// that is not valid UTF-8 or one with a brace makes New fail with
// ErrInvalidOption.
func WithPrefix(prefix string) Option {
	return clientOption(func(c *config) {
		if err := queue.ValidatePrefix(prefix); err != nil {
			c.invalid("WithPrefix: %v", err)
			return
		}
		c.prefix = prefix
	})
}

// WithLease sets the watchdog lease: a hold expires this long after its
// last renewal, and is renewed every third of it while held. Default 30s.
// It bounds how long a crashed holder keeps the lock. A lease shorter than
// MinDuration makes New fail with ErrInvalidOption.
func WithLease(d time.Duration) Option {
	return clientOption(func(c *config) {
		if d < MinDuration {
			c.invalid("WithLease(%v): shorter than %v", d, MinDuration)
			return
		}
		c.lease = d
	})
}

// WithWaiterTTL sets how long a waiter keeps its place in line without
// polling. Live waiters poll at least every third of it, so only a waiter
// whose process died (or lost Redis) for that long is dropped. Default 10s.
// It bounds how long a dead waiter at the head of the line can delay the
// others, give or take how often they poll: a waiter behind it finds it
// gone at its own next poll, a third of its own Client's TTL later at
// most, so use one TTL for every Client of a lock. A TTL shorter than
// MinDuration makes New fail with ErrInvalidOption.
func WithWaiterTTL(d time.Duration) Option {
	return clientOption(func(c *config) {
		if d < MinDuration {
			c.invalid("WithWaiterTTL(%v): shorter than %v", d, MinDuration)
			return
		}
		c.waiterTTL = d
	})
}

// WithName gives the Client a name that people read, such as
// "billing-worker-3": Inspect then shows it beside the Client's ID for the
// holds and waits of its Lock calls. The Client keeps it in Redis, in the
// key <prefix>:client:<ID>, from its first Lock while it is open (the key
// expires a minute after the process stops renewing it, and Close
// deletes it; a server that lost it, restarted without its data, has it
// again as soon as the Client notices). Every record the Client logs
// carries it too (see WithLogger). Default: no name, and no such key. A name that is empty,
// longer than 128 bytes, not valid UTF-8 or with control characters makes
// New fail with ErrInvalidOption.
func WithName(name string) Option {
	return clientOption(func(c *config) {
		if !validName(name) {
			c.invalid("WithName(%q): want 1 to 128 bytes of UTF-8 without control characters", name)
			return
		}
		c.name = name
	})
}

// validName reports whether a Client name is acceptable.
func validName(name string) bool {
	if name == "" || len(name) > 128 || !utf8.ValidString(name) {
		return false
	}
	for _, r := range name {
		if unicode.IsControl(r) {
			return false
		}
	}
	return true
}

// WithLogger sets the logger for events that are not returned to a caller
// (a lease lost in the background, at Error; an outage of Redis, at Warn
// as it starts and at Info as it ends, once each; a renewal that failed;
// the notify connection rebuilt). Every record carries the Client's ID
// as "client" and its WithName as "client_name", and a record about a
// hold or a Lock call the lock's name, its kind, the owner, and the
// fencing token and time held or the time waited: docs/operations.md
// ("Logs") lists the records, their levels and their fields. Default:
// discard. A nil logger makes New fail with ErrInvalidOption.
func WithLogger(l *slog.Logger) Option {
	return clientOption(func(c *config) {
		if l == nil {
			c.invalid("WithLogger(nil)")
			return
		}
		c.logger = l
	})
}

// WithReplicas makes every call that grants, re-enters or releases a hold
// count only once n replicas have acknowledged it: each is followed, in
// one pipeline on one connection to the lock's primary, by Redis's WAIT n
// with the given timeout, so that a failover to one of those replicas
// cannot lose the grant or bring back the released hold. Default: no
// waiting (n = 0), one round trip per call.
//
// When fewer than n replicas acknowledge in time, the call fails with
// ErrNotReplicated as a network error would: Lock keeps trying under its
// grant until it is acknowledged or ctx ends (then the grant is given
// back, and the error joins ErrNotReplicated with ctx's); TryLock and a
// re-entry give the level back and fail; Unlock releases on the primary
// and sends the same release again in the background until it is
// acknowledged. A primary with fewer than n replicas connected (INFO
// replication, asked after a short WAIT) is not waited for: every call
// fails at once with ErrNotReplicated naming both numbers, Lock
// included. docs/operations.md says what WAIT does not promise.
//
// n below 1 makes New fail with ErrInvalidOption, and so does a timeout
// shorter than MinDuration or longer than the most that leaves the rest of
// a call its time: a third of the lease and of the waiter TTL, half the
// redis client's ReadTimeout (a WAIT that runs out must still be read in
// time; go-redis's default is 5s) and half the call timeout (10s). With
// the defaults, that is 2.5s. The client must be a *redis.Client (a
// failover client is one), *redis.ClusterClient or *redis.Ring.
func WithReplicas(n int, timeout time.Duration) Option {
	return clientOption(func(c *config) {
		switch {
		case n < 1:
			c.invalid("WithReplicas(%d, %v): fewer than 1 replica", n, timeout)
		case timeout < MinDuration:
			c.invalid("WithReplicas(%d, %v): timeout shorter than %v", n, timeout, MinDuration)
		default:
			c.replicas, c.replicaWait = n, timeout
		}
	})
}

// checkReplicas validates WithReplicas against the rest of the
// configuration and the redis client, once every option is applied.
func (c *config) checkReplicas(rdb redis.UniversalClient) {
	if c.replicas == 0 {
		return
	}
	bound, why := min(c.lease, c.waiterTTL)/3, "a third of the lease and of the waiter TTL"
	if c.callTimeout/2 < bound {
		bound, why = c.callTimeout/2, "half the call timeout"
	}
	read, ok := readTimeout(rdb)
	if !ok {
		c.invalid("WithReplicas: the redis client is a %T, not a *redis.Client, *redis.ClusterClient or *redis.Ring", rdb)
		return
	}
	if read > 0 && read/2 < bound {
		bound, why = read/2, "half the redis client's ReadTimeout"
	}
	if c.replicaWait > bound {
		c.invalid("WithReplicas(%d, %v): timeout longer than %v, %s", c.replicas, c.replicaWait, bound, why)
	}
}

// mutexConfig is a Mutex's configuration.
type mutexConfig struct {
	fixedLease time.Duration // 0: watchdog lease
	err        error
}

// A HandleOption configures one handle: the Mutex, MultiLock, Semaphore
// or RWMutex that a Client's method returns. Handles of one name made
// with different options share the lock in Redis; the options apply to
// the holds taken through the handle they were given to.
type HandleOption interface {
	applyMutex(*mutexConfig)
}

type handleOption func(*mutexConfig)

func (f handleOption) applyMutex(c *mutexConfig) { f(c) }

// WithFixedLease makes every hold taken through the handle expire d after
// it was granted, whether the lock was free or handed over, with no
// watchdog renewing it. The hold's context is cancelled with cause
// ErrLeaseLost when d has passed (a few milliseconds early: twice the
// round trip of the grant, at least 5ms, at most d/10), unless it was
// unlocked before, and the hold is released in Redis then, so the next
// waiter is handed the lock at once. Re-entry does not extend it. Default: no fixed lease
// (the Client's watchdog lease). A d shorter than MinDuration makes every
// method of the handle fail with ErrInvalidOption.
func WithFixedLease(d time.Duration) HandleOption {
	return handleOption(func(c *mutexConfig) {
		if d < MinDuration {
			if c.err == nil {
				c.err = fmt.Errorf("%w: WithFixedLease(%v): shorter than %v", ErrInvalidOption, d, MinDuration)
			}
			return
		}
		c.fixedLease = d
	})
}
