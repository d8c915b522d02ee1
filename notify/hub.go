package notify

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock/fairlock/internal/errs"
	"github.com/fairlock/fairlock/internal/shrink"
)

// defaultHeartbeat is the heartbeat used when Options.Heartbeat is not
// positive.
const defaultHeartbeat = time.Second

// Subscriber is the part of a Redis client the hub needs: a way to open a
// pub/sub connection. Every go-redis client satisfies it. When the client
// is also sharded the way a *redis.Ring is (it has GetShardClientForKey),
// the hub subscribes each channel on the shard that owns it.
type Subscriber interface {
	Subscribe(ctx context.Context, channels ...string) *redis.PubSub
}

// sharded is a client whose channels live on different servers, each
// reached through a client of its own: a *redis.Ring.
type sharded interface {
	GetShardClientForKey(key string) (*redis.Client, error)
}

// Cluster is a client of a Redis Cluster, which the hub needs for Sharded
// mode: it names the master that serves a channel's slot, and can be told
// that its map of the slots may be out of date. A *redis.ClusterClient is
// one.
type Cluster interface {
	MasterForKey(ctx context.Context, key string) (*redis.Client, error)
	ReloadState(ctx context.Context)
}

var (
	_ Subscriber = (*redis.Client)(nil)
	_ Subscriber = (*redis.ClusterClient)(nil)
	_ Subscriber = (*redis.Ring)(nil)
	_ Subscriber = redis.UniversalClient(nil)
	_ sharded    = (*redis.Ring)(nil)
	_ Cluster    = (*redis.ClusterClient)(nil)
)

// Mode is how the scripts publish wake messages, and so how the hub
// subscribes to hear them. Every client of one deployment must use the
// same mode: a subscriber of one kind hears nothing published the other
// way.
type Mode int

const (
	// Classic: the scripts PUBLISH, the hub SUBSCRIBEs: one connection
	// for a plain client (on a Redis Cluster, on whichever node go-redis
	// picks: the cluster broadcasts every PUBLISH to every node), one per
	// shard for a *redis.Ring.
	Classic Mode = iota
	// Sharded: the scripts SPUBLISH, the hub SSUBSCRIBEs each channel on
	// the master that serves its slot (Redis 7 sharded pub/sub), through
	// one connection per master that has waiters. It needs a client that
	// is a Cluster.
	Sharded
)

func (m Mode) String() string {
	if m == Sharded {
		return "sharded"
	}
	return "classic"
}

// Options configures a Hub. The zero value is ready to use.
type Options struct {
	// Logger receives what the hub cannot mend at Warn (a channel whose
	// subscription fails), recoveries at Info (a connection rebuilt), and
	// at Debug the failures it mends and malformed payloads: an outage is
	// told through Failed, to be logged once. Nil discards everything.
	Logger *slog.Logger
	// Heartbeat is how long a connection may stay silent before the hub
	// sends a PING; after a second silent heartbeat the hub rebuilds the
	// connection. Zero or negative means one second.
	Heartbeat time.Duration
	// Mode tells the hub how the scripts publish. The hub asks it at the
	// first Watch, outside its own lock, and keeps the first answer given
	// without an error; a Watch whose call fails asks again (every 50ms,
	// doubling up to 1s) until its context ends. Nil means Classic.
	// Sharded with a client that is no Cluster fails every Watch.
	Mode func(ctx context.Context) (Mode, error)
	// Moved, if set, is called when the hub sees the primary of a
	// failover client move (see primary.go). It must not block.
	Moved func()
	// Unclaimed, if set, is called with a grant message that names no
	// waiter of this hub (on a channel of its Client's own, a grant to a
	// waiter that stopped). It is called on the connection's reader and
	// must not block.
	Unclaimed func(channel, id string)
	// Rebuilt, if set, is called when a pub/sub connection of the hub was
	// rebuilt after it failed or went quiet, once its channels are
	// subscribed again (messages sent meanwhile may have been lost; the
	// hub has woken every waiter of them). It is called on the
	// connection's reader, outside the hub's lock, and must not block.
	Rebuilt func()
	// Failed, if set, is called with the error when a connection of the
	// hub fails while it is being rebuilt (a single failure that a
	// rebuild mends is not told), or goes silent for two heartbeats: Redis
	// may not be reached (the error says; an error reply says it was). It
	// is called on the connection's goroutines, outside the hub's lock,
	// and must not block.
	Failed func(err error)
	// Linger is how long a channel stays subscribed after its last
	// waiter stops, so that a Watch of a channel in steady use finds its
	// subscription confirmed and returns without a round trip (see
	// Subscribed). Zero or negative: it is unsubscribed at once.
	Linger time.Duration
}

