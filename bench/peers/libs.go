package main

import (
	"context"
	"errors"
	"time"

	"github.com/bsm/redislock"
	"github.com/fairlock/fairlock"
	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
)

// A locker takes locks the way a user of one library would, through one
// go-redis client.
type locker interface {
	// lock waits until the lock called name is granted or ctx ends, and
	// returns the function that releases it.
	lock(ctx context.Context, name string) (unlock func(context.Context) error, err error)
	// lockAll waits until it holds every lock of names at once, or ctx
	// ends, and returns the function that releases them all and the
	// attempts it made at the whole set (multi.go).
	lockAll(ctx context.Context, names []string) (unlock func(context.Context) error, attempts int64, err error)
	// acquire waits until it holds weight of the permits of the semaphore
	// called name, which has permits in all, or ctx ends, and returns the
	// function that gives them back and the attempts it made
	// (semaphore.go).
	acquire(ctx context.Context, name string, permits, weight int) (unlock func(context.Context) error, attempts int64, err error)
}

// libConfig is the part of each library's configuration that the command
// line can change.
type libConfig struct {
	ttl              time.Duration // lease of fairlock, expiry of redsync, TTL of redislock
	redsyncDelay     time.Duration // redsync's delay between two tries
	redislockBackoff time.Duration // redislock's linear backoff between two tries
	multiWait        time.Duration // in the multi workload, the longest random wait between two attempts at a set
	semaphoreWait    time.Duration // in the semaphore workload, the longest random wait between two attempts at its permits
}

// A library makes one locker per go-redis client.
type library struct {
	name  string // selects it with -libs; names it in the JSON report
	label string // names its rows in the tables, when not name
	// multiOnly makes only the workloads that take several names at once
	// run it.
	multiOnly bool
	// open returns a locker over rdb and the function that releases what
	// the locker started (not rdb itself).
	open func(rdb *redis.Client) (locker, func() error, error)
	// openQuorum returns a locker of the library's quorum lock over
	// masters, one go-redis client per independent master, and the
	// function that releases what the locker started (not the clients);
	// nil when the library has none. Only the workloads on several
	// masters run it, and only them (redlock.go).
	openQuorum func(masters []*redis.Client) (locker, func() error, error)
}

// libraries returns the libraries under test, fairlock first, and last
// the atomic try-all (atomic.go), which is no library's.
func libraries(cfg libConfig) []library {
	return []library{
		{name: "fairlock", open: func(rdb *redis.Client) (locker, func() error, error) {
			c, err := fairlock.New(rdb, fairlock.WithLease(cfg.ttl))
			if err != nil {
				return nil, nil, err
			}
			return fairLocker{c}, c.Close, nil
		}, openQuorum: openFairQuorum(cfg)},
		{name: "redsync", open: func(rdb *redis.Client) (locker, func() error, error) {
			return newRedsyncLocker(cfg, rdb), noClose, nil
		}, openQuorum: func(masters []*redis.Client) (locker, func() error, error) {
			return newRedsyncLocker(cfg, masters...), noClose, nil
		}},
		{name: "redislock", open: func(rdb *redis.Client) (locker, func() error, error) {
			return redislockLocker{
				c:             redislock.New(rdb),
				ttl:           cfg.ttl,
				opts:          &redislock.Options{RetryStrategy: redislock.LinearBackoff(cfg.redislockBackoff)},
				multiWait:     cfg.multiWait,
				semaphoreWait: cfg.semaphoreWait,
			}, noClose, nil
		}},
		{name: atomicName, label: atomicLabel, multiOnly: true, open: func(rdb *redis.Client) (locker, func() error, error) {
			return atomicLocker{rdb: rdb, ttl: cfg.ttl, multiWait: cfg.multiWait}, noClose, nil
		}},
	}
}

// runsIn reports whether l runs in w.
func (l library) runsIn(w workload) bool {
	if w.masters > 0 {
		return l.openQuorum != nil
	}
	return !l.multiOnly || w.multi[1] > 0
}

func noClose() error { return nil }

// fairLocker takes fairlock mutexes of one Client.
type fairLocker struct{ c *fairlock.Client }

var _ locker = fairLocker{}

func (f fairLocker) lock(ctx context.Context, name string) (func(context.Context) error, error) {
	m := f.c.Mutex(name)
	held, err := m.Lock(ctx)
	if err != nil {
		return nil, err
	}
	// Unlock is bounded by the Client's call timeout, not by a context.
	return func(context.Context) error { return m.Unlock(held) }, nil
}

// redsyncLocker takes redsync mutexes over one pool, or over several: a
// RedLock, held while a majority of the pools hold it. A redsync.Mutex
// keeps the value of its hold, so every lock makes a new one.
type redsyncLocker struct {
	rs            *redsync.Redsync
	opts          []redsync.Option
	multiWait     time.Duration
	semaphoreWait time.Duration
}

var _ locker = redsyncLocker{}

// newRedsyncLocker returns a locker of redsync.New with one pool per
// client of rdbs, configured by cfg.
func newRedsyncLocker(cfg libConfig, rdbs ...*redis.Client) redsyncLocker {
	pools := make([]redsyncredis.Pool, len(rdbs))
	for i, rdb := range rdbs {
		pools[i] = goredis.NewPool(rdb)
	}
	return redsyncLocker{
		rs: redsync.New(pools...),
		opts: []redsync.Option{
			redsync.WithExpiry(cfg.ttl),
			redsync.WithTries(1 << 30), // the run's deadline ends a wait, not a count
			redsync.WithRetryDelay(cfg.redsyncDelay),
		},
		multiWait:     cfg.multiWait,
		semaphoreWait: cfg.semaphoreWait,
	}
}

// errNotReleased reports an unlock that found the lock no longer ours.
var errNotReleased = errors.New("lock was not held at unlock")

func (r redsyncLocker) lock(ctx context.Context, name string) (func(context.Context) error, error) {
	m := r.rs.NewMutex(name, r.opts...)
	if err := m.LockContext(ctx); err != nil {
		return nil, err
	}
	return redsyncUnlock(m), nil
}

// redsyncUnlock returns the release of a redsync mutex that is held.
func redsyncUnlock(m *redsync.Mutex) func(context.Context) error {
	return func(ctx context.Context) error {
		ok, err := m.UnlockContext(ctx)
		if err == nil && !ok {
			err = errNotReleased
		}
		return err
	}
}

// redislockLocker obtains bsm/redislock locks through one Client.
type redislockLocker struct {
	c             *redislock.Client
	ttl           time.Duration
	opts          *redislock.Options
	multiWait     time.Duration
	semaphoreWait time.Duration
}

var _ locker = redislockLocker{}

func (r redislockLocker) lock(ctx context.Context, name string) (func(context.Context) error, error) {
	l, err := r.c.Obtain(ctx, name, r.ttl, r.opts)
	if err != nil {
		return nil, err
	}
	return l.Release, nil
}
