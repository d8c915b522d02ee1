package notify

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// defaultHeartbeat is the heartbeat used when Options.Heartbeat is not
// positive.
const defaultHeartbeat = time.Second

// Subscriber is the part of a Redis client the hub needs: a way to open a
// pub/sub connection.
type Subscriber interface {
	Subscribe(ctx context.Context, channels ...string) *redis.PubSub
}

var (
	_ Subscriber = (*redis.Client)(nil)
	_ Subscriber = (*redis.ClusterClient)(nil)
	_ Subscriber = redis.UniversalClient(nil)
)

// Options configures a Hub. The zero value is ready to use.
type Options struct {
	// Logger receives connection trouble at Warn, recoveries at Info and
	// malformed payloads at Debug. Nil discards everything.
	Logger *slog.Logger
	// Heartbeat is how long the connection may stay silent before the hub
	// sends a PING; after a second silent heartbeat the hub rebuilds the
	// connection. Zero or negative means one second.
	Heartbeat time.Duration
}

// Hub shares one pub/sub connection between all the waiters of a fairlock
// client. Create it with New and stop it with Close.
type Hub struct {
	rdb       Subscriber
	log       *slog.Logger
	heartbeat time.Duration

	ctx       context.Context    // every network call of the hub; cancelled by Close
	cancel    context.CancelFunc // cancels ctx
	done      chan struct{}      // closed when Close starts
	kick      chan struct{}      // capacity 1; wakes the writer after queue grows
	wg        sync.WaitGroup     // the reader and the writer
	closeOnce sync.Once

	mu      sync.Mutex
	closed  bool                     // guarded by mu; set when Close starts
	ps      *redis.PubSub            // guarded by mu; nil until the first Watch, then replaced only by rebuild
	topics  map[string]*topic        // guarded by mu; channel -> its subscription, present while it has waiters
	pings   map[string]*confirmation // guarded by mu; payload -> what its PING answer confirms
	pingSeq uint64                   // guarded by mu; makes confirmation payloads unique
	queue   []op                     // guarded by mu; writes for the writer, in decision order
	// rebuilding is guarded by mu. It is true from a rebuild until the
	// rebuild's PING is answered: SUBSCRIBE acknowledgements are expected
	// then, and the answer signals every waiter anyway.
	rebuilding bool
}

// topic is the subscription of one channel. A topic is created by the first
// Watch of its channel and dropped when its last waiter stops; a later Watch
// of the same channel creates a new topic, so confirmations never outlive
// the subscription they were for.
type topic struct {
	name      string
	waiters   map[string]*Waiter // guarded by Hub.mu; id -> waiter
	confirmed bool               // guarded by Hub.mu; true once ready is closed
	ready     chan struct{}      // closed when Redis has confirmed the SUBSCRIBE
}

// confirmation is what the answer to one PING confirms.
type confirmation struct {
	topics  []*topic
	rebuilt bool // the PING follows a rebuild: signal every waiter when answered
}

// New returns a hub that subscribes through rdb. It opens nothing: the
// connection and the hub's goroutines start at the first Watch.
func New(rdb Subscriber, opts Options) *Hub {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	hb := opts.Heartbeat
	if hb <= 0 {
		hb = defaultHeartbeat
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Hub{
		rdb:       rdb,
		log:       log,
		heartbeat: hb,
		ctx:       ctx,
		cancel:    cancel,
		done:      make(chan struct{}),
		kick:      make(chan struct{}, 1),
		topics:    make(map[string]*topic),
		pings:     make(map[string]*confirmation),
	}
}

// Watch registers a waiter with the given id on channel and returns once
// Redis has confirmed the channel's subscription, so that anything
// published on channel afterwards reaches the waiter. Ids must be unique
// among the waiters of a channel. The caller must Stop the waiter.
//
// If ctx ends first, Watch unregisters the waiter and returns an error
// wrapping ctx.Err(). Once Close has started it returns ErrClosed.
func (h *Hub) Watch(ctx context.Context, channel, id string) (*Waiter, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("fairlock: notify: watch %q: %w", channel, err)
	}
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil, ErrClosed
	}
	t := h.topics[channel]
	if t != nil {
		if _, dup := t.waiters[id]; dup {
			h.mu.Unlock()
			return nil, fmt.Errorf("fairlock: notify: id %q already watches channel %q", id, channel)
		}
	} else {
		h.startLocked()
		t = &topic{name: channel, waiters: make(map[string]*Waiter), ready: make(chan struct{})}
		h.topics[channel] = t
		h.enqueueLocked(op{
			ps:        h.ps,
			subscribe: []string{channel},
			ping:      true,
			payload:   h.newPingLocked(&confirmation{topics: []*topic{t}}),
		})
	}
	w := &Waiter{hub: h, topic: t, id: id, c: make(chan struct{}, 1)}
	t.waiters[id] = w
	h.mu.Unlock()

	select {
	case <-t.ready:
		return w, nil
	case <-ctx.Done():
		w.Stop()
		return nil, fmt.Errorf("fairlock: notify: watch %q: %w", channel, ctx.Err())
	case <-h.done:
		w.Stop()
		return nil, ErrClosed
	}
}

// Done returns a channel that is closed when Close starts.
func (h *Hub) Done() <-chan struct{} {
	return h.done
}

// Close closes the connection, stops the hub's goroutines and waits for
// them. Watch calls still waiting, and later ones, return ErrClosed at once;
// waiters receive no further signals. Close is idempotent and always returns
// nil. It returns promptly, except while go-redis is dialling: a connection
// handshake cannot be interrupted, so Close may wait for it, at most for the
// client's dial and read timeouts.
func (h *Hub) Close() error {
	h.closeOnce.Do(func() {
		h.mu.Lock()
		h.closed = true
		close(h.done)
		ps := h.ps
		h.queue = nil
		clear(h.pings)
		h.mu.Unlock()

		h.cancel()
		if ps != nil {
			_ = ps.Close()
		}
		h.wg.Wait()
	})
	return nil
}

// startLocked opens the pub/sub connection object and starts the reader and
// the writer, once. The connection itself is dialled by the first write.
func (h *Hub) startLocked() {
	if h.ps != nil {
		return
	}
	h.ps = h.rdb.Subscribe(h.ctx)
	ps := h.ps
	h.wg.Go(func() { h.read(ps) })
	h.wg.Go(h.write)
}

// newPingLocked registers c under a fresh PING payload and returns the
// payload.
func (h *Hub) newPingLocked(c *confirmation) string {
	h.pingSeq++
	payload := "fairlock-notify-" + strconv.FormatUint(h.pingSeq, 10)
	h.pings[payload] = c
	return payload
}

// confirmLocked marks t as subscribed and releases the Watch calls waiting
// for it.
func (t *topic) confirmLocked() {
	if !t.confirmed {
		t.confirmed = true
		close(t.ready)
	}
}

// signalLocked signals every waiter of t.
func (t *topic) signalLocked() {
	for _, w := range t.waiters {
		w.signal()
	}
}
