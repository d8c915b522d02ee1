package fairlock

import (
	"fmt"
	"log/slog"
	"time"

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
	err         error // the first invalid option
}

// defaults returns the configuration of a Client built without options.
func defaults() config {
	return config{
		prefix:      "fairlock",
		lease:       30 * time.Second,
		waiterTTL:   10 * time.Second,
		logger:      slog.New(slog.DiscardHandler),
		callTimeout: 10 * time.Second,
		heartbeat:   time.Second,
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
// others. A TTL shorter than MinDuration makes New fail with
// ErrInvalidOption.
func WithWaiterTTL(d time.Duration) Option {
	return clientOption(func(c *config) {
		if d < MinDuration {
			c.invalid("WithWaiterTTL(%v): shorter than %v", d, MinDuration)
			return
		}
		c.waiterTTL = d
	})
}

// WithLogger sets the logger for events that are not returned to a caller
// (a renewal that failed, a lease lost in the background, the notify
// connection rebuilt). Default: discard. A nil logger makes New fail with
// ErrInvalidOption.
func WithLogger(l *slog.Logger) Option {
	return clientOption(func(c *config) {
		if l == nil {
			c.invalid("WithLogger(nil)")
			return
		}
		c.logger = l
	})
}

// mutexConfig is a Mutex's configuration.
type mutexConfig struct {
	fixedLease time.Duration // 0: watchdog lease
	err        error
}

// A MutexOption configures one Mutex handle.
type MutexOption interface {
	applyMutex(*mutexConfig)
}

type mutexOption func(*mutexConfig)

func (f mutexOption) applyMutex(c *mutexConfig) { f(c) }

// WithFixedLease makes every hold taken through the handle expire d after
// it was granted, whether the lock was free or handed over, with no
// watchdog renewing it. The hold's context is cancelled with cause
// ErrLeaseLost when d has passed (a few milliseconds early: twice the
// round trip of the grant, at least 5ms, at most d/10), unless it was
// unlocked before, and the hold is released in Redis then, so the next
// waiter is handed the lock at once. Re-entry does not extend it. Default: no fixed lease
// (the Client's watchdog lease). A d shorter than MinDuration makes every
// method of the handle fail with ErrInvalidOption.
func WithFixedLease(d time.Duration) MutexOption {
	return mutexOption(func(c *mutexConfig) {
		if d < MinDuration {
			if c.err == nil {
				c.err = fmt.Errorf("%w: WithFixedLease(%v): shorter than %v", ErrInvalidOption, d, MinDuration)
			}
			return
		}
		c.fixedLease = d
	})
}
