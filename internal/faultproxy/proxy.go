package faultproxy

import (
	"net"
	"sync"
	"testing"
	"time"
)

// dialTimeout bounds the proxy's dial of the target for each accepted
// connection.
const dialTimeout = 5 * time.Second

// Proxy forwards every connection accepted on a loopback port to a target
// address, with the faults it is told to inject. Its methods are safe for
// concurrent use.
type Proxy struct {
	ln     net.Listener
	target string
	wg     sync.WaitGroup // the accept loop and every connection's goroutines; Go only under mu while !closed

	mu        sync.Mutex
	closed    bool               // guarded by mu
	conns     map[*conn]struct{} // guarded by mu; open connections
	accepted  int                // guarded by mu; connections forwarded so far
	rejected  int                // guarded by mu; connections closed at once by Reject
	lost      int                // guarded by mu; replies lost so far
	loseNext  int                // guarded by mu; reply losses armed by LoseNextReply
	freezeNew bool               // guarded by mu; new connections start frozen
	rejecting bool               // guarded by mu; new connections are closed at once
	latency   time.Duration      // guarded by mu; delay of every chunk read from now on
}

// Start listens on a free loopback port and forwards what it accepts to
// target. Close stops it.
func Start(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, conns: make(map[*conn]struct{})}
	p.wg.Go(p.accept)
	return p, nil
}

// New is Start for a test: it fails t when the proxy cannot listen, and
// closes the proxy when t ends.
func New(t testing.TB, target string) *Proxy {
	t.Helper()
	p, err := Start(target)
	if err != nil {
		t.Fatalf("faultproxy: %v", err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// Addr is the address clients dial instead of the target.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetLatency delays every chunk read from now on, in either direction and
// on every connection, by d before it is delivered. Order is kept. Zero
// forwards at once.
func (p *Proxy) SetLatency(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.latency = d
}

// FreezeExisting makes every open connection half-open: it stays open at
// both ends and forwards nothing more, in either direction, including
// chunks still held back by latency. Later connections are not affected.
func (p *Proxy) FreezeExisting() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.frozen.Store(true)
	}
}

// FreezeNew makes every connection accepted from now on frozen from its
// start: the dial succeeds, nothing is forwarded. Open connections are not
// affected.
func (p *Proxy) FreezeNew() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.freezeNew = true
}

// FreezeAll freezes every open connection and every later one: the client
// is cut off without seeing an error.
func (p *Proxy) FreezeAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.freezeNew = true
	for c := range p.conns {
		c.frozen.Store(true)
	}
}

// Reject closes every open connection and closes each new one as soon as
// it is accepted, as if the server had gone away.
func (p *Proxy) Reject() {
	p.mu.Lock()
	p.rejecting = true
	conns := p.openLocked()
	p.mu.Unlock()
	for _, c := range conns {
		c.close()
	}
}

// LoseNextReply arms the loss of one reply: the next connection that
// receives bytes from the server drops them, and every later byte from the
// server, until it is closed. A connection on which the client subscribed
// (a pub/sub connection) never loses one: the losses are meant for
// commands. The server has acted on the request; the
// client waits for an answer that never comes. Calls accumulate: n calls
// make the next n connections that receive a reply lose it.
func (p *Proxy) LoseNextReply() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.loseNext++
}

// Heal undoes FreezeNew, Reject, SetLatency and reply losses not yet
// spent: later connections and later chunks are forwarded normally.
// Connections that were frozen or lost a reply stay broken: their bytes
// are gone.
func (p *Proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.freezeNew = false
	p.rejecting = false
	p.latency = 0
	p.loseNext = 0
}

// Accepted reports how many connections the proxy has forwarded.
func (p *Proxy) Accepted() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepted
}

// Rejected reports how many connections Reject has closed at once.
func (p *Proxy) Rejected() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.rejected
}

// Lost reports how many replies LoseNextReply has made a connection lose.
func (p *Proxy) Lost() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lost
}

// Open reports how many forwarded connections are still open.
func (p *Proxy) Open() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// Close stops listening, closes every connection and waits for the
// proxy's goroutines. It is idempotent.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	conns := p.openLocked()
	p.mu.Unlock()
	err := p.ln.Close()
	for _, c := range conns {
		c.close()
	}
	p.wg.Wait()
	return err
}

func (p *Proxy) openLocked() []*conn {
	conns := make([]*conn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	return conns
}

// accept is the accept loop; it ends when the listener is closed.
func (p *Proxy) accept() {
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
		server, err := net.DialTimeout("tcp", p.target, dialTimeout)
		if err != nil {
			_ = client.Close()
			continue
		}
		c := newConn(p, client, server)
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			_ = client.Close()
			_ = server.Close()
			return
		}
		c.frozen.Store(p.freezeNew)
		p.conns[c] = struct{}{}
		p.accepted++
		c.start()
		p.mu.Unlock()
	}
}

// forget removes a closed connection.
func (p *Proxy) forget(c *conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.conns, c)
}

// delay returns the latency of a chunk read now.
func (p *Proxy) delay() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.latency
}

// takeLoss spends one armed reply loss, if any.
func (p *Proxy) takeLoss() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.loseNext == 0 {
		return false
	}
	p.loseNext--
	p.lost++
	return true
}
