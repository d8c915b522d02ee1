//go:build unix

package redistest

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"testing"

	"github.com/redis/go-redis/v9"
)

// Pause stops the server rdb talks to (SIGSTOP), found by the process id
// its INFO gives, until the returned function or the test's end resumes
// it. A stopped server answers nothing and acknowledges nothing, and its
// connections stay open.
func Pause(t testing.TB, rdb *redis.Client) (resume func()) {
	t.Helper()
	info, err := rdb.Info(context.Background(), "server").Result()
	if err != nil {
		t.Fatalf("redistest: INFO server: %v", err)
	}
	pid, err := strconv.Atoi(InfoField(info, "process_id"))
	if err != nil || pid <= 0 {
		t.Fatalf("redistest: INFO names no process_id: %v", err)
	}
	p, err := os.FindProcess(pid)
	if err != nil {
		t.Fatalf("redistest: process %d: %v", pid, err)
	}
	if err := p.Signal(syscall.SIGSTOP); err != nil {
		t.Fatalf("redistest: SIGSTOP %d: %v", pid, err)
	}
	resumed := false
	resume = func() {
		if !resumed {
			resumed = true
			_ = p.Signal(syscall.SIGCONT)
		}
	}
	t.Cleanup(resume)
	return resume
}

// Suspend stops the server with SIGSTOP, as Pause does, until Resume. Its
// clock goes on meanwhile, and with it the expiries of its keys.
func (s *Server) Suspend() error { return s.signal(syscall.SIGSTOP) }

// Resume lets a suspended server go on (SIGCONT).
func (s *Server) Resume() error { return s.signal(syscall.SIGCONT) }

// signal sends sig to the server's process, unless it has exited.
func (s *Server) signal(sig syscall.Signal) error {
	if s.cmd == nil || s.cmd.Process == nil {
		return fmt.Errorf("redistest: %s was never started", s.Addr)
	}
	select {
	case <-s.exit:
		return fmt.Errorf("redistest: %s has exited", s.Addr)
	default:
	}
	return s.cmd.Process.Signal(sig)
}
