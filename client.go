package fairlock

import (
	"fmt"
	"log/slog"
	"reflect"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock/fairlock/fair"
	"github.com/fairlock/fairlock/queue"
)

// Client makes the Mutex handles of one Redis deployment. It owns one
// pub/sub connection, shared by every waiter of every lock, and the
// watchdogs of its holds. It is safe for concurrent use.
type Client struct {
	run    runner       // the engine, or a quorum Client's Quorum
	engine *fair.Engine // nil for a quorum Client (NewQuorum), which offers only Mutex
	events *eventQueue  // the Observer's; nil without one
	cfg    config
	// leaders are the watchers of the elections observed (Observe).
	leaders leaderWatches
}

// runner is what a Client's engine and a quorum Client's Quorum both are.
type runner interface {
	Close() error
	Closed() bool
	Tag() string
	// Lock returns the lock called name (its keys made with prefix).
	Lock(prefix, name string) (queue.Keys, fair.Locker, error)
	// Election returns the election called name (its keys made with
	// prefix).
	Election(prefix, name string) (queue.Keys, fair.Elector, error)
}

var (
	_ runner = (*fair.Engine)(nil)
	_ runner = (*fair.Quorum)(nil)
)

// New returns a Client that keeps its locks in rdb (a *redis.Client,
// *redis.ClusterClient, *redis.Ring or a failover client). It opens no
// connection of its own until a Lock has to wait. A nil rdb or an invalid
// option makes it fail with ErrInvalidOption.
func New(rdb redis.UniversalClient, opts ...Option) (*Client, error) {
	if isNil(rdb) {
		return nil, fmt.Errorf("%w: nil redis client", ErrInvalidOption)
	}
	cfg := configure(opts)
	cfg.checkReplicas(rdb)
	if cfg.driftSet {
		cfg.invalid("WithDriftFactor applies to a quorum Client (NewQuorum) only")
	}
	if cfg.err != nil {
		return nil, cfg.err
	}
	tag := queue.NewTag()
	log := cfg.clientLogger(tag)
	events := newEventQueue(cfg.observer, cfg.observerQueue, log)
	e, err := fair.NewEngine(rdb, fair.Config{
		WaiterTTL:   cfg.waiterTTL,
		CallTimeout: cfg.callTimeout,
		Heartbeat:   cfg.heartbeat,
		Logger:      log,
		Tag:         tag,
		// Replicas 0 keeps every call as it is: one script, no pipeline.
		Replicas:       cfg.replicas,
		ReplicaTimeout: cfg.replicaWait,
		Observe:        events.hook(),
		Name:           cfg.name,
		Prefix:         cfg.prefix,
	})
	if err != nil {
		// The options were validated above: a Config the engine refuses
		// is a bug of this package, reported rather than panicking.
		return nil, fmt.Errorf("%w: %w", ErrInvalidOption, err)
	}
	return &Client{run: e, engine: e, events: events, cfg: cfg}, nil
}

// clientLogger returns the logger of the Client whose ID is tag: the
// configured one, with the ID and the name (if any) on every record.
func (c *config) clientLogger(tag string) *slog.Logger {
	attrs := []any{slog.String("client", tag)}
	if c.name != "" {
		attrs = append(attrs, slog.String("client_name", c.name))
	}
	return c.logger.With(attrs...)
}

// configure returns the configuration of a Client built with opts, its
// err set to the first invalid option.
func configure(opts []Option) config {
	cfg := defaults()
	for i, o := range opts {
		if o == nil {
			cfg.invalid("option %d is nil", i)
			continue
		}
		o.applyClient(&cfg)
	}
	return cfg
}

// readTimeout returns the read timeout of rdb's connections (0: none), and
// false when rdb is of a kind WithReplicas cannot find the primary of a
// lock with.
func readTimeout(rdb redis.UniversalClient) (time.Duration, bool) {
	var d time.Duration
	switch r := rdb.(type) {
	case *redis.Client:
		d = r.Options().ReadTimeout // as go-redis set it up: 0 or below, none
	case *redis.ClusterClient:
		d = r.Options().ReadTimeout // likewise
	case *redis.Ring:
		// The shards' options are set up from these: 0 is go-redis's
		// default, below 0 none.
		if d = r.Options().ReadTimeout; d == 0 {
			d = 5 * time.Second
		}
	default:
		return 0, false
	}
	return max(d, 0), true
}

func isNil(rdb redis.UniversalClient) bool {
	if rdb == nil {
		return true
	}
	v := reflect.ValueOf(rdb)
	return v.Kind() == reflect.Pointer && v.IsNil()
}

// Close releases the Client: Lock calls still waiting return ErrClosed
// (after leaving the queue), holds still live have their contexts
// cancelled with cause ErrClosed at once and are released in Redis (the
// next waiter is handed each lock, as by Unlock), the pub/sub connections
// are closed, and every goroutine of the Client has exited when Close
// returns. The releases of all the holds go out together, in pipelines
// per server, and each hold's lease is renewed until its release is
// answered, so that none lapses while the releases ahead of it go out.
// All of that runs at once, and calls to Redis still out one call
// timeout (10s) after Close started are given up, so Close returns within
// about that even when Redis does not answer. The events queued for the
// Observer, those of the calls and holds Close ends included, are
// delivered within the same bound, and the rest dropped (DroppedEvents);
// Close waits for the Observe call under way, so an Observe that never
// returns (or that calls Close) keeps it from returning. It does not close the redis client
// given to New. Close is idempotent.
func (c *Client) Close() error {
	if c == nil {
		return nil
	}
	by := time.Now().Add(c.cfg.callTimeout)
	c.leaders.close()
	err := c.run.Close()
	c.events.close(by)
	return err
}

// leaseConfig is how a lock's holds keep their lease: d, renewed by the
// watchdog, or fixed.
type leaseConfig struct {
	d     time.Duration
	fixed bool
}

// leaseOf reads the options of a lock (a Mutex, a Semaphore, a RWMutex):
// the Client's lease, or a fixed one; an error wrapping ErrInvalidOption
// for a nil option or a bad value.
func (c *Client) leaseOf(opts []HandleOption) (leaseConfig, error) {
	var mc mutexConfig
	for i, o := range opts {
		if o == nil {
			if mc.err == nil {
				mc.err = fmt.Errorf("%w: option %d is nil", ErrInvalidOption, i)
			}
			continue
		}
		o.applyMutex(&mc)
	}
	if mc.fixedLease > 0 {
		return leaseConfig{d: mc.fixedLease, fixed: true}, mc.err
	}
	return leaseConfig{d: c.cfg.lease}, mc.err
}

// Mutex returns a handle on the lock called name. Handles are cheap and
// safe for concurrent use; two handles of one name (from any Client with
// the same prefix on the same Redis) are the same lock. An invalid name or
// option is reported by every method of the handle (ErrInvalidName,
// ErrInvalidOption).
func (c *Client) Mutex(name string, opts ...HandleOption) *Mutex {
	if c == nil {
		return &Mutex{name: name, err: errNilClient}
	}
	m := &Mutex{c: c, name: name}
	lc, optErr := c.leaseOf(opts)
	m.lease, m.fixed = lc.d, lc.fixed
	keys, lock, err := c.run.Lock(c.cfg.prefix, name)
	switch {
	case err != nil:
		m.err = err
	case optErr != nil:
		m.err = optErr
	default:
		m.lock, m.keys, m.key = lock, keys, holdKey{lock: keys.Lock}
	}
	return m
}
