package notify

import (
	"errors"
	"net"
	"time"

	"github.com/redis/go-redis/v9"
)

// Back-off between attempts while Redis cannot be reached.
const (
	minBackoff = 50 * time.Millisecond
	maxBackoff = time.Second
)

// read is the reader goroutine, the only caller of ReceiveTimeout. It routes
// what arrives on ps, watches the connection's liveness and replaces the
// connection when it fails, until Close.
func (h *Hub) read(ps *redis.PubSub) {
	backoff := minBackoff
	pinged := false  // a heartbeat PING is queued and nothing has arrived since
	failing := false // the last receive failed with something other than a timeout
	for {
		msg, err := ps.ReceiveTimeout(h.ctx, h.heartbeat)
		if h.ctx.Err() != nil {
			return
		}
		switch {
		case err == nil:
			pinged, failing, backoff = false, false, minBackoff
			h.dispatch(msg)
			continue
		case isTimeout(err):
			if !pinged {
				pinged = true
				h.enqueue(op{ps: ps, ping: true})
				continue
			}
			h.log.Warn("fairlock: notify: no data on the pub/sub connection for two heartbeats; rebuilding it",
				"heartbeat", h.heartbeat)
		default:
			if failing {
				h.log.Debug("fairlock: notify: pub/sub connection still failing",
					"error", err, "backoff", backoff)
			} else {
				h.log.Warn("fairlock: notify: pub/sub connection failed; rebuilding it",
					"error", err, "backoff", backoff)
			}
			failing = true
			if !h.sleep(backoff) {
				return
			}
			backoff = min(2*backoff, maxBackoff)
		}
		if ps = h.rebuild(ps); ps == nil {
			return
		}
		pinged = false
	}
}

// isTimeout reports whether err is a read timeout, which ReceiveTimeout
// returns when nothing arrived within the heartbeat.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// sleep waits for d and reports false if Close started first.
func (h *Hub) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-h.done:
		return false
	}
}

// rebuild replaces old with a new pub/sub connection subscribed to every
// channel that has waiters, queues the PING that confirms them, and closes
// old. Confirmations still outstanding on old are dropped; the new PING
// covers their topics. It returns nil if Close has started.
func (h *Hub) rebuild(old *redis.PubSub) *redis.PubSub {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil
	}
	ps := h.rdb.Subscribe(h.ctx) // no channels: opens nothing yet
	h.ps = ps
	names := make([]string, 0, len(h.topics))
	topics := make([]*topic, 0, len(h.topics))
	for name, t := range h.topics {
		names = append(names, name)
		topics = append(topics, t)
	}
	clear(h.pings)
	h.queue = nil
	h.rebuilding = true
	h.enqueueLocked(op{
		ps:        ps,
		subscribe: names,
		ping:      true,
		payload:   h.newPingLocked(&confirmation{topics: topics, rebuilt: true}),
	})
	h.mu.Unlock()

	_ = old.Close()
	return ps
}

// dispatch handles one thing received from the connection.
func (h *Hub) dispatch(msg any) {
	switch m := msg.(type) {
	case *redis.Message:
		h.route(m.Channel, m.Payload)
	case *redis.Subscription:
		if m.Kind == "subscribe" {
			h.resubscribed(m.Channel)
		}
	case *redis.Pong:
		h.confirm(m.Payload)
	}
}

// resubscribed handles the server's acknowledgement of a SUBSCRIBE. For a
// channel the hub already considered subscribed, it means go-redis
// reconnected and re-subscribed by itself: messages published in between
// were lost, so every waiter of the channel is signalled.
func (h *Hub) resubscribed(channel string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	t := h.topics[channel]
	if t == nil || !t.confirmed || h.rebuilding {
		return
	}
	h.log.Debug("fairlock: notify: channel re-subscribed; signalling its waiters",
		"channel", channel)
	t.signalLocked()
}

// confirm handles the answer to a PING. If it answers a confirmation PING,
// every SUBSCRIBE sent before it has been processed: the topics it covers
// are confirmed, and after a rebuild every waiter is signalled, since
// messages may have been lost while the old connection failed.
func (h *Hub) confirm(payload string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := h.pings[payload]
	if c == nil {
		return
	}
	delete(h.pings, payload)
	for _, t := range c.topics {
		t.confirmLocked()
	}
	if c.rebuilt {
		h.rebuilding = false
		h.log.Info("fairlock: notify: pub/sub connection rebuilt",
			"channels", len(h.topics))
		for _, t := range h.topics {
			t.signalLocked()
		}
	}
}
