package notify

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock/fairlock/internal/errs"
)

// conn is one pub/sub connection of the hub, with the two goroutines that
// serve it: a writer that sends what the hub decided, in order, and a
// reader that routes what arrives, watches the connection's liveness and
// rebuilds it when it fails. A hub has one conn, or for a ring one per
// shard that has had waiters, or in Sharded mode one per cluster master
// that has had waiters since the last time its channels moved away.
type conn struct {
	key     *redis.Client      // its key in Hub.conns
	sub     Subscriber         // the client it subscribes through
	sharded bool               // SSUBSCRIBE, not SUBSCRIBE (Sharded mode); fixed
	ctx     context.Context    // every network call of the connection; cancelled when it retires or the hub closes
	cancel  context.CancelFunc // cancels ctx
	kick    chan struct{}      // capacity 1; wakes the writer after queue grows

	ps       *redis.PubSub   // guarded by Hub.mu; replaced only by rebuild
	retired  bool            // guarded by Hub.mu; set when the conn leaves Hub.conns, for good
	queue    []op            // guarded by Hub.mu; writes for the writer, in decision order
	awaiting []*confirmation // guarded by Hub.mu; PINGs queued on ps whose answer has not arrived, oldest first
	// rebuilding is guarded by Hub.mu. It is true from a rebuild until the
	// rebuild's last PING is answered: SUBSCRIBE acknowledgements are
	// expected then, and the answer signals every waiter anyway.
	rebuilding bool

	misses    []time.Time   // guarded by Hub.mu; recent missed hand-overs on ps (see missThreshold)
	refreshed time.Time     // guarded by Hub.mu; when Missed last forced a rebuild or regroup
	refreshes int           // guarded by Hub.mu; how many times Missed did
	refresh   *redis.PubSub // guarded by Hub.mu; the connection Missed or a primary move closed to have it rebuilt, until the reader sees it fail

	// For a failover client (see primary.go): the address ps was dialled
	// to ("" until known), when that dial started, and how many times a
	// dial of the client elsewhere made the hub rebuild ps. Guarded by
	// Hub.mu.
	addr   string
	dialed time.Time
	moves  int
}

// bounded returns the context of one network call of c: c's, with a
// deadline two heartbeats away (a second at least). A connection silent
// that long is taken for dead anyway; and a call that blocked longer (a
// dial whose handshake a stopped server never answers, with the client's
// ContextTimeoutEnabled and a long read timeout) would hold the
// connection's lock, and so Close, until the client's read timeout.
func (h *Hub) bounded(c *conn) (context.Context, context.CancelFunc) {
	return context.WithTimeout(c.ctx, max(2*h.heartbeat, time.Second))
}

// startLocked registers the connection ps of sub under key and starts its
// reader and writer. The connection itself is dialled by the first write.
func (h *Hub) startLocked(key *redis.Client, sub Subscriber, ps *redis.PubSub) *conn {
	c := &conn{key: key, sub: sub, sharded: h.mode == Sharded, kick: make(chan struct{}, 1), ps: ps}
	c.ctx, c.cancel = context.WithCancel(context.WithValue(h.ctx, dialKey{}, dialMark{h: h, c: c}))
	h.conns[key] = c
	if h.follow != nil {
		h.follow.startLocked()
	}
	h.wg.Go(func() { h.read(c, ps) })
	h.wg.Go(func() { h.write(c) })
	return c
}

// watchedLocked reports whether any channel with waiters is subscribed on
// c. Lingering channels do not count.
func (h *Hub) watchedLocked(c *conn) bool {
	for _, t := range h.topics.All() {
		if t.conn == c && t.waiters.Len() > 0 {
			return true
		}
	}
	return false
}

