package notify

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock/fairlock/internal/pause"
	"github.com/fairlock/fairlock/internal/shortly"
)

// Back-off between attempts while Redis cannot be reached.
const (
	minBackoff = 50 * time.Millisecond
	maxBackoff = time.Second
)

// read is the reader goroutine of c, the only caller of ReceiveTimeout on
// its connection. It routes what arrives on ps and watches the
// connection's liveness. When the connection fails, it moves the channels
// whose shard changed to their new shard, then closes the connection if no
// channel needs it any more, or else replaces it; it runs until c retires
// or the hub closes.
func (h *Hub) read(c *conn, ps *redis.PubSub) {
	backoff := minBackoff
	pinged := false  // a heartbeat PING is queued and nothing has arrived since
	failing := false // the last receive failed with something other than a timeout
	for {
		rctx, cancel := h.bounded(c)
		msg, err := receive(rctx, ps, h.heartbeat)
		cancel()
		if c.ctx.Err() != nil {
			return
		}
		switch {
		case err != nil && h.refreshing(c, ps):
			// Missed closed it: hand-overs were not pushed on it.
			pinged, failing, backoff = false, false, minBackoff
		case err == nil:
			pinged, failing, backoff = false, false, minBackoff
			h.dispatch(c, msg)
			continue
		case isReply(err) && h.refusedReply(c, err):
			// An error reply is an answer, not a broken connection.
			pinged, failing, backoff = false, false, minBackoff
			continue
		case isTimeout(err):
			if !pinged {
				pinged = true
				h.enqueue(c, op{ps: ps, ping: true})
				continue
			}
			h.log.Debug("fairlock: notify: no data on the pub/sub connection for two heartbeats; rebuilding it",
				"heartbeat", h.heartbeat)
			h.failed(fmt.Errorf("fairlock: notify: no data on the pub/sub connection for two heartbeats (%v): %w", h.heartbeat, err))
		default:
			// An error reply nothing awaits is most likely the refused
			// handshake of a new connection (or a refused UNSUBSCRIBE):
			// a failure like any other, and a refusal to report. A
			// connection that fails once otherwise (a server that closed
			// it) is rebuilt without a word above Debug: Failed is told
			// only when its rebuild fails too.
			switch {
			case failing:
				h.log.Debug("fairlock: notify: pub/sub connection still failing",
					"err", err, "backoff", backoff)
				h.failed(err)
			case isReply(err):
				h.log.Warn("fairlock: notify: Redis refused a command on the pub/sub connection; rebuilding it",
					"err", err, "backoff", backoff)
			default:
				h.log.Debug("fairlock: notify: pub/sub connection failed; rebuilding it",
					"err", err, "backoff", backoff)
			}
			failing = true
			if !pause.For(c.ctx, backoff) {
				return
			}
			backoff = min(2*backoff, maxBackoff)
		}
		h.reroute(c)
		if h.retire(c, ps) {
			return
		}
		if ps = h.rebuild(c, ps); ps == nil {
			return
		}
		pinged = false
	}
}

// failed tells Options.Failed that a connection failed with err.
func (h *Hub) failed(err error) {
	if h.onFailed != nil {
		h.onFailed(err)
	}
}

// receive waits up to timeout for the next thing to arrive on ps.
func receive(ctx context.Context, ps *redis.PubSub, timeout time.Duration) (msg any, err error) {
	err = guard("PubSub.ReceiveTimeout", func() (err error) {
		msg, err = ps.ReceiveTimeout(ctx, timeout)
		return err
	})
	return msg, err
}

// isTimeout reports whether err is a read timeout, which ReceiveTimeout
// returns when nothing arrived within the heartbeat.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// isReply reports whether err is an error reply of the server. go-redis
// returns one from ReceiveTimeout, in RESP2 and RESP3 alike, when the
// server answers a command on the connection with an error, and keeps the
// connection.
func isReply(err error) bool {
	var re redis.Error
	return errors.As(err, &re)
}

// dispatch handles one thing received on c.
func (h *Hub) dispatch(c *conn, msg any) {
	switch m := msg.(type) {
	case *redis.Message:
		h.route(m.Channel, m.Payload)
	case *redis.Subscription:
		switch m.Kind {
		case "subscribe", "ssubscribe":
			h.resubscribed(c, m.Channel)
		case "sunsubscribe":
			h.sunsubscribed(c, m.Channel)
		}
	case *redis.Pong:
		h.confirm(c, m.Payload)
	}
}

