package otel_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

// sharedAddr is the address of the redis-server the tests share (each
// with its own key prefix).
var sharedAddr string

func TestMain(m *testing.M) {
	srv, err := startRedis()
	if err != nil {
		fmt.Fprintln(os.Stderr, "otel tests:", err)
		os.Exit(1)
	}
	sharedAddr = srv.addr
	goleak.VerifyTestMain(wrapped{m, srv.stop})
}

// wrapped runs the tests, then stops the server before goleak looks for
// goroutines left behind.
type wrapped struct {
	m    *testing.M
	stop func()
}

func (w wrapped) Run() int {
	defer w.stop()
	return w.m.Run()
}

// server is a redis-server this package started.
type server struct {
	addr string
	cmd  *exec.Cmd
}

// startRedis starts a redis-server without persistence on a free
// loopback port and waits until it answers PING.
func startRedis() (*server, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("the tests need redis-server on PATH: %w", err)
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no")
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &server{addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), cmd: cmd}
	rdb := redis.NewClient(&redis.Options{Addr: s.addr})
	defer rdb.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := rdb.Ping(ctx).Err()
		cancel()
		if err == nil {
			return s, nil
		}
		if time.Now().After(deadline) {
			s.stop()
			return nil, fmt.Errorf("redis-server on %s never answered PING: %w", s.addr, err)
		}
		time.Sleep(10 * time.Millisecond) // polling the new process, not synchronising tests
	}
}

// pause stops the server's process (SIGSTOP) until the returned function
// resumes it.
func (s *server) pause() (resume func()) {
	_ = s.cmd.Process.Signal(syscall.SIGSTOP)
	return func() { _ = s.cmd.Process.Signal(syscall.SIGCONT) }
}

// stop kills the server and waits for it.
func (s *server) stop() {
	_ = s.cmd.Process.Signal(syscall.SIGCONT)
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
}

// freePort returns a loopback port that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