// rebuild replaces old, the failed connection of c, with a new one
// subscribed to every channel of c that has waiters, and closes old.
// Confirmations still outstanding on old are dropped: each topic gets a
// SUBSCRIBE and a confirming PING of its own on the new connection, so a
// channel Redis refuses fails alone. The last PING of the rebuild signals
// every waiter of c when answered.
//
// It returns nil when c has ended instead: Close started, or no connection
// could be opened, in which case c's channels fail and c retires.
func (h *Hub) rebuild(c *conn, old *redis.PubSub) *redis.PubSub {
	defer closePubSub(old)
	ps, err := openPubSub(h.ctx, c.sub, c.sharded)

	h.mu.Lock()
	if h.closed || c.retired {
		h.mu.Unlock()
		if ps != nil {
			closePubSub(ps)
		}
		return nil
	}
	if err != nil {
		h.log.Warn("fairlock: notify: cannot rebuild the pub/sub connection; its channels fail",
			"err", err)
		for _, t := range h.topics.All() {
			if t.conn == c {
				h.failLocked(t, fmt.Errorf("fairlock: notify: subscribing to %q: %w", t.name, err))
			}
		}
		h.retireLocked(c)
		h.mu.Unlock()
		return nil
	}
	c.ps = ps
	c.addr = "" // known once ps dials
	c.queue, c.awaiting = nil, nil
	c.misses = nil
	c.rebuilding = true
	for _, t := range h.topics.All() {
		if t.conn == c {
			h.queueSubscribeLocked(t)
		}
	}
	c.enqueueLocked(op{ps: ps, ping: true, payload: h.newPingLocked(c, &confirmation{rebuilt: true})})
	h.mu.Unlock()
	return ps
}

// rebuiltLocked ends c's rebuild: messages may have been lost while the old
// connection failed, so every waiter of c is signalled.
func (h *Hub) rebuiltLocked(c *conn) {
	c.rebuilding = false
	n := 0
	for _, t := range h.topics.All() {
		if t.conn == c {
			t.signalLocked()
			n++
		}
	}
	h.log.Info("fairlock: notify: pub/sub connection rebuilt", "channels", n)
}

// reroute moves each channel of c, whose connection failed, to the
// connection of its new shard if its shard has changed (a ring shard went
// down, the ring's shards were replaced, a cluster master failed over or
// handed its slots on). It does nothing unless the hub's client is a ring
// or the hub is in Sharded mode, where it first asks the cluster client to
// reload its map of the slots. Channels are otherwise only moved by a
// Watch of the channel, or in Sharded mode by a regroup.
func (h *Hub) reroute(c *conn) {
	if h.shards == nil && !c.sharded {
		return
	}
	if c.sharded {
		h.reloadSlots()
	}
	h.mu.Lock()
	var names []string
	for name, t := range h.topics.All() {
		if t.conn == c {
			names = append(names, name)
		}
	}
	h.mu.Unlock()

	n := 0
	for _, name := range names {
		key, err := h.shardFor(h.ctx, name)
		if err != nil || key == c.key {
			continue
		}
		dst, err := h.lockConn(key)
		if err != nil {
			continue // closed, or the shard's connection could not be opened: keep the channel here
		}
		var emptied *redis.PubSub
		if t := h.topics.Get(name); t != nil && t.conn == c {
			_, emptied = h.moveLocked(t, dst)
			n++
		}
		h.mu.Unlock()
		closeIfAny(emptied)
	}
	if n > 0 {
		h.log.Info("fairlock: notify: channels of a failed connection moved to other shards",
			"channels", n)
	}
}

// retire ends c when it failed and no channel with waiters is subscribed on
// it: rather than rebuilding a connection nobody needs (whose shard may be
// gone for good), the hub closes it, and a later Watch opens a new one. It
// reports whether c retired.
func (h *Hub) retire(c *conn, ps *redis.PubSub) bool {
	h.mu.Lock()
	if h.watchedLocked(c) {
		h.mu.Unlock()
		return false
	}
	h.retireLocked(c)
	h.mu.Unlock()
	closePubSub(ps)
	h.log.Debug("fairlock: notify: closed a failed pub/sub connection that no channel needs")
	return true
}