// Hub shares pub/sub connections between all the waiters of a fairlock
// client: one connection, or for a *redis.Ring one per shard that has
// waiters. Create it with New and stop it with Close.
type Hub struct {
	rdb         Subscriber
	shards      sharded // rdb when it is sharded, else nil
	cluster     Cluster // rdb when it is a cluster client, else nil
	modeOf      func(context.Context) (Mode, error)
	log         *slog.Logger
	heartbeat   time.Duration
	onMoved     func()                   // Options.Moved
	onUnclaimed func(channel, id string) // Options.Unclaimed
	onRebuilt   func()                   // Options.Rebuilt
	onFailed    func(error)              // Options.Failed
	linger      time.Duration            // Options.Linger

	ctx       context.Context    // parent of every connection's context; cancelled by Close
	cancel    context.CancelFunc // cancels ctx
	done      chan struct{}      // closed when Close starts
	wg        sync.WaitGroup     // the reader and the writer of every connection
	closeOnce sync.Once

	mu     sync.Mutex
	closed bool // guarded by mu; set when Close starts
	// conns is guarded by mu: the live connections, by the shard client
	// they subscribe through, or under nil when rdb is not sharded.
	conns   map[*redis.Client]*conn
	topics  shrink.Map[string, *topic] // guarded by mu; channel -> its subscription, present while it has waiters or lingers
	pingSeq uint64                     // guarded by mu; makes confirmation payloads unique
	mode    Mode                       // guarded by mu; how the scripts publish, once modeSet
	modeSet bool                       // guarded by mu; mode is known, for good

	// regroups is guarded by mu: in Sharded mode, the channels whose
	// subscription a master dropped or refused (their slot moved), for
	// the regroup goroutine to subscribe again where they live now; nil
	// while there are none.
	regroups    map[string]regroup
	regrouper   bool          // guarded by mu; the regroup goroutine was started
	regroupKick chan struct{} // capacity 1; wakes the regroup goroutine

	// For a failover client (see primary.go), guarded by mu: the address
	// the client's own dials reached last, and when that dial started.
	primary   string
	primaryAt time.Time
	follow    *follower // for a failover client, else nil; fixed
}

// New returns a hub that subscribes through rdb. It opens nothing: a
// connection and its goroutines start at the first Watch that needs them.
func New(rdb Subscriber, opts Options) *Hub {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	hb := opts.Heartbeat
	if hb <= 0 {
		hb = defaultHeartbeat
	}
	shards, _ := rdb.(sharded)
	cluster, _ := rdb.(Cluster)
	ctx, cancel := context.WithCancel(context.Background())
	h := &Hub{
		rdb:         rdb,
		shards:      shards,
		cluster:     cluster,
		modeOf:      opts.Mode,
		log:         log,
		heartbeat:   hb,
		onMoved:     opts.Moved,
		onRebuilt:   opts.Rebuilt,
		onFailed:    opts.Failed,
		onUnclaimed: opts.Unclaimed,
		linger:      opts.Linger,
		ctx:         ctx,
		cancel:      cancel,
		done:        make(chan struct{}),
		conns:       make(map[*redis.Client]*conn),
		regroupKick: make(chan struct{}, 1),
	}
	if c, ok := FailsOver(rdb); ok {
		h.follow = newFollower(h, c)
		c.AddHook(primaryHook{h})
	}
	return h
}

// Watch registers a waiter with the given id on channel and returns once
// Redis has confirmed the channel's subscription, so that anything
// published on channel afterwards reaches the waiter. Ids must be unique
// among the waiters of a channel. The caller must Stop the waiter.
//
// If Redis refuses the subscription (an ACL user without access to the
// channel, say), Watch returns at once an error that names the channel and
// wraps the server's error reply, a redis.Error. If ctx ends first, Watch
// unregisters the waiter and returns an error wrapping ctx.Err(). Once
// Close has started it returns errs.ErrClosed.
func (h *Hub) Watch(ctx context.Context, channel, id string) (*Waiter, error) {
	w, ready, err := h.register(ctx, channel, id, nil)
	if err != nil {
		return nil, err
	}
	for {
		select {
		case <-ready:
		case <-ctx.Done():
			w.Stop()
			return nil, fmt.Errorf("fairlock: notify: watch %q: %w", channel, ctx.Err())
		case <-h.done:
			w.Stop()
			return nil, errs.ErrClosed
		}
		h.mu.Lock()
		now := w.topic // a new topic when the channel moved to another shard
		state, err := now.state, now.err
		ready = now.ready
		h.mu.Unlock()
		switch state {
		case confirmed:
			return w, nil
		case failed:
			w.Stop()
			return nil, err
		}
	}
}