// resubscribed handles the server's acknowledgement of a SUBSCRIBE. For a
// channel the hub already considered subscribed, it means go-redis
// reconnected and re-subscribed by itself: messages published in between
// were lost, so every waiter of the channel is signalled.
func (h *Hub) resubscribed(c *conn, channel string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	t := h.topics.Get(channel)
	if t == nil || t.conn != c || t.state != confirmed || c.rebuilding {
		return
	}
	h.log.Debug("fairlock: notify: channel re-subscribed; signalling its waiters",
		"channel", channel)
	t.signalLocked()
}

// rebuilt tells Options.Rebuilt, outside the hub's lock, that a rebuild
// of a connection ended.
func (h *Hub) rebuilt(ended bool) {
	if ended && h.onRebuilt != nil {
		h.onRebuilt()
	}
}

// refusedReply is refused, followed by rebuilt.
func (h *Hub) refusedReply(c *conn, reply error) bool {
	expected, ended := h.refused(c, reply)
	h.rebuilt(ended)
	return expected
}

// confirm handles the answer to a PING on c (see confirmed), then tells
// Options.Rebuilt when it ended a rebuild.
func (h *Hub) confirm(c *conn, payload string) {
	h.rebuilt(h.confirmed(c, payload))
}

// confirmed handles the answer to a PING on c, and reports whether it
// ended a rebuild of c. If it answers a confirmation
// PING, every SUBSCRIBE sent before it has been processed. Redis answers
// in order, so the confirmation PINGs queued before it were answered too,
// or their answers were lost on a connection go-redis replaced by itself,
// re-subscribing every channel first; either way they are settled with it.
func (h *Hub) confirmed(c *conn, payload string) (ended bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	i := slices.IndexFunc(c.awaiting, func(k *confirmation) bool { return k.payload == payload })
	if i < 0 {
		return false
	}
	answered := c.awaiting[:i+1]
	c.awaiting = c.awaiting[i+1:]
	for _, k := range answered {
		if k.topic != nil {
			h.confirmLocked(k.topic)
		}
		if k.rebuilt {
			h.rebuiltLocked(c)
			ended = true
		}
	}
	return ended
}

// refused handles an error reply on c and reports whether it was expected,
// and whether it ended a rebuild of c.
//
// The writer sends each SUBSCRIBE followed by its confirmation PING (in
// Sharded mode each SUNSUBSCRIBE too), and Redis answers in order, so an
// error reply that arrives while a confirmation PING is unanswered is the
// answer to the command queued just before the oldest such PING.
//
// For a SUBSCRIBE, Redis refused that subscription (an ACL user without
// access to the channel gets NOPERM): the topic fails and its Watch calls
// return the reply. In Sharded mode a reply that says the slot is served
// elsewhere or not at all (MOVED, ASK, TRYAGAIN, CLUSTERDOWN) regroups the
// channel instead. A refused SUNSUBSCRIBE (MOVED: the master no longer
// serves the slot, so it holds no subscription of ours there) needs
// nothing. The connection itself is fine, and Redis still answers the
// PING, which then confirms nothing.
//
// A SUBSCRIBE refused by a server that says it will be ready shortly (it
// is loading its data set, say: see shortly) is not expected: the reader
// rebuilds the connection after its back-off, and the rebuild subscribes
// the channel again.
func (h *Hub) refused(c *conn, reply error) (expected, ended bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(c.awaiting) == 0 {
		return false, false
	}
	k := c.awaiting[0]
	if k.topic != nil && shortly.Reply(reply) && !(c.sharded && elsewhere(reply)) {
		return false, false
	}
	c.awaiting = c.awaiting[1:]
	switch t := k.topic; {
	case k.unsub != "":
		h.log.Debug("fairlock: notify: SUNSUBSCRIBE refused; the master does not serve the channel",
			"channel", k.unsub, "err", reply)
	case t != nil && c.sharded && elsewhere(reply):
		h.log.Debug("fairlock: notify: SSUBSCRIBE refused; the channel's slot is served elsewhere",
			"channel", t.name, "err", reply)
		h.regroupLocked(t)
	case t != nil:
		h.log.Debug("fairlock: notify: Redis refused a subscription",
			"channel", t.name, "err", reply)
		h.failLocked(t, refusedError(t.name, reply))
	}
	if k.rebuilt {
		h.rebuiltLocked(c)
		ended = true
	}
	return true, ended
}
