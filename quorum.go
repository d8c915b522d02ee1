package fairlock

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock/fairlock/fair"
	"github.com/fairlock/fairlock/queue"
)

// NewQuorum returns a Client whose locks live on all of masters: N
// independent Redis masters (not replicas of one another, not shards of
// one Cluster). A lock is held while a majority of them, N/2+1, hold it
// for one Lock call, so it survives the loss of the others, and a
// failover of any one of them cannot grant it twice. Every Mutex method
// works as with New:
//   - Lock is FIFO in bakery order: a caller is served before every caller
//     whose Lock began after its own had joined the line of a majority;
//   - Token commits the hold's fencing token to a majority on its first
//     call (one round trip, none when a majority drew that token itself
//     for the hold; later calls are free), and tokens strictly
//     increase across holders even when a holder pauses past its
//     validity or a master's clock steps;
//   - TTL is the validity left: the time a majority is known to keep the
//     hold, measured on this process's monotonic clock, less the drift
//     (WithDriftFactor); IsLocked and HoldCount are the majority's view;
//     ForceUnlock acts on every master;
//   - a waiter is woken by a push from each master (one pub/sub
//     connection per master), and a hand-over completes when a majority
//     has pushed.
//
// Fewer than a majority of masters answering makes calls fail with
// ErrNoQuorum. Mutual exclusion rests on timing, as every lease-based
// lock's does: see "Quorum locks" in docs/operations.md for the rules of
// deployment (independent masters, an odd N, a delayed restart or
// appendfsync always, clocks that slew) and when to prefer New.
//
// NewQuorum fails with ErrInvalidOption for no masters, a nil client, an
// invalid option, WithReplicas (a quorum waits for no replicas), or the
// same server listed twice: two masters with one run_id or one boot id
// (the key <prefix>:boot, written once on each master). It asks every
// master at once, and waits for each until ctx ends or the call timeout
// passes; a master that has not answered by then is asked again before
// its first answer counts, and a master found then to be another one's
// twin never counts (its calls fail, and an error is logged). It logs a
// warning for an even N, which tolerates no more failures than N-1.
// Semaphore, RWMutex and MultiLock are not offered on a quorum Client:
// their handles fail with ErrInvalidOption. Inspect gives each master's
// view and the majority's; List names the locks of every master.
func NewQuorum(ctx context.Context, masters []redis.UniversalClient, opts ...Option) (*Client, error) {
	if ctx == nil {
		return nil, errNilContext
	}
	if len(masters) == 0 {
		return nil, fmt.Errorf("%w: NewQuorum needs at least one master", ErrInvalidOption)
	}
	rdbs := make([]fair.Redis, len(masters))
	for i, m := range masters {
		if isNil(m) {
			return nil, fmt.Errorf("%w: master %d is a nil redis client", ErrInvalidOption, i)
		}
		rdbs[i] = m
	}
	cfg := configure(opts)
	if cfg.replicas > 0 {
		cfg.invalid("WithReplicas does not apply to a quorum Client: its masters have no replicas to wait for")
	}
	if cfg.err != nil {
		return nil, cfg.err
	}
	tag := queue.NewTag()
	log := cfg.clientLogger(tag)
	events := newEventQueue(cfg.observer, cfg.observerQueue, log)
	qm, err := fair.NewQuorum(rdbs, fair.Config{
		WaiterTTL:   cfg.waiterTTL,
		CallTimeout: cfg.callTimeout,
		Heartbeat:   cfg.heartbeat,
		Logger:      log,
		Tag:         tag,
		Observe:     events.hook(),
		Prefix:      cfg.prefix,
	}, fair.QuorumConfig{Drift: cfg.drift})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidOption, err)
	}
	same, unanswered := qm.Check(ctx)
	if same != nil {
		_ = qm.Close()
		return nil, fmt.Errorf("%w: %w", ErrInvalidOption, same)
	}
	if unanswered != nil {
		log.Warn("fairlock: a quorum master could not be checked for duplicates yet; it is checked again before its first answer counts", "err", unanswered)
	}
	if len(masters)%2 == 0 {
		log.Warn("fairlock: a quorum of an even number of masters tolerates no more failures than one master fewer; use an odd number",
			"masters", len(masters))
	}
	return &Client{run: qm, events: events, cfg: cfg}, nil
}

// WithDriftFactor sets a quorum Client's clock drift factor: a hold
// counts for (1-f) of the time its masters keep it, less a few ms, so
// that clocks whose rates differ by less than f cannot make two holders.
// Default 0.01. f must be at least 0 and below 0.1; otherwise, or on a
// Client made by New, it fails with ErrInvalidOption.
func WithDriftFactor(f float64) Option {
	return clientOption(func(c *config) {
		if !(f >= 0 && f < 0.1) {
			c.invalid("drift factor %v, want at least 0 and below 0.1", f)
			return
		}
		c.drift, c.driftSet = f, true
	})
}

// errNotOnQuorum is the error of a handle a quorum Client does not offer.
func errNotOnQuorum(what string) error {
	return fmt.Errorf("%w: a quorum Client (NewQuorum) has no %s", ErrInvalidOption, what)
}

// closed reports whether the Client was closed.
func (c *Client) closed() bool { return c.run.Closed() }
