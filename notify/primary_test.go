package notify

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock/internal/redistest"
)

// moves returns how many times a dial of the client elsewhere made the
// hub rebuild its only connection.
func moves(t *testing.T, h *Hub) int {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	c := h.conns[nil]
	require.NotNil(t, c, "the hub has a connection")
	return c.moves
}

// After a graceful Sentinel failover the old primary stays up and keeps
// the hub's subscription; the hub of a failover client moves it to the new
// primary as soon as the client dials there, without waiting for a missed
// hand-over, and tells Options.Moved. Dials to the same primary move
// nothing.
func TestHubOfAFailoverClientMovesToTheNewPrimaryAtTheClientsFirstDialThere(t *testing.T) {
	redistest.Slow(t)
	t.Parallel()
	set := redistest.SentinelFor(t, 1, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	rdb := set.Client(t)
	var told atomic.Int32
	h := newHub(t, rdb, Options{Moved: func() { told.Add(1) }})
	channel := redistest.Prefix(t) + ":moved"
	w := watch(t, h, channel, "w")
	requireDelivered(t, rdb, w)

	// New pooled connections to the same primary move nothing.
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			cn := rdb.Conn()
			defer cn.Close()
			_ = cn.Ping(ctx).Err()
			_ = cn.Set(ctx, fmt.Sprintf("%s:%d", channel, i), 1, time.Minute).Err()
		})
	}
	wg.Wait()
	require.Zero(t, moves(t, h))
	require.Zero(t, told.Load())
	requireNoSignal(t, w, "no move")

	old, err := set.Failover(ctx)
	require.NoError(t, err)
	primary, err := set.WaitFailover(old, time.Minute)
	require.NoError(t, err)
	// go-redis heard the switch on its own Sentinel subscription and
	// dropped its pooled connections to the old primary; the next command
	// dials the new one.
	require.Eventually(t, func() bool {
		if err := rdb.Ping(ctx).Err(); err != nil {
			return false
		}
		return told.Load() > 0
	}, patience, 10*time.Millisecond, "the hub saw the client dial the new primary")
	requireSignal(t, w, "the rebuild signals the waiter")
	require.Equal(t, 1, moves(t, h))

	// One publication on the new primary reaches the waiter.
	pub := set.Server(primary).Client(t)
	require.Eventually(t, func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		c := h.conns[nil]
		return c != nil && !c.rebuilding && c.addr == primary
	}, patience, 5*time.Millisecond, "the connection is rebuilt on %s", primary)
	token := tokenSeq.Add(1)
	require.NoError(t, pub.Publish(ctx, channel, fmt.Sprintf("w %d", token)).Err())
	select {
	case <-w.C():
		got, ok := w.Grant()
		require.True(t, ok)
		require.Equal(t, token, got)
	case <-time.After(5 * time.Second):
		t.Fatal("a grant published on the new primary did not arrive")
	}
}

// A dial of the hub's own connection never counts as the client's: with
// the primary where it was, rebuilding the connection moves nothing.
func TestHubOfAFailoverClientDoesNotMoveOnItsOwnRedials(t *testing.T) {
	redistest.Slow(t)
	t.Parallel()
	set := redistest.SentinelFor(t, 0, 1)
	rdb := set.Client(t)
	var told atomic.Int32
	h := newHub(t, rdb, Options{Moved: func() { told.Add(1) }})
	channel := redistest.Prefix(t) + ":own"
	w := watch(t, h, channel, "w")
	requireDelivered(t, rdb, w)
	for range 3 {
		before, _ := connState(t, h)
		h.mu.Lock()
		ps := h.conns[nil].ps
		h.mu.Unlock()
		closePubSub(ps) // as a failure would
		require.Eventually(t, func() bool {
			ps, _ := connState(t, h)
			return ps != before
		}, patience, 5*time.Millisecond)
		requireSignal(t, w, "rebuilt")
		requireDelivered(t, rdb, w)
	}
	require.NoError(t, rdb.Ping(context.Background()).Err())
	require.Zero(t, moves(t, h))
	require.Zero(t, told.Load())

	// The hook stays on the client after Close and does nothing then.
	require.NoError(t, h.Close())
	h.dialed(context.Background(), time.Now(), "127.0.0.1:1")
	require.Zero(t, told.Load())
	require.NoError(t, rdb.Ping(context.Background()).Err())
}

var _ redis.Hook = primaryHook{}

// Two hubs can hook one failover client: a dial of one hub's connection is
// neither a dial of the other hub's connection nor one of the client.
func TestHubsSharingAFailoverClientKeepToTheirOwnDials(t *testing.T) {
	redistest.Slow(t)
	t.Parallel()
	set := redistest.SentinelFor(t, 0, 1)
	rdb := set.Client(t)
	channel := redistest.Prefix(t) + ":shared"
	a, b := newHub(t, rdb, Options{}), newHub(t, rdb, Options{})
	requireDelivered(t, rdb, watch(t, a, channel, "w"))
	requireDelivered(t, rdb, watch(t, b, channel, "w"))
	conn := func(h *Hub) (context.Context, string) {
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.conns[nil].ctx, h.conns[nil].addr
	}
	bctx, baddr := conn(b)
	_, aaddr := conn(a)
	a.dialed(bctx, time.Now(), "127.0.0.1:1")
	_, now := conn(b)
	require.Equal(t, baddr, now, "hub a changed nothing of hub b's connection")
	a.mu.Lock()
	primary := a.primary
	a.mu.Unlock()
	require.NotEqual(t, "127.0.0.1:1", primary, "hub b's dial is not the client's")
	_, now = conn(a)
	require.Equal(t, aaddr, now)
	require.Zero(t, moves(t, a))
}
