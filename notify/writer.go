package notify

import (
	"errors"

	"github.com/redis/go-redis/v9"
)

// op is one write to the pub/sub connection.
//
// Every SUBSCRIBE, UNSUBSCRIBE and PING the hub sends goes through the
// writer goroutine, in the order the hub queued them under mu. That order is
// what makes confirmation sound: when a channel's last waiter stops and a
// new Watch of the same channel follows at once, Redis receives the
// UNSUBSCRIBE before the new SUBSCRIBE, and the new topic is confirmed only
// by the answer to its own PING, sent after its own SUBSCRIBE. It also means
// Stop never waits for the network.
type op struct {
	ps          *redis.PubSub // the connection the op was decided for; dropped if it was replaced
	subscribe   []string      // channels to SUBSCRIBE, first
	unsubscribe string        // channel to UNSUBSCRIBE, if not empty
	ping        bool          // send a PING after the subscription change
	payload     string        // the PING's payload; empty for a heartbeat
}

// enqueueLocked queues o for the writer and wakes it.
func (h *Hub) enqueueLocked(o op) {
	h.queue = append(h.queue, o)
	select {
	case h.kick <- struct{}{}:
	default:
	}
}

// enqueue queues o for the writer and wakes it, unless the hub is closed.
func (h *Hub) enqueue(o op) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.closed {
		h.enqueueLocked(o)
	}
}

// write is the writer goroutine: it performs queued ops in order until
// Close.
func (h *Hub) write() {
	for {
		select {
		case <-h.ctx.Done():
			return
		case <-h.kick:
		}
		for {
			h.mu.Lock()
			batch := h.queue
			h.queue = nil
			h.mu.Unlock()
			if len(batch) == 0 {
				break
			}
			for _, o := range batch {
				if h.ctx.Err() != nil {
					return
				}
				h.perform(o)
			}
		}
	}
}

// perform sends one op. An op decided for a connection that has since been
// replaced is dropped: the rebuild re-subscribed every channel that still
// had waiters, and its PING confirms them. If a write fails, the connection
// can no longer be trusted to carry what the hub asked for, so perform
// closes it; the reader notices and rebuilds.
func (h *Hub) perform(o op) {
	h.mu.Lock()
	current := o.ps == h.ps && !h.closed
	h.mu.Unlock()
	if !current {
		return
	}

	var err error
	switch {
	case len(o.subscribe) > 0:
		err = o.ps.Subscribe(h.ctx, o.subscribe...)
	case o.unsubscribe != "":
		err = o.ps.Unsubscribe(h.ctx, o.unsubscribe)
	}
	if err == nil && o.ping {
		if o.payload == "" {
			err = o.ps.Ping(h.ctx)
		} else {
			err = o.ps.Ping(h.ctx, o.payload)
		}
	}
	if err == nil || h.ctx.Err() != nil || errors.Is(err, redis.ErrClosed) {
		return
	}

	h.mu.Lock()
	current = o.ps == h.ps && !h.closed
	h.mu.Unlock()
	if current {
		h.log.Warn("fairlock: notify: write to the pub/sub connection failed; rebuilding it",
			"error", err)
		_ = o.ps.Close()
	}
}