// Listen registers id on channel as Watch does, but returns without
// waiting for Redis to confirm the subscription, and tells the caller by
// a call instead of a channel: fn is called for each message for id, each
// time messages may have been lost, and once when the subscription is
// confirmed if it was not yet when Listen registered (confirmed reports
// whether it was). fn runs under the hub's lock: it must not block nor
// call the hub. A subscription Redis refuses is not reported: fn is just
// never called for it. The caller must Stop the waiter.
func (h *Hub) Listen(ctx context.Context, channel, id string, fn func()) (w *Waiter, confirmed bool, err error) {
	w, _, err = h.register(ctx, channel, id, fn)
	if err != nil {
		return nil, false, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return w, !w.noteConfirm, nil
}

// register adds the waiter id of channel (told through fn when not nil,
// see Listen), subscribing the channel unless it is, and returns it with
// the channel closed when its topic settles.
func (h *Hub) register(ctx context.Context, channel, id string, fn func()) (*Waiter, <-chan struct{}, error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, fmt.Errorf("fairlock: notify: watch %q: %w", channel, err)
	}
	if err := h.learnMode(ctx); errors.Is(err, errs.ErrClosed) {
		return nil, nil, errs.ErrClosed
	} else if err != nil {
		return nil, nil, fmt.Errorf("fairlock: notify: watch %q: %w", channel, err)
	}
	key, err := h.shardFor(ctx, channel)
	if err != nil {
		return nil, nil, fmt.Errorf("fairlock: notify: watch %q: %w", channel, err)
	}
	c, err := h.lockConn(key)
	if errors.Is(err, errs.ErrClosed) {
		return nil, nil, errs.ErrClosed
	}
	if err != nil {
		return nil, nil, fmt.Errorf("fairlock: notify: watch %q: %w", channel, err)
	}
	t := h.topics.Get(channel)
	var emptied *redis.PubSub // a connection the move left without channels, to close
	if t != nil {
		if _, dup := t.waiters.Lookup(id); dup {
			h.mu.Unlock()
			return nil, nil, fmt.Errorf("fairlock: notify: id %q already watches channel %q", id, channel)
		}
		if t.conn != c {
			t, emptied = h.moveLocked(t, c)
		}
	} else {
		t = h.subscribeLocked(c, channel)
	}
	w := &Waiter{hub: h, topic: t, channel: channel, id: id, c: make(chan struct{}, 1), fn: fn}
	w.noteConfirm = fn != nil && (t.state != confirmed || t.stale)
	t.waiters.Set(id, w)
	ready := t.ready
	h.mu.Unlock()
	closeIfAny(emptied)
	return w, ready, nil
}

// Subscribed reports whether channel's subscription is confirmed at this
// moment, because the channel has waiters or lingers (Options.Linger), so
// that a Watch of it now would return without waiting for Redis (unless
// the channel must move to another shard first). It sends nothing.
func (h *Hub) Subscribed(channel string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	t := h.topics.Get(channel)
	return !h.closed && t != nil && t.state == confirmed && !t.stale
}

// Close closes every connection, stops the hub's goroutines and waits for
// them. Watch calls still waiting, and later ones, return errs.ErrClosed at once;
// waiters receive no further signals. Close is idempotent and always returns
// nil. It returns promptly, except while go-redis is dialling: a connection
// handshake cannot be interrupted, so Close may wait for it, at most for the
// client's dial and read timeouts.
func (h *Hub) Close() error {
	h.closeOnce.Do(func() {
		h.mu.Lock()
		h.closed = true
		close(h.done)
		open := make([]*redis.PubSub, 0, len(h.conns))
		for _, c := range h.conns {
			open = append(open, c.ps)
			c.queue, c.awaiting = nil, nil
		}
		for _, t := range h.topics.All() {
			if t.linger != nil {
				t.linger.Stop()
			}
		}
		h.mu.Unlock()

		h.cancel()
		for _, ps := range open {
			closePubSub(ps)
		}
		h.wg.Wait()
	})
	return nil
}

// shardFor returns the key in h.conns of the connection that serves
// channel: in Sharded mode the client of the master that serves its slot,
// when rdb is a ring the client of the shard that owns it, nil otherwise.
// It may call into go-redis, so h.mu must not be held.
func (h *Hub) shardFor(ctx context.Context, channel string) (*redis.Client, error) {
	if h.isSharded() {
		return h.masterFor(ctx, channel)
	}
	if h.shards == nil {
		return nil, nil
	}
	var shard *redis.Client
	err := guard("GetShardClientForKey", func() (err error) {
		shard, err = h.shards.GetShardClientForKey(channel)
		return err
	})
	if err == nil && shard == nil {
		err = errors.New("no shard owns the channel")
	}
	return shard, err
}
