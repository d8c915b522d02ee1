package notify

import (
	"errors"

	"github.com/redis/go-redis/v9"
)

// op is one write to a pub/sub connection.
//
// Every SUBSCRIBE, UNSUBSCRIBE and PING the hub sends on a connection goes
// through that connection's writer goroutine, in the order the hub queued
// them under its mutex. That order is what makes confirmation sound: when a
// channel's last waiter stops and a new Watch of the same channel follows
// at once, Redis receives the UNSUBSCRIBE before the new SUBSCRIBE, and the
// new topic is confirmed only by the answer to its own PING, sent after its
// own SUBSCRIBE; an error reply before that answer is the SUBSCRIBE's. It
// also means Stop never waits for the network.
type op struct {
	ps          *redis.PubSub // the connection the op was decided for; dropped if it was replaced
	subscribe   string        // channel to SUBSCRIBE (SSUBSCRIBE on a sharded conn), first, if not empty
	unsubscribe string        // channel to UNSUBSCRIBE (SUNSUBSCRIBE on a sharded conn), if not empty
	ping        bool          // send a PING after the subscription change
	payload     string        // the PING's payload; empty for a heartbeat
}

// enqueueLocked queues o for c's writer and wakes it, unless c has retired.
func (c *conn) enqueueLocked(o op) {
	if c.retired {
		return
	}
	c.queue = append(c.queue, o)
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// enqueue queues o for c's writer and wakes it, unless the hub is closed.
func (h *Hub) enqueue(c *conn, o op) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.closed {
		c.enqueueLocked(o)
	}
}

// write is the writer goroutine of c: it performs queued ops in order
// until c retires or the hub closes.
func (h *Hub) write(c *conn) {
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-c.kick:
		}
		for {
			h.mu.Lock()
			batch := c.queue
			c.queue = nil
			h.mu.Unlock()
			if len(batch) == 0 {
				break
			}
			for _, o := range batch {
				if c.ctx.Err() != nil {
					return
				}
				h.perform(c, o)
			}
		}
	}
}

// current reports whether ps is still c's connection.
func (h *Hub) current(c *conn, ps *redis.PubSub) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return ps == c.ps && !c.retired && !h.closed
}

// perform sends one op. An op decided for a connection that has since been
// replaced is dropped: the rebuild re-subscribed every channel that still
// had waiters, and its PINGs confirm them. If a write fails, the connection
// can no longer be trusted to carry what the hub asked for, so perform
// closes it; the reader notices and rebuilds.
func (h *Hub) perform(c *conn, o op) {
	if !h.current(c, o.ps) {
		return
	}
	ctx, cancel := h.bounded(c)
	defer cancel()
	err := guard("PubSub write", func() error {
		var err error
		switch {
		case o.subscribe != "" && c.sharded:
			err = o.ps.SSubscribe(ctx, o.subscribe)
		case o.subscribe != "":
			err = o.ps.Subscribe(ctx, o.subscribe)
		case o.unsubscribe != "" && c.sharded:
			err = o.ps.SUnsubscribe(ctx, o.unsubscribe)
		case o.unsubscribe != "":
			err = o.ps.Unsubscribe(ctx, o.unsubscribe)
		}
		if err == nil && o.ping {
			if o.payload == "" {
				err = o.ps.Ping(ctx)
			} else {
				err = o.ps.Ping(ctx, o.payload)
			}
		}
		return err
	})
	if err == nil || c.ctx.Err() != nil || errors.Is(err, redis.ErrClosed) {
		return
	}
	h.mu.Lock()
	current := o.ps == c.ps && !c.retired && !h.closed
	rebuilding := c.rebuilding
	h.mu.Unlock()
	if current {
		h.log.Debug("fairlock: notify: write to the pub/sub connection failed; rebuilding it",
			"err", err)
		if rebuilding {
			h.failed(err) // a rebuild cannot reach Redis
		}
		closePubSub(o.ps)
	}
}