// retireLocked takes c out of the hub and stops its writer; its reader
// stops on its own.
func (h *Hub) retireLocked(c *conn) {
	c.retired = true
	for name, t := range h.topics.All() {
		if t.conn == c && t.waiters.Len() == 0 {
			h.topics.Delete(name) // lingering: nobody needs it any more
		}
	}
	if h.conns[c.key] == c {
		delete(h.conns, c.key)
	}
	c.queue, c.awaiting = nil, nil
	c.cancel()
}

// lockConn locks h.mu and returns the connection for key, opening it if
// there is none. On error, which is errs.ErrClosed once Close has started or the
// error of opening the connection, h.mu is not held.
//
// Opening calls into go-redis, so it happens with h.mu released: whatever
// go-redis does, the hub is never left locked.
func (h *Hub) lockConn(key *redis.Client) (*conn, error) {
	var sub Subscriber = h.rdb
	if key != nil {
		sub = key
	}
	h.mu.Lock()
	for {
		if h.closed {
			h.mu.Unlock()
			return nil, errs.ErrClosed
		}
		if c := h.conns[key]; c != nil {
			return c, nil
		}
		sharded := h.mode == Sharded
		h.mu.Unlock()
		ps, err := openPubSub(h.ctx, sub, sharded)
		if err != nil {
			return nil, err
		}
		h.mu.Lock()
		if !h.closed && h.conns[key] == nil {
			return h.startLocked(key, sub, ps), nil
		}
		// Close started, or another Watch opened the connection first.
		h.mu.Unlock()
		closePubSub(ps)
		h.mu.Lock()
	}
}

// newPingLocked registers k as awaited on c under a fresh PING payload and
// returns the payload.
func (h *Hub) newPingLocked(c *conn, k *confirmation) string {
	h.pingSeq++
	k.payload = "fairlock-notify-" + strconv.FormatUint(h.pingSeq, 10)
	c.awaiting = append(c.awaiting, k)
	return k.payload
}

// shardSubscriber is a client that can open a sharded pub/sub
// connection: the *redis.Client of a cluster node.
type shardSubscriber interface {
	SSubscribe(ctx context.Context, channels ...string) *redis.PubSub
}

var _ shardSubscriber = (*redis.Client)(nil)

// openPubSub returns a pub/sub connection object of sub, subscribed to
// nothing yet: it dials at its first write. For a sharded connection sub
// is the client of one cluster master. sub is never a *redis.Ring, whose
// Subscribe panics without a channel (the hub opens the ring's shard
// clients instead); a panic of any other Subscriber becomes an error.
func openPubSub(ctx context.Context, sub Subscriber, sharded bool) (*redis.PubSub, error) {
	var ps *redis.PubSub
	err := guard("Subscribe", func() error {
		if !sharded {
			ps = sub.Subscribe(ctx)
			return nil
		}
		s, ok := sub.(shardSubscriber)
		if !ok {
			return fmt.Errorf("%T cannot open a sharded subscription", sub)
		}
		ps = s.SSubscribe(ctx)
		return nil
	})
	if err == nil && ps == nil {
		err = errors.New("subscribe returned no pub/sub connection")
	}
	if err != nil {
		return nil, fmt.Errorf("opening a pub/sub connection: %w", err)
	}
	return ps, nil
}

// closePubSub closes ps, ignoring its error and any panic.
func closePubSub(ps *redis.PubSub) {
	_ = guard("PubSub.Close", ps.Close)
}

// closeIfAny closes ps unless it is nil.
func closeIfAny(ps *redis.PubSub) {
	if ps != nil {
		closePubSub(ps)
	}
}

// guard calls f, which calls into go-redis, and turns a panic in it into an
// error. go-redis panics on some misuse instead of returning an error, and
// a panic must neither crash the process nor leave the hub half-changed.
func guard(what string, f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			if e, ok := r.(error); ok {
				err = fmt.Errorf("%s panicked: %w", what, e)
			} else {
				err = fmt.Errorf("%s panicked: %v", what, r)
			}
		}
	}()
	return f()
}
