// Package redistest starts real redis-server processes on free loopback
// ports for fairlock's tests, and hands out clients and key prefixes that
// keep tests apart: a single server (Start, or one per package with Main),
// a Redis Cluster (StartCluster) and a primary with replicas under
// sentinels (StartSentinel). Every process is killed with SIGKILL by Stop,
// with any child it forked, and on Linux also when the test binary dies.
// It is a test helper; nothing in the library imports it.
package redistest

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Server is one redis-server process listening on 127.0.0.1.
type Server struct {
	Addr string
	port int
	dir  string
	args []string
	cmd  *exec.Cmd
	log  *logTail      // what cmd printed last
	exit chan struct{} // closed when cmd has exited and its output is read
}

// Start launches a redis-server without persistence on a free loopback port
// and waits until it answers there. Extra arguments are passed as config
// directives ("--maxmemory-policy", "allkeys-lru", ...).
func Start(extra ...string) (*Server, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("redistest: redis-server not found on PATH (install the redis-server package): %w", err)
	}
	dir, err := os.MkdirTemp("", "fairlock-redis-")
	if err != nil {
		return nil, err
	}
	var lastErr error
	for range 5 {
		port, err := freePort()
		if err != nil {
			lastErr = err
			continue
		}
		s := &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), port: port, dir: dir}
		s.args = serverArgs(bin, port, dir, extra...)
		if err := s.launch(); err != nil {
			lastErr = err
			continue
		}
		return s, nil
	}
	_ = os.RemoveAll(dir)
	return nil, fmt.Errorf("redistest: could not start redis-server: %w", lastErr)
}

// launch starts the server and waits until it answers on its port, its
// data loaded. A server that finds its port taken exits, but until it
// does another server may answer there; launch tells them apart by the
// process id the answer gives, and fails at once when it is not its own,
// so that the caller tries another port instead of taking that other
// server for its own.
func (s *Server) launch() error { return s.start(false) }

// start is launch; with loading it returns as soon as the server answers,
// while it may still be loading its data (it answers INFO then, and
// LOADING to PING).
func (s *Server) start(loading bool) error {
	cmd := exec.Command(s.args[0], s.args[1:]...)
	s.log = &logTail{}
	cmd.Stdout = s.log
	cmd.Stderr = s.log
	cmd.WaitDelay = time.Second // a forked child may keep the output open
	configure(cmd)
	if err := cmd.Start(); err != nil {
		return err
	}
	s.cmd = cmd
	s.exit = make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(s.exit)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-s.exit:
			return fmt.Errorf("%s exited at start; its log ends:\n%s", s.args[0], s.log)
		default:
		}
		if pid, err := processID(s.Addr); err == nil {
			if pid != cmd.Process.Pid {
				s.kill()
				return fmt.Errorf("%s: port %d is taken by another server (process %d); its log ends:\n%s",
					s.args[0], s.port, pid, s.log)
			}
			if loading || ping(s.Addr) == nil {
				return nil
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.kill()
	return fmt.Errorf("%s did not answer on %s within 10s; its log ends:\n%s", s.args[0], s.Addr, s.log)
}

// ping reports nil once the server on addr answers PING: a server loading
// its data answers LOADING.
func ping(addr string) error {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return c.Ping(ctx).Err()
}

// processID returns the process id of the server that answers on addr, as
// its INFO gives it.
func processID(addr string) (int, error) {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(InfoField(info, "process_id"))
}

// kill ends the server (and any child it forked) with SIGKILL and waits
// until it has exited. It does nothing to a server that is not running.
func (s *Server) kill() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	select {
	case <-s.exit:
		return // reaped: its pid may be another process's by now
	default:
	}
	killProcess(s.cmd.Process)
	<-s.exit
}

// LogTail returns the last lines the server printed, for error messages.
func (s *Server) LogTail() string {
	if s.log == nil {
		return ""
	}
	return s.log.String()
}

// Stop kills the server and removes its directory.
func (s *Server) Stop() {
	s.kill()
	_ = os.RemoveAll(s.dir)
}

