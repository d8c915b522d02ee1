package faultproxy

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// patience bounds every wait for something that should happen; quiet is
// how long a test listens to show that something does not happen.
const (
	patience = 5 * time.Second
	quiet    = 150 * time.Millisecond
)

// echoServer answers every line it reads with the same line, and counts
// the lines it has read.
type echoServer struct {
	ln net.Listener
	wg sync.WaitGroup

	mu    sync.Mutex
	lines int        // guarded by mu
	conns []net.Conn // guarded by mu
}

func startEcho(t *testing.T) *echoServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := &echoServer{ln: ln}
	s.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns = append(s.conns, c)
			s.mu.Unlock()
			s.wg.Go(func() { s.serve(c) })
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		s.mu.Lock()
		for _, c := range s.conns {
			_ = c.Close()
		}
		s.mu.Unlock()
		s.wg.Wait()
	})
	return s
}

func (s *echoServer) serve(c net.Conn) {
	defer c.Close()
	r := bufio.NewReader(c)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		s.mu.Lock()
		s.lines++
		s.mu.Unlock()
		if _, err := c.Write([]byte(line)); err != nil {
			return
		}
	}
}

func (s *echoServer) Lines() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lines
}

// client is one connection through the proxy.
type client struct {
	t *testing.T
	c net.Conn
	r *bufio.Reader
}

func dial(t *testing.T, p *Proxy) *client {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return &client{t: t, c: c, r: bufio.NewReader(c)}
}

// roundTrip sends a line and reads the answer within d.
func (c *client) roundTrip(line string, d time.Duration) (string, error) {
	if _, err := c.c.Write([]byte(line + "\n")); err != nil {
		return "", err
	}
	_ = c.c.SetReadDeadline(time.Now().Add(d))
	got, err := c.r.ReadString('\n')
	if err != nil {
		return "", err
	}
	return got[:len(got)-1], nil
}

func (c *client) requireEcho(line string) {
	c.t.Helper()
	got, err := c.roundTrip(line, patience)
	require.NoError(c.t, err)
	require.Equal(c.t, line, got)
}

// requireSilent checks that a line sent gets no answer, and that the
// connection is still open (a timeout, not an EOF).
func (c *client) requireSilent(line string) {
	c.t.Helper()
	_, err := c.roundTrip(line, quiet)
	require.ErrorIs(c.t, err, os.ErrDeadlineExceeded, "expected silence on an open connection")
}

// requireClosed checks that the connection is closed by the proxy.
func (c *client) requireClosed() {
	c.t.Helper()
	_ = c.c.SetReadDeadline(time.Now().Add(patience))
	_, err := c.r.ReadString('\n')
	require.True(c.t, errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || isReset(err),
		"expected the proxy to close the connection, got %v", err)
}

func isReset(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && !op.Timeout()
}

func TestForwardsBothWays(t *testing.T) {
	t.Parallel()
	s := startEcho(t)
	p := New(t, s.ln.Addr().String())
	a, b := dial(t, p), dial(t, p)
	for range 3 {
		a.requireEcho("ping")
		b.requireEcho("pong")
	}
	require.Equal(t, 2, p.Accepted())
	require.Equal(t, 2, p.Open())
	require.Equal(t, 6, s.Lines())
}

func TestLatencyDelaysEveryChunkInOrder(t *testing.T) {
	t.Parallel()
	s := startEcho(t)
	p := New(t, s.ln.Addr().String())
	c := dial(t, p)
	c.requireEcho("warm")

	const d = 200 * time.Millisecond
	p.SetLatency(d)
	start := time.Now()
	c.requireEcho("slow")
	require.GreaterOrEqual(t, time.Since(start), 2*d, "one way each direction")

	// Lines sent back to back arrive in order.
	for _, l := range []string{"1", "2", "3"} {
		_, err := c.c.Write([]byte(l + "\n"))
		require.NoError(t, err)
	}
	for _, l := range []string{"1", "2", "3"} {
		_ = c.c.SetReadDeadline(time.Now().Add(patience))
		got, err := c.r.ReadString('\n')
		require.NoError(t, err)
		require.Equal(t, l+"\n", got)
	}

	p.Heal()
	start = time.Now()
	c.requireEcho("fast")
	require.Less(t, time.Since(start), 2*d, "healed: no latency")
}

