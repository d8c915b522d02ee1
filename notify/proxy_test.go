package notify

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

// proxy is a TCP proxy on loopback that can simulate a half-open
// connection: a frozen connection stays open at both ends but forwards
// nothing, so neither side sees an error. Connections accepted after a
// freeze are forwarded normally unless freezeNew is set.
type proxy struct {
	ln     net.Listener
	target string
	wg     sync.WaitGroup // the accept loop and every pipe

	mu        sync.Mutex
	closed    bool         // guarded by mu
	conns     []*proxyConn // guarded by mu
	accepted  int          // guarded by mu
	freezeNew bool         // guarded by mu; new connections start frozen
	rejecting bool         // guarded by mu; new connections are closed at once
	rejected  int          // guarded by mu
}

// proxyConn is one proxied connection.
type proxyConn struct {
	client, server net.Conn
	frozen         atomic.Bool // when set, bytes read are dropped instead of forwarded
}

// startProxy starts a proxy to target that is closed when t ends.
func startProxy(t testing.TB, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &proxy{ln: ln, target: target}
	p.wg.Go(p.accept)
	t.Cleanup(p.close)
	return p
}

// Addr is the address clients dial.
func (p *proxy) Addr() string { return p.ln.Addr().String() }

// Accepted reports how many connections the proxy has accepted.
func (p *proxy) Accepted() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepted
}

// FreezeExisting stops forwarding on every open connection, leaving the
// sockets open. Later connections are forwarded.
func (p *proxy) FreezeExisting() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.frozen.Store(true)
	}
}

// FreezeAll freezes every open connection and every later one.
func (p *proxy) FreezeAll() {
	p.FreezeExisting()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.freezeNew = true
}

// Reject closes every open connection and closes new ones at once, as if
// the server were down, until Resume.
func (p *proxy) Reject() {
	p.mu.Lock()
	p.rejecting = true
	conns := p.conns
	p.conns = nil
	p.mu.Unlock()
	for _, c := range conns {
		_ = c.client.Close()
		_ = c.server.Close()
	}
}

// Resume forwards new connections again after Reject.
func (p *proxy) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rejecting = false
}

// Rejected reports how many connections Reject has turned away.
func (p *proxy) Rejected() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.rejected
}

func (p *proxy) accept() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		rejecting := p.rejecting
		if rejecting {
			p.rejected++
		}
		p.mu.Unlock()
		if rejecting {
			_ = client.Close()
			continue
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = client.Close()
			continue
		}
		c := &proxyConn{client: client, server: server}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			_ = client.Close()
			_ = server.Close()
			return
		}
		c.frozen.Store(p.freezeNew)
		p.conns = append(p.conns, c)
		p.accepted++
		p.wg.Go(func() { c.pipe(client, server) })
		p.wg.Go(func() { c.pipe(server, client) })
		p.mu.Unlock()
	}
}

// pipe copies src to dst until either side fails, then closes both.
func (c *proxyConn) pipe(src, dst net.Conn) {
	defer func() {
		_ = c.client.Close()
		_ = c.server.Close()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !c.frozen.Load() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *proxy) close() {
	p.mu.Lock()
	p.closed = true
	conns := p.conns
	p.mu.Unlock()
	_ = p.ln.Close()
	for _, c := range conns {
		_ = c.client.Close()
		_ = c.server.Close()
	}
	p.wg.Wait()
}
