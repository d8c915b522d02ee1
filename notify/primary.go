package notify

import (
	"context"
	"net"
	"time"

	"github.com/redis/go-redis/v9"
)

// A go-redis failover client (NewFailoverClient) dials whatever server
// Sentinel names as the primary at the time of the dial. When Sentinel
// switches to another primary, go-redis hears it on its own Sentinel
// subscription and drops its pooled connections to the old one, so its
// next command dials the new primary. It leaves pub/sub connections
// where they are, and after a graceful failover the old primary stays up
// and keeps them (Sentinel closes only normal clients there): the hub
// would listen to a server the scripts no longer publish on, and every
// hand-over would wait for a poll.
//
// So the hub watches the client's dials, through a dial hook: it learns
// the address each of its own connections reached, and when the client
// dials anywhere else for itself (a dial that started after the hub's
// connection was dialled, so that it knows of at least as recent a
// primary), the primary has moved, and the hub rebuilds the connection,
// which the client dials to the new primary. The rebuild signals every
// waiter, whose poll finds a hand-over that went out meanwhile.
//
// The hub also follows Sentinel itself (sentinel.go), which names the new
// primary whichever sentinel go-redis asks, and then moves the client's
// own connections too (redirect.go); the hook is where it does so.
//
// Options.Moved is told too, when the client's dials reach another
// address than before or than one of the hub's connections.
//
// The hook stays on the client after Close, and does nothing then.

// dialKey marks the contexts of a hub's own network calls, and with them
// their dials: the value is a dialMark.
type dialKey struct{}

// dialMark names the hub whose dial it is, and its connection c (nil for
// the subscription to Sentinel's hellos). Several hubs can hook one
// client: each ignores the others' dials.
type dialMark struct {
	h *Hub
	c *conn
}

// FailsOver reports whether rdb is a go-redis failover client, and returns
// it as the *redis.Client it is.
func FailsOver(rdb any) (*redis.Client, bool) {
	c, ok := rdb.(*redis.Client)
	if !ok {
		return nil, false
	}
	return c, c.Options().Addr == "FailoverClient" // how go-redis names its failover client
}

// primaryHook is the dial hook of a failover client's hub.
type primaryHook struct{ h *Hub }

func (p primaryHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		started := time.Now()
		nc, err := p.h.follow.dial(ctx, next, network, addr)
		if err != nil || nc == nil || nc.RemoteAddr() == nil {
			return nc, err
		}
		p.h.dialed(ctx, started, nc.RemoteAddr().String())
		return p.h.follow.track(ctx, nc), nil
	}
}

func (p primaryHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (p primaryHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// dialed notes that a dial started at started reached addr: a dial of one
// of the hub's connections when ctx says so, else one of the client's own.
func (h *Hub) dialed(ctx context.Context, started time.Time, addr string) {
	mark, marked := ctx.Value(dialKey{}).(dialMark)
	if marked && mark.h != h {
		return // another hub's
	}
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return
	}
	if marked {
		if c := mark.c; c != nil && !started.Before(c.dialed) {
			c.addr, c.dialed = addr, started
		}
		h.mu.Unlock()
		return
	}
	changed := h.primary != "" && h.primary != addr && !started.Before(h.primaryAt)
	if !started.Before(h.primaryAt) {
		h.primary, h.primaryAt = addr, started
	}
	h.mu.Unlock()
	if moved := h.moveConns(addr, started); (changed || moved) && h.onMoved != nil {
		h.onMoved()
	}
}

// moveConns rebuilds every connection of the hub that a dial started
// before started took to another address than primary, and reports
// whether there was one.
func (h *Hub) moveConns(primary string, started time.Time) bool {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return false
	}
	var moved []*redis.PubSub
	for _, c := range h.conns {
		if c.sharded || c.retired || c.ps == nil || c.refresh != nil ||
			c.addr == "" || c.addr == primary || started.Before(c.dialed) {
			continue
		}
		c.refresh = c.ps
		c.moves++
		moved = append(moved, c.ps)
	}
	h.mu.Unlock()
	for _, ps := range moved {
		h.log.Info("fairlock: notify: the primary moved; rebuilding the pub/sub connection on it", "primary", primary)
		closePubSub(ps) // the reader notices and rebuilds
	}
	return len(moved) > 0
}
