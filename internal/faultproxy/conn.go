package faultproxy

import (
	"bytes"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// conn is one forwarded connection. Each direction has a reader, which
// decides whether a chunk passes, and a deliverer, which writes it once its
// latency has passed, so that latency never reorders bytes.
type conn struct {
	p              *Proxy
	client, server net.Conn
	frozen         atomic.Bool   // nothing more is forwarded, either way
	deaf           atomic.Bool   // nothing more from the server is forwarded: a reply was lost
	pubsub         atomic.Bool   // the client subscribed on it: a pub/sub connection, which never loses a reply
	done           chan struct{} // closed when the connection is closed
	closeOnce      sync.Once
}

// chunk is bytes read from one side, to be delivered to the other at a
// given time.
type chunk struct {
	data []byte
	at   time.Time
}

// chunkBuffer is how many chunks a direction holds back under latency
// before its reader stops reading (and TCP pushes back on the sender).
const chunkBuffer = 256

func newConn(p *Proxy, client, server net.Conn) *conn {
	return &conn{p: p, client: client, server: server, done: make(chan struct{})}
}

// start launches the connection's four goroutines. Requires p.mu, with p
// not closed.
func (c *conn) start() {
	up := make(chan chunk, chunkBuffer)
	down := make(chan chunk, chunkBuffer)
	c.p.wg.Go(func() { c.read(c.client, up, false) })
	c.p.wg.Go(func() { c.deliver(c.server, up) })
	c.p.wg.Go(func() { c.read(c.server, down, true) })
	c.p.wg.Go(func() { c.deliver(c.client, down) })
}

// read reads src until it fails or is closed, and queues what passes for
// delivery. A frozen or deaf direction still reads, and drops what it
// reads, so that the sender sees no back-pressure and a close is noticed.
func (c *conn) read(src net.Conn, out chan<- chunk, fromServer bool) {
	defer close(out)
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !fromServer && subscribes(buf[:n]) {
			c.pubsub.Store(true)
		}
		if n > 0 && c.passes(fromServer) {
			out <- chunk{data: bytes.Clone(buf[:n]), at: time.Now().Add(c.p.delay())}
		}
		if err != nil {
			return
		}
	}
}

// passes decides whether a chunk just read is forwarded.
func (c *conn) passes(fromServer bool) bool {
	switch {
	case c.frozen.Load():
		return false
	case !fromServer:
		return true
	case c.deaf.Load():
		return false
	case !c.pubsub.Load() && c.p.takeLoss():
		c.deaf.Store(true)
		return false
	}
	return true
}

// subscribes reports whether a chunk a client sent holds a SUBSCRIBE (or
// SSUBSCRIBE, PSUBSCRIBE) command.
func subscribes(b []byte) bool {
	return bytes.Contains(bytes.ToLower(b), []byte("subscribe\r\n"))
}

// deliver writes each chunk to dst when its time comes, unless the
// connection was frozen or closed meanwhile. When the reader's side has
// ended and everything queued was delivered, it closes the connection.
func (c *conn) deliver(dst net.Conn, in <-chan chunk) {
	defer c.close()
	for ch := range in {
		if !c.until(ch.at) || c.frozen.Load() {
			continue // dropped; keep draining so the reader never blocks
		}
		if _, err := dst.Write(ch.data); err != nil {
			c.close()
		}
	}
}

// until waits until at, and reports false if the connection was closed
// first.
func (c *conn) until(at time.Time) bool {
	d := time.Until(at)
	if d <= 0 {
		select {
		case <-c.done:
			return false
		default:
			return true
		}
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-c.done:
		return false
	}
}

// close closes both sides once.
func (c *conn) close() {
	c.closeOnce.Do(func() {
		close(c.done)
		_ = c.client.Close()
		_ = c.server.Close()
		c.p.forget(c)
	})
}
