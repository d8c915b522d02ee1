// Package redistest starts real redis-server processes on free loopback
// ports for fairlock's tests, and hands out clients and key prefixes that
// keep tests apart. It is a test helper; nothing in the library imports it.
package redistest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
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
	exit chan struct{} // closed when cmd has exited
}

// Start launches a redis-server without persistence on a free loopback port
// and waits until it answers PING. Extra arguments are passed as config
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
		s.args = append([]string{
			"--port", strconv.Itoa(port),
			"--bind", "127.0.0.1",
			"--save", "",
			"--appendonly", "no",
			"--dir", dir,
			"--protected-mode", "no",
		}, extra...)
		s.args = append([]string{bin}, s.args...)
		if err := s.launch(); err != nil {
			lastErr = err
			continue
		}
		return s, nil
	}
	_ = os.RemoveAll(dir)
	return nil, fmt.Errorf("redistest: could not start redis-server: %w", lastErr)
}

func (s *Server) launch() error {
	cmd := exec.Command(s.args[0], s.args[1:]...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		return err
	}
	s.cmd = cmd
	s.exit = make(chan struct{})
	var logTail atomic.Value
	logTail.Store("")
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			logTail.Store(sc.Text())
		}
	}()
	go func() {
		_ = cmd.Wait()
		close(s.exit)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-s.exit:
			return fmt.Errorf("redis-server exited at start: %v", logTail.Load())
		default:
		}
		if ping(s.Addr) == nil {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.kill()
	return errors.New("redis-server did not answer PING within 10s")
}

func ping(addr string) error {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return c.Ping(ctx).Err()
}

func (s *Server) kill() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.exit
}

// Stop kills the server and removes its directory.
func (s *Server) Stop() {
	s.kill()
	_ = os.RemoveAll(s.dir)
}

// Restart kills the server and starts a fresh one on the same port, with
// an empty dataset.
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

// Client returns a client of s that is closed when t ends.
func (s *Server) Client(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr})
	t.Cleanup(func() { _ = c.Close() })
	return c
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
	return m.Run()
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
