package notify

import (
	"time"

	"testing"

	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// connState returns the hub's only connection's PubSub and how many times
// Missed made it rebuild.
func connState(t *testing.T, h *Hub) (*redis.PubSub, int) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	c := h.conns[nil]
	require.NotNil(t, c, "the hub has a connection")
	return c.ps, c.refreshes
}

func TestRepeatedMissesRebuildTheConnectionOnceAndASingleOneDoesNot(t *testing.T) {
	srv := redistest.Shared(t)
	pub := srv.Client(t)
	h := newHub(t, srv.Client(t), Options{})
	channel := redistest.Prefix(t) + ":missed"
	w0 := watch(t, h, channel, "w0")
	w1 := watch(t, h, channel, "w1")
	granted := watch(t, h, channel, "granted")
	requireDelivered(t, pub, granted)
	before, _ := connState(t, h)

	w0.Missed()
	w0.Missed() // a waiter counts once
	granted.Missed()
	ps, n := connState(t, h)
	require.Same(t, before, ps, "a single miss does not rebuild")
	require.Zero(t, n)
	requireNoSignal(t, w1, "no rebuild")

	w1.Missed()
	_, n = connState(t, h)
	require.Equal(t, 1, n, "the second miss rebuilds")
	for _, w := range []*Waiter{w0, w1, granted} {
		requireSignal(t, w, "signalled after the rebuild")
	}
	require.Eventually(t, func() bool {
		ps, _ := connState(t, h)
		return ps != before
	}, patience, 5*time.Millisecond, "a new pub/sub connection")
	requireDelivered(t, pub, w1)

	// Waiters the rebuild signalled are excused; two fresh misses right
	// after are held back by the rate limit.
	after, _ := connState(t, h)
	w0.Missed()
	w2 := watch(t, h, channel, "w2")
	w3 := watch(t, h, channel, "w3")
	w2.Missed()
	w3.Missed()
	ps, n = connState(t, h)
	require.Equal(t, 1, n, "rate-limited: one rebuild per %v", refreshEvery)
	require.Same(t, after, ps)
	requireDelivered(t, pub, w3)
}
