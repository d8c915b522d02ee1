package fair

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock/fairlock/lua"
	"github.com/fairlock/fairlock/notify"
	"github.com/fairlock/fairlock/queue"
)

// Redis is what the engine needs of a go-redis client.
type Redis interface {
	lua.Client
	HMGet(ctx context.Context, key string, fields ...string) *redis.SliceCmd
	Exists(ctx context.Context, keys ...string) *redis.IntCmd
	PTTL(ctx context.Context, key string) *redis.DurationCmd
	Subscribe(ctx context.Context, channels ...string) *redis.PubSub
	Info(ctx context.Context, sections ...string) *redis.StringCmd
	ConfigGet(ctx context.Context, parameter string) *redis.MapStringStringCmd
	Pipeline() redis.Pipeliner
	TxPipeline() redis.Pipeliner // Inspect
	// A Client's name (name.go).
	Set(ctx context.Context, key string, value any, expiration time.Duration) *redis.StatusCmd
	Del(ctx context.Context, keys ...string) *redis.IntCmd
	queue.Scanner // List
}

var _ Redis = (redis.UniversalClient)(nil)

// Config is the engine's configuration. The root package fills it from its
// options, which it validates for the user; NewEngine refuses a Config the
// engine cannot run with. A lease is not here: each Request carries its
// own.
type Config struct {
	WaiterTTL   time.Duration // how long a silent waiter keeps its place; positive
	CallTimeout time.Duration // bound of one state-changing call, run detached from the caller's context; positive
	Heartbeat   time.Duration // notify hub heartbeat; 0 or less: the hub's default
	// Logger receives every record of the engine and its hub, with the
	// attributes the records name (see log.go); the root package gives
	// it the Client's id and name. Nil: discard.
	Logger *slog.Logger
	// Tag, when not empty, is the engine's tag (see Engine.Tag), made by
	// queue.NewTag; "" draws a fresh one.
	Tag string
	// Replicas, when above 0, is how many replicas must acknowledge every
	// acquire and release script (WAIT, for at most ReplicaTimeout) for
	// the call to count. The client must then be a *redis.Client,
	// *redis.ClusterClient or *redis.Ring.
	Replicas       int
	ReplicaTimeout time.Duration // positive when Replicas is
	// Observe, if set, receives the events of every Lock call and hold
	// (see Event), with the context of the call (for a hold's events, a
	// context with the values of the call that took it). It is called on
	// the goroutine of the step it reports, so it must return at once
	// (the root package's queues the event for its Observer).
	Observe func(ctx context.Context, e Event)
	// Name, when not empty, is written under the engine's tag in the key
	// <Prefix>:client:<tag> while the engine runs (see name.go), for
	// Inspect to show. Prefix is the Client's key prefix; set with Name.
	Name   string
	Prefix string
}

// errBadConfig is NewEngine's error for a Config it cannot run with.
var errBadConfig = errors.New("fairlock: invalid engine configuration")

// check returns errBadConfig, wrapped with the reason, for a Config the
// engine cannot run with.
func (c Config) check() error {
	switch {
	case c.WaiterTTL <= 0:
		return fmt.Errorf("%w: WaiterTTL %v, want a positive duration", errBadConfig, c.WaiterTTL)
	case c.CallTimeout <= 0:
		return fmt.Errorf("%w: CallTimeout %v, want a positive duration", errBadConfig, c.CallTimeout)
	case c.Replicas < 0:
		return fmt.Errorf("%w: Replicas %d, want 0 or more", errBadConfig, c.Replicas)
	case c.Replicas > 0 && c.ReplicaTimeout <= 0:
		return fmt.Errorf("%w: ReplicaTimeout %v with %d replicas, want a positive duration", errBadConfig, c.ReplicaTimeout, c.Replicas)
	case c.Name != "" && c.Prefix == "":
		return fmt.Errorf("%w: Name %q without a Prefix", errBadConfig, c.Name)
	}
	return nil
}

// Engine runs the locks of one fairlock Client: the scripts, the notify
// hub, and the goroutines that keep holds alive. Its methods are safe for
// concurrent use.
type Engine struct {
	lifecycle[*Hold] // calls in flight, goroutines, live holds, Close's bound

	rdb Redis
	// runner sends the scripts' calls: by FCALL of the library where
	// the server runs functions, else by EVALSHA.
	runner lua.Runner
	cfg    Config
	log    *slog.Logger
	hub    *notify.Hub
	// tag ends the waiter id of every entry of this engine's waiters, so
	// that hand-overs to them are published on the engine's own wake
	// channel of each lock (queue.Keys.ClientWake) and reach no other
	// Client.
	tag    string
	topo   *topology    // asks a cluster client for a fresh slot map after failures
	audit  *audit       // sends again the releases a failover undid
	dog    *watchdog    // renews the leases of every hold
	repl   *replication // nil: no waiting for replicas
	naming *naming      // nil: the engine has no name
	reach  *reach       // whether Redis answers, for the log (see reach.go)

	checking shared[struct{}] // the server check, while it runs
	checked  atomic.Bool      // a definitive server check ran; set after checkErr
	checkErr error            // its verdict; written by the check that runs, before checked

	wake     atomic.Pointer[wake] // how wake messages travel, once decided (see wakeMode); never changes after
	deciding shared[*wake]        // wakeMode's question to the server, while it runs
	layout   layout               // the layout of the prefix's keys (see layout.go)
	// inline says that rdb bounds each call by its context's deadline
	// (go-redis's ContextTimeoutEnabled), so that a Lock whose context
	// has one runs its calls on the caller's goroutine (see callInline).
	inline bool
}

