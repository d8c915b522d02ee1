package notify

import (
	"context"
	"crypto/tls"
	"net"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// Leaving the old primary. When Sentinel names a new primary (sentinel.go),
// the hub of a failover client closes every connection the client holds
// to any other server, rebuilds its own pub/sub connections there, and
// tells Options.Moved (the engine's audit looks at once for what the
// failover brought back). The client dials again at its next command.
//
// go-redis would dial whatever its own sentinel names, and that sentinel
// may not have heard of the switch yet: it would name the old primary,
// where the client would go on working, unnoticed, until Sentinel demotes
// it. So until every sentinel the hub knows names the new primary (at
// most redirectBound), the client's dials go to the new primary directly,
// without asking go-redis's sentinel: over TCP, with the client's
// TLSConfig when it has one, within its DialTimeout. A dial that was
// already asking when the switch was heard and reached another server is
// closed and replaced the same way.
//
// This needs the addresses Sentinel names to be those the client's
// connections reach. The hub moves nothing of the client's until one of
// its connections reached a master that a hello named (not so behind a
// proxy, or when Sentinel names hosts by name): it then only rebuilds its
// own connections, as before.

const (
	redirectBound = 30 * time.Second       // how long dials go to the new primary at most
	agreeEvery    = 250 * time.Millisecond // how often the sentinels are asked whether they all name it
)

// trackedConn is a connection the client dialled for itself: the hub
// closes it when Sentinel names another primary. It hides nothing of the
// connection from go-redis, which looks under it (NetConn) for its health
// checks.
type trackedConn struct {
	net.Conn
	f    *follower
	addr string // the address it reached
}

func (c *trackedConn) Close() error {
	c.f.mu.Lock()
	delete(c.f.conns, c)
	c.f.mu.Unlock()
	return c.Conn.Close()
}

func (c *trackedConn) NetConn() net.Conn { return c.Conn }

// trackedSysConn is a trackedConn of a connection that go-redis checks
// through syscall.Conn (a TCP connection).
type trackedSysConn struct {
	*trackedConn
	sys syscall.Conn
}

func (c trackedSysConn) SyscallConn() (syscall.RawConn, error) { return c.sys.SyscallConn() }

// track returns nc, tracked when it is the client's own: the dial's
// context carries no mark of a hub.
func (f *follower) track(ctx context.Context, nc net.Conn) net.Conn {
	if _, hubs := ctx.Value(dialKey{}).(dialMark); hubs || f.h.ctx.Err() != nil {
		return nc
	}
	tc := &trackedConn{Conn: nc, f: f, addr: nc.RemoteAddr().String()}
	f.mu.Lock()
	f.conns[tc] = struct{}{}
	f.mu.Unlock()
	if sys, ok := nc.(syscall.Conn); ok {
		return trackedSysConn{tc, sys}
	}
	return tc
}

// redirect returns the new primary the client's dials go to, or "".
func (f *follower) redirect() string {
	if f.h.ctx.Err() != nil {
		return ""
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.to
}

// dial dials for the client through next, or to the new primary directly
// while the sentinels do not all name it.
func (f *follower) dial(ctx context.Context, next redis.DialHook, network, addr string) (net.Conn, error) {
	if to := f.redirect(); to != "" {
		return f.dialDirect(ctx, network, to)
	}
	nc, err := next(ctx, network, addr)
	if err != nil || nc == nil || nc.RemoteAddr() == nil {
		return nc, err
	}
	if to := f.redirect(); to != "" && nc.RemoteAddr().String() != to {
		_ = nc.Close() // asked a sentinel before the switch was heard
		return f.dialDirect(ctx, network, to)
	}
	return nc, nil
}

// dialDirect dials to as go-redis dials a failover client's primary.
func (f *follower) dialDirect(ctx context.Context, network, to string) (net.Conn, error) {
	o := f.rdb.Options()
	d := &net.Dialer{Timeout: o.DialTimeout}
	if o.TLSConfig != nil {
		return (&tls.Dialer{NetDialer: d, Config: o.TLSConfig}).DialContext(ctx, network, to)
	}
	return d.DialContext(ctx, network, to)
}

// switchTo leaves every server but primary, which Sentinel named in a
// newer configuration.
func (f *follower) switchTo(primary string) {
	h := f.h
	f.mu.Lock()
	direct := f.direct
	var drop []*trackedConn
	if direct {
		f.to = primary
		for c := range f.conns {
			if c.addr != primary {
				drop = append(drop, c)
			}
		}
	}
	f.mu.Unlock()
	h.log.Info("fairlock: notify: Sentinel switched the primary; leaving the old one",
		"primary", primary, "closed", len(drop), "redirected", direct)
	for _, c := range drop {
		_ = c.Close()
	}
	h.moveConns(primary, time.Now())
	if h.onMoved != nil && h.ctx.Err() == nil {
		h.onMoved()
	}
	if direct {
		h.goUnlessClosed(func() { f.agree(primary) })
	}
}

// agree ends the redirect to primary once every sentinel the hub knows
// names it, or after redirectBound, unless a newer switch took over.
func (f *follower) agree(primary string) {
	t := time.NewTicker(agreeEvery)
	defer t.Stop()
	bound := time.Now().Add(redirectBound)
	for {
		select {
		case <-f.h.ctx.Done():
			return
		case <-t.C:
		}
		f.mu.Lock()
		if f.to != primary {
			f.mu.Unlock()
			return
		}
		master := f.name
		scs := make([]*redis.SentinelClient, 0, len(f.links))
		for _, l := range f.links {
			scs = append(scs, l.sc) // nil while not followed: it does not agree
		}
		f.mu.Unlock()
		if time.Now().Before(bound) && !f.allName(scs, master, primary) {
			continue
		}
		f.mu.Lock()
		if f.to == primary {
			f.to = ""
		}
		f.mu.Unlock()
		f.h.log.Debug("fairlock: notify: every sentinel names the new primary", "primary", primary)
		return
	}
}

// allName reports whether every sentinel of scs names primary as the
// master called master.
func (f *follower) allName(scs []*redis.SentinelClient, master, primary string) bool {
	for _, sc := range scs {
		if sc == nil {
			return false
		}
		ctx, cancel := context.WithTimeout(f.h.ctx, sentinelCall)
		addr, err := sc.GetMasterAddrByName(ctx, master).Result()
		cancel()
		if err != nil || len(addr) != 2 || net.JoinHostPort(addr[0], addr[1]) != primary {
			return false
		}
	}
	return true
}
