//go:build unix

package redistest

import (
	"context"
	"os"
	"strconv"
	"strings"
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
	pid := 0
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
			if pid, err = strconv.Atoi(v); err != nil {
				t.Fatalf("redistest: INFO process_id %q: %v", v, err)
			}
		}
	}
	if pid <= 0 {
		t.Fatal("redistest: INFO names no process_id")
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