// honoursDeadlines reports whether rdb bounds each call's reads and
// writes by its context's deadline: go-redis's ContextTimeoutEnabled, for
// every kind of client. A client of another kind is taken not to.
func honoursDeadlines(rdb Redis) bool {
	switch c := rdb.(type) {
	case *redis.Client:
		return c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return c.Options().ContextTimeoutEnabled
	case *redis.Ring:
		return c.Options().ContextTimeoutEnabled
	}
	return false
}

// subscriptionLinger is how long a lock's channel stays subscribed after
// the last waiter of this engine stopped: a Lock meanwhile finds the lock
// contended and queues with one call (see Mutex.take).
const subscriptionLinger = time.Second

// NewEngine returns an engine over rdb. It opens no connection: the hub
// subscribes at the first wait. A nil rdb or a Config the engine cannot
// run with (see Config) makes it fail.
func NewEngine(rdb Redis, cfg Config) (*Engine, error) {
	if rdb == nil {
		return nil, fmt.Errorf("%w: nil redis client", errBadConfig)
	}
	if err := cfg.check(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Tag == "" {
		cfg.Tag = queue.NewTag()
	}
	e := &Engine{
		rdb:    rdb,
		cfg:    cfg,
		log:    cfg.Logger,
		topo:   newTopology(rdb),
		tag:    cfg.Tag,
		inline: honoursDeadlines(rdb),
	}
	e.init(cfg.CallTimeout)
	e.runner.Detach = e.detached
	e.runner.Go = e.goUnlessClosed
	if cfg.Replicas > 0 {
		e.repl = &replication{n: cfg.Replicas, timeout: cfg.ReplicaTimeout}
	}
	if cfg.Name != "" {
		e.naming = newNaming(nameKey(cfg.Prefix, e.tag), cfg.Name)
	}
	e.reach = newReach(e.log, !e.OneServer(), e.rename)
	e.audit = newAudit(e, rdb)
	e.dog = newWatchdog(e)
	e.hub = notify.New(rdb, notify.Options{
		Logger:    cfg.Logger,
		Heartbeat: cfg.Heartbeat,
		Mode:      e.hubMode,
		Moved:     e.moved,
		Rebuilt:   e.rebuilt,
		Failed:    e.hubFailed,
		Unclaimed: e.audit.unclaimed,
		Linger:    subscriptionLinger,
	})
	return e, nil
}

// moved is told by the hub that the primary moved.
func (e *Engine) moved() {
	e.audit.moved()
	e.observe(context.Background(), Event{Kind: EventPrimaryMoved})
}

// Tag returns the engine's tag, which ends the waiter id of every entry
// of its Lock calls (see queue.TagOf).
func (e *Engine) Tag() string { return e.tag }

// rebuilt is told by the hub that a pub/sub connection was rebuilt:
// Redis answers (it may have restarted, and lost the Client's name).
func (e *Engine) rebuilt() {
	e.reach.answer(time.Now())
	e.rename()
	e.observe(context.Background(), Event{Kind: EventReconnected})
}

// hubFailed is told by the hub that a connection of its failed again
// while it was rebuilt, or went silent: unless err says otherwise (a
// refusal, the connection closed by the hub), Redis is not reached.
func (e *Engine) hubFailed(err error) {
	if unavailable(err) {
		e.reach.failure(time.Now(), err)
	}
}

// Mutex returns the lock with the given keys.
func (e *Engine) Mutex(keys queue.Keys) *Mutex {
	return &Mutex{e: e, keys: keys, wakeChannel: keys.ClientWake(e.tag), kind: kindMutex}
}

// Member returns the lock with the given keys as one of the locks a
// MultiLock takes: a Mutex, named so in the log.
func (e *Engine) Member(keys queue.Keys) *Mutex {
	l := e.Mutex(keys)
	l.kind = kindMultiLock
	return l
}

// Close stops the engine: waiting Lock calls return errs.ErrClosed and take
// themselves out of the queue, every hold's context is cancelled with
// errs.ErrClosed and its levels are released (all the holds' releases in
// pipelines, the watchdog renewing each hold until its release is
// answered: see closing.go), the hub is closed, and Close waits for every
// goroutine it started. All of that runs at once, and
// every call to Redis still out one call timeout after Close started is
// given up, so Close returns within about one call timeout even when Redis
// does not answer. It is idempotent.
func (e *Engine) Close() error {
	// Calls in flight return errs.ErrClosed at once (their cleanups go on
	// in the background); a re-entry that raced with the release of its
	// hold gives its level back itself (see Hold.Enter).
	e.shut(e.closeHolds, func() { _ = e.hub.Close() })
	return nil
}

// receiptTTL is how long a call's receipt outlives it: longer than any
// re-send of the call can arrive, since go-redis re-sends only while the
// call's context (bounded by CallTimeout) is alive.
func (e *Engine) receiptTTL() int64 {
	return (2 * e.cfg.CallTimeout).Milliseconds()
}
