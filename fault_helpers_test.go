package fairlock_test

import (
	"bufio"
	"context"
	"errors"
	"net"
	"regexp"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/internal/faultproxy"
)

// proxied returns a Client whose redis traffic goes through a fault proxy
// to the env's server, the proxy, and the redis client under the Client.
// They are closed when the test ends, the Client first.
func (e *env) proxied(ropts *redis.Options, opts ...fairlock.Option) (*fairlock.Client, *faultproxy.Proxy) {
	e.t.Helper()
	p := faultproxy.New(e.t, e.srv.Addr)
	o := *ropts
	o.Addr = p.Addr()
	rdb := redis.NewClient(&o)
	e.t.Cleanup(func() { _ = rdb.Close() })
	c, err := fairlock.New(rdb, append([]fairlock.Option{fairlock.WithPrefix(e.prefix)}, opts...)...)
	require.NoError(e.t, err)
	e.t.Cleanup(func() { _ = c.Close() })
	return c, p
}

// traceOf describes what Redis keeps of owner in the lock's keys: a queue
// entry, a waiter deadline, or the hold; empty when nothing. It reports a
// failed read as a trace rather than failing the test, so that it can run
// inside require.Eventually.
func (e *env) traceOf(name, owner string) string {
	ctx := context.Background()
	k := e.keys(name)
	var trace []string
	queued, err := e.rdb.LRange(ctx, k.Queue, 0, -1).Result()
	if err != nil {
		return "queue unread: " + err.Error()
	}
	deadlines, err := e.rdb.ZRange(ctx, k.Deadline, 0, -1).Result()
	if err != nil {
		return "deadlines unread: " + err.Error()
	}
	for _, q := range queued {
		if strings.HasSuffix(q, ":"+owner) {
			trace = append(trace, "queued "+q)
		}
	}
	for _, d := range deadlines {
		if strings.HasSuffix(d, ":"+owner) {
			trace = append(trace, "deadline of "+d)
		}
	}
	holder, err := e.rdb.HGet(ctx, k.Lock, "owner").Result()
	switch {
	case errors.Is(err, redis.Nil):
	case err != nil:
		return "hold unread: " + err.Error()
	case holder == owner:
		trace = append(trace, "holds the lock")
	}
	return strings.Join(trace, ", ")
}

// callMonitor watches every command the server runs (MONITOR) and counts
// how many times each call id of the lock's scripts was sent.
type callMonitor struct {
	mu    sync.Mutex
	calls map[string]int // guarded by mu; call id -> times sent
}

// monitorCalls starts a MONITOR connection to the env's server that counts
// the call ids of the lock name; it is closed when the test ends.
func (e *env) monitorCalls(name string) *callMonitor {
	e.t.Helper()
	conn, err := net.Dial("tcp", e.srv.Addr)
	require.NoError(e.t, err)
	r := bufio.NewReader(conn)
	_, err = conn.Write([]byte("MONITOR\r\n"))
	require.NoError(e.t, err)
	ok, err := r.ReadString('\n')
	require.NoError(e.t, err)
	require.Equal(e.t, "+OK\r\n", ok)

	// Commands sent by clients, not those their scripts ran ("[0 lua]").
	call := regexp.MustCompile(`\[\d+ [\d.:]+\] "(?i:evalsha|eval)" .*:\{` +
		regexp.QuoteMeta(name) + `\}:call:([0-9a-f]{16})"`)
	m := &callMonitor{calls: make(map[string]int)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			if id := call.FindStringSubmatch(line); id != nil {
				m.mu.Lock()
				m.calls[id[1]]++
				m.mu.Unlock()
			}
		}
	}()
	e.t.Cleanup(func() {
		_ = conn.Close()
		<-done
	})
	return m
}

// resent returns the call ids sent more than once.
func (m *callMonitor) resent() map[string]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]int)
	for id, n := range m.calls {
		if n > 1 {
			out[id] = n
		}
	}
	return out
}