func TestFreezeExistingLeavesConnectionsOpenAndSilent(t *testing.T) {
	t.Parallel()
	s := startEcho(t)
	p := New(t, s.ln.Addr().String())
	old := dial(t, p)
	old.requireEcho("before")

	p.FreezeExisting()
	old.requireSilent("lost")
	require.Equal(t, 1, s.Lines(), "a frozen connection forwards nothing to the server either")
	require.Equal(t, 1, p.Open())

	fresh := dial(t, p)
	fresh.requireEcho("new connections are forwarded")

	// The client giving up on a frozen connection closes its server side.
	require.NoError(t, old.c.Close())
	require.Eventually(t, func() bool { return p.Open() == 1 }, patience, time.Millisecond)
}

func TestFreezeNewSparesOpenConnections(t *testing.T) {
	t.Parallel()
	s := startEcho(t)
	p := New(t, s.ln.Addr().String())
	old := dial(t, p)
	old.requireEcho("before")

	p.FreezeNew()
	fresh := dial(t, p)
	fresh.requireSilent("dial succeeds, nothing passes")
	old.requireEcho("open connections still work")

	p.Heal()
	dial(t, p).requireEcho("healed")
	fresh.requireSilent("a frozen connection stays frozen")
}

func TestFreezeAllCutsEverything(t *testing.T) {
	t.Parallel()
	s := startEcho(t)
	p := New(t, s.ln.Addr().String())
	old := dial(t, p)
	old.requireEcho("before")

	p.FreezeAll()
	old.requireSilent("existing")
	dial(t, p).requireSilent("new")
}

func TestRejectClosesEverythingUntilHealed(t *testing.T) {
	t.Parallel()
	s := startEcho(t)
	p := New(t, s.ln.Addr().String())
	old := dial(t, p)
	old.requireEcho("before")

	p.Reject()
	old.requireClosed()
	dial(t, p).requireClosed()
	require.Equal(t, 1, p.Rejected())
	require.Zero(t, p.Open())

	p.Heal()
	dial(t, p).requireEcho("after")
}

func TestLostReplyReachesTheServerButNotTheClient(t *testing.T) {
	t.Parallel()
	s := startEcho(t)
	p := New(t, s.ln.Addr().String())
	a, b := dial(t, p), dial(t, p)
	a.requireEcho("before")

	p.LoseNextReply()
	a.requireSilent("request")
	require.Equal(t, 2, s.Lines(), "the server got the request")
	require.Equal(t, 1, p.Lost())
	a.requireSilent("a connection that lost a reply stays deaf")
	require.Equal(t, 3, s.Lines())

	b.requireEcho("the loss was spent on one connection")
	dial(t, p).requireEcho("new connections hear the server")
	require.Equal(t, 1, p.Lost())
}

func TestCloseEndsEveryConnection(t *testing.T) {
	t.Parallel()
	s := startEcho(t)
	p, err := Start(s.ln.Addr().String())
	require.NoError(t, err)
	frozen := dial(t, p)
	frozen.requireEcho("before")
	p.FreezeExisting()
	c := dial(t, p)
	c.requireEcho("before")
	p.SetLatency(time.Hour) // a chunk held back must not hold up Close
	_, err = c.c.Write([]byte("held back\n"))
	require.NoError(t, err)

	require.NoError(t, p.Close())
	require.NoError(t, p.Close(), "Close twice")
	c.requireClosed()
	frozen.requireClosed()
	_, err = net.DialTimeout("tcp", p.Addr(), time.Second)
	require.Error(t, err, "the proxy no longer listens")
}