// Restart kills the server and starts it again on the same port, with the
// same directives and in the same directory: with the dataset its
// persistence kept (an append-only file, for a server started with
// "--appendonly", "yes"), or, as Start leaves it, empty. It returns once
// the server answers PING, so once it has loaded its dataset.
func (s *Server) Restart() error {
	s.kill()
	var err error
	for range 50 {
		if err = s.launch(); err == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return err
}

// RestartLoading is Restart for a server with data to load: it returns as
// soon as the server answers, loaded or not (while it loads, Redis answers
// LOADING to every command that touches data).
func (s *Server) RestartLoading() error {
	s.kill()
	var err error
	for range 50 {
		if err = s.start(true); err == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return err
}

// Client returns a client of s that is closed when t ends.
func (s *Server) Client(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// logTail is an io.Writer that keeps the last lines written to it.
type logTail struct {
	mu      sync.Mutex
	lines   []string // guarded by mu; at most tailLines, oldest first
	partial []byte   // guarded by mu; the line not yet ended
}

const tailLines = 20

func (l *logTail) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, b := range p {
		if b != '\n' {
			l.partial = append(l.partial, b)
			continue
		}
		l.lines = append(l.lines, string(l.partial))
		l.partial = l.partial[:0]
		if len(l.lines) > tailLines {
			l.lines = l.lines[len(l.lines)-tailLines:]
		}
	}
	return len(p), nil
}

func (l *logTail) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	lines := l.lines
	if len(l.partial) > 0 {
		lines = append(lines[:len(lines):len(lines)], string(l.partial))
	}
	return strings.Join(lines, "\n")
}

var prefixSeq atomic.Int64

// Prefix returns a key prefix unique to this test run and test.
func Prefix(t testing.TB) string {
	name := strings.NewReplacer("/", "-", " ", "_", "{", "", "}", "").Replace(t.Name())
	return fmt.Sprintf("t%d-%d-%s", os.Getpid(), prefixSeq.Add(1), name)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

var shared atomic.Pointer[Server]

// Main runs a package's tests with one shared server, reachable through
// Shared, and stops it afterwards. Use it from TestMain.
func Main(m *testing.M) int {
	s, err := Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	shared.Store(s)
	defer s.Stop()
	defer stopExtraMasters()
	return m.Run()
}

// extra are the two servers SharedMasterAddrs starts beside the shared
// one, once, for the examples of a quorum; Main stops them.
var extra struct {
	mu      sync.Mutex
	servers []*Server
}

// SharedMasterAddrs returns the addresses of three independent servers:
// the one started by Main and two more, started at the first call and
// stopped by Main. It returns nil when they cannot be started.
func SharedMasterAddrs() []string {
	s := shared.Load()
	if s == nil {
		return nil
	}
	extra.mu.Lock()
	defer extra.mu.Unlock()
	for len(extra.servers) < 2 {
		e, err := Start()
		if err != nil {
			return nil
		}
		extra.servers = append(extra.servers, e)
	}
	return []string{s.Addr, extra.servers[0].Addr, extra.servers[1].Addr}
}

func stopExtraMasters() {
	extra.mu.Lock()
	defer extra.mu.Unlock()
	for _, e := range extra.servers {
		e.Stop()
	}
	extra.servers = nil
}

// Shared returns the server started by Main.
func Shared(t testing.TB) *Server {
	t.Helper()
	s := shared.Load()
	if s == nil {
		t.Fatal("redistest: Shared called without redistest.Main in TestMain")
	}
	return s
}

// Runner returns a wrapper of m whose Run starts a shared server (reachable
// through Shared), runs the tests and stops the server, so that a leak
// check wrapped around it (goleak.VerifyTestMain) sees a clean process.
func Runner(m *testing.M) interface{ Run() int } { return runner{m} }

type runner struct{ m *testing.M }

func (r runner) Run() int { return Main(r.m) }

// SharedAddr returns the address of the server started by Main, or "" when
// there is none.
func SharedAddr() string {
	if s := shared.Load(); s != nil {
		return s.Addr
	}
	return ""
}

// serverArgs is the command line of a redis-server without persistence on
// port of the loopback interface, working in dir, with extra directives.
func serverArgs(bin string, port int, dir string, extra ...string) []string {
	return append([]string{bin,
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", dir,
		"--protected-mode", "no",
	}, extra...)
}

// serverAt returns the server of servers listening on addr, or nil.
func serverAt(servers []*Server, addr string) *Server {
	for _, s := range servers {
		if s.Addr == addr {
			return s
		}
	}
	return nil
}

// logsOf returns the tail of every server's log, for error messages.
func logsOf(servers ...*Server) string {
	var b strings.Builder
	for _, s := range servers {
		fmt.Fprintf(&b, "\n--- log of %s:\n%s", s.Addr, s.LogTail())
	}
	return b.String()
}

// addrsOf returns the addresses of servers, in their order.
func addrsOf(servers []*Server) []string {
	addrs := make([]string, len(servers))
	for i, s := range servers {
		addrs[i] = s.Addr
	}
	return addrs
}

// Kill ends the server with SIGKILL, as a crash: its keys are lost.
// Restart starts it again, empty, on the same port.
func (s *Server) Kill() { s.kill() }

// Masters starts n independent servers (no replication between them), for
// a quorum of masters, and stops them when t ends.
func Masters(t testing.TB, n int) []*Server {
	t.Helper()
	servers := make([]*Server, n)
	for i := range servers {
		s, err := Start()
		if err != nil {
			t.Fatalf("redistest: master %d: %v", i, err)
		}
		t.Cleanup(s.Stop)
		servers[i] = s
	}
	return servers
}

// QuickLoop makes go test run n parallel tests at once under -short,
// unless -parallel says otherwise. Call it first in TestMain. The tests
// it is for mostly wait on Redis, on timers and on fault proxies, so
// GOMAXPROCS of them at once (go test's default) leaves the quick loop
// waiting. The full run keeps the default, for tests whose bounds assume
// a machine not crowded by the tests themselves.
func QuickLoop(n int) {
	flag.Parse()
	if !testing.Short() {
		return
	}
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		_ = flag.Set("test.parallel", strconv.Itoa(n))
	}
}
