package notify

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// patience bounds every wait for an event in these tests. It is generous:
// the events normally take milliseconds.
const patience = 15 * time.Second

// withServer runs the tests with the shared redis-server, so that goleak
// looks for leaks only after the server has been stopped.
type withServer struct{ m *testing.M }

func (s withServer) Run() int { return redistest.Main(s.m) }

func TestMain(m *testing.M) {
	redistest.QuickLoop(6)
	goleak.VerifyTestMain(withServer{m})
}

// testLogger sends the hub's log to the test's log.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// newHub returns a hub that is closed when t ends.
func newHub(t testing.TB, rdb Subscriber, opts Options) *Hub {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = testLogger(t)
	}
	h := New(rdb, opts)
	t.Cleanup(func() { _ = h.Close() })
	return h
}

// watch registers a waiter that is stopped when t ends.
func watch(t testing.TB, h *Hub, channel, id string) *Waiter {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	w, err := h.Watch(ctx, channel, id)
	require.NoError(t, err)
	t.Cleanup(w.Stop)
	return w
}

// requireSignal waits for a signal on w.
func requireSignal(t testing.TB, w *Waiter, what string) {
	t.Helper()
	select {
	case <-w.C():
	case <-time.After(patience):
		t.Fatalf("waiter %q got no signal within %v: %s", w.id, patience, what)
	}
}

// requireNoSignal checks that no signal is pending on w.
func requireNoSignal(t testing.TB, w *Waiter, what string) {
	t.Helper()
	select {
	case <-w.C():
		t.Fatalf("waiter %q was signalled: %s", w.id, what)
	default:
	}
}

var tokenSeq atomic.Int64

// publisher is a client that can PUBLISH: a *redis.Client, or a
// *redis.Ring, which publishes on the shard that owns the channel.
type publisher interface {
	Publish(ctx context.Context, channel string, message any) *redis.IntCmd
}

// requireDelivered publishes a grant with a fresh token for w until w has
// received that very grant. Publishing repeatedly lets a test wait for a
// connection to come back without guessing when it does.
func requireDelivered(t testing.TB, pub publisher, w *Waiter) {
	t.Helper()
	token := tokenSeq.Add(1)
	payload := fmt.Sprintf("%s %d", w.id, token)
	deadline := time.After(patience)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = pub.Publish(ctx, w.channel, payload).Err() // the server may be coming back
		cancel()
		select {
		case <-w.C():
			if got, ok := w.Grant(); ok && got == token {
				return
			}
		case <-tick.C:
		case <-deadline:
			t.Fatalf("grant %q on %q was not delivered within %v", payload, w.channel, patience)
		}
	}
}

// publish publishes payload on channel and returns how many subscribers
// received it.
func publish(t testing.TB, pub publisher, channel, payload string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	n, err := pub.Publish(ctx, channel, payload).Result()
	require.NoError(t, err)
	return n
}

// watched returns the channels that have waiters, as the hub sees them.
func watched(h *Hub) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var names []string
	for name := range h.topics.All() {
		names = append(names, name)
	}
	return names
}

// numSub returns the server's subscriber count of each channel.
func numSub(t testing.TB, rdb *redis.Client, channels ...string) map[string]int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	n, err := rdb.PubSubNumSub(ctx, channels...).Result()
	require.NoError(t, err)
	return n
}

// startServer starts a redis-server of the test's own, for tests that kill
// connections or restart the server.
func startServer(t testing.TB) *redistest.Server {
	t.Helper()
	srv, err := redistest.Start()
	require.NoError(t, err)
	t.Cleanup(srv.Stop)
	return srv
}
