//go:build unix

package redistest

import (
	"context"
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
