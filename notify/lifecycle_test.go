package notify

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fairlock/fairlock/internal/errs"
	"github.com/fairlock/fairlock/internal/faultproxy"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestCanceledWatchLeavesNoTrace(t *testing.T) {
	srv := redistest.Shared(t)
	h := newHub(t, srv.Client(t), Options{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()

	w, err := h.Watch(ctx, redistest.Prefix(t), "w")
	require.ErrorIs(t, err, context.Canceled)
	require.Nil(t, w)
	require.Empty(t, watched(h))
}

func TestWatchThatOutlivesItsContextLeavesNoTrace(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	p := faultproxy.New(t, srv.Addr)
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	h := newHub(t, rdb, Options{})
	prefix := redistest.Prefix(t)
	kept := watch(t, h, prefix+":kept", "w")

	p.FreezeAll() // the next SUBSCRIBE is never answered
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	w, err := h.Watch(ctx, prefix+":lost", "w")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Nil(t, w)
	require.Equal(t, []string{kept.channel}, watched(h))

	// Joining a channel that is already confirmed needs no round trip, so it
	// works even though the connection no longer answers.
	ctx, cancel = context.WithTimeout(context.Background(), patience)
	defer cancel()
	second, err := h.Watch(ctx, prefix+":kept", "second")
	require.NoError(t, err)
	second.Stop()
}

func TestWatchPendingAtCloseReturnsErrClosed(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	p := faultproxy.New(t, srv.Addr)
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	h := newHub(t, rdb, Options{})
	channel := redistest.Prefix(t)
	watch(t, h, channel+":open", "w") // connect before the freeze
	p.FreezeAll()

	result := make(chan error, 1)
	go func() {
		_, err := h.Watch(context.Background(), channel, "w")
		result <- err
	}()
	require.Eventually(t, func() bool { return len(watched(h)) == 2 },
		patience, time.Millisecond, "Watch never registered")
	select {
	case err := <-result:
		t.Fatalf("Watch returned before Redis could confirm: %v", err)
	default:
	}

	start := time.Now()
	require.NoError(t, h.Close())
	require.Less(t, time.Since(start), 2*time.Second, "Close was not prompt")
	select {
	case err := <-result:
		require.ErrorIs(t, err, errs.ErrClosed)
	case <-time.After(patience):
		t.Fatal("pending Watch did not return after Close")
	}
	require.Equal(t, []string{channel + ":open"}, watched(h), "the pending waiter was not unregistered")
}

// A connection whose dial reached a server that then stopped answering,
// during the handshake, holds the connection's lock until the handshake's
// read gives up: with ContextTimeoutEnabled and a long read timeout, only
// a deadline of the hub's own call bounds it, and Close with it.
func TestCloseIsPromptWhileADialHangsInItsHandshake(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	p := faultproxy.New(t, srv.Addr)
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true, ReadTimeout: time.Minute, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	h := newHub(t, rdb, Options{})
	p.FreezeAll() // the first dial's handshake is never answered

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := h.Watch(ctx, redistest.Prefix(t), "w")
	require.ErrorIs(t, err, context.DeadlineExceeded)

	start := time.Now()
	require.NoError(t, h.Close())
	require.Less(t, time.Since(start), 3*time.Second, "Close waited for the handshake's read timeout")
}

func TestCloseIsPromptIdempotentAndStopsEveryGoroutine(t *testing.T) {
	before := goleak.IgnoreCurrent()
	srv := redistest.Shared(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	h := New(rdb, Options{Logger: testLogger(t)})
	prefix := redistest.Prefix(t)
	var waiters []*Waiter
	for i := range 10 {
		waiters = append(waiters, watch(t, h, fmt.Sprintf("%s:%d", prefix, i%3), fmt.Sprintf("w%d", i)))
	}

	select {
	case <-h.done:
		t.Fatal("Done closed before Close")
	default:
	}
	start := time.Now()
	require.NoError(t, h.Close())
	require.Less(t, time.Since(start), 2*time.Second, "Close was not prompt")
	require.NoError(t, h.Close(), "second Close")
	select {
	case <-h.done:
	default:
		t.Fatal("Done not closed after Close")
	}

	_, err := h.Watch(context.Background(), prefix+":0", "late")
	require.ErrorIs(t, err, errs.ErrClosed)
	for _, w := range waiters {
		w.Stop() // after Close: allowed, and a no-op on the network
		requireNoSignal(t, w, "Close sends no signal")
	}
	require.NoError(t, rdb.Close())
	goleak.VerifyNone(t, before)
}

func TestUnusedHubOpensNothingAndClosesCleanly(t *testing.T) {
	before := goleak.IgnoreCurrent()
	srv := redistest.Shared(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	h := New(rdb, Options{})
	h.mu.Lock()
	opened := len(h.conns) > 0
	h.mu.Unlock()
	require.False(t, opened, "New opened a pub/sub connection")
	require.NoError(t, h.Close())
	_, err := h.Watch(context.Background(), redistest.Prefix(t), "w")
	require.True(t, errors.Is(err, errs.ErrClosed))
	require.NoError(t, rdb.Close())
	goleak.VerifyNone(t, before)
}

func TestStopIsIdempotentAndKeepsChannelsOthersWatch(t *testing.T) {
	srv := redistest.Shared(t)
	h := newHub(t, srv.Client(t), Options{})
	pub := srv.Client(t)
	channel := redistest.Prefix(t)
	a := watch(t, h, channel, "a")
	b := watch(t, h, channel, "b")

	a.Stop()
	a.Stop()
	require.Equal(t, []string{channel}, watched(h))
	require.EqualValues(t, 1, publish(t, pub, channel, "b 1"), "b still subscribed")
	requireSignal(t, b, "grant for b")
	require.EqualValues(t, 1, publish(t, pub, channel, "a 2"))
	requireDelivered(t, pub, b) // everything before it was handled
	requireNoSignal(t, a, "a stopped")
	_, ok := a.Grant()
	require.False(t, ok, "a stopped waiter receives no grant")

	again := watch(t, h, channel, "a") // the id is free again
	require.EqualValues(t, 1, publish(t, pub, channel, "a"))
	requireSignal(t, again, "wake for the new a")

	b.Stop()
	again.Stop()
	b.Stop()
	require.Empty(t, watched(h))
	require.Eventually(t, func() bool { return numSub(t, pub, channel)[channel] == 0 },
		patience, 10*time.Millisecond, "channel still subscribed after its last waiter stopped")
}

func TestDuplicateIDOnAChannelIsRejected(t *testing.T) {
	srv := redistest.Shared(t)
	h := newHub(t, srv.Client(t), Options{})
	channel := redistest.Prefix(t)
	watch(t, h, channel, "w")
	_, err := h.Watch(context.Background(), channel, "w")
	require.Error(t, err)
	other := watch(t, h, channel+":other", "w")
	require.NotNil(t, other, "ids need only be unique per channel")
}

// The zero Options are ready to use: no logger discards, no heartbeat is
// one second, no Mode is Classic.
func TestZeroOptionsMeanTheDocumentedDefaults(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled
	t.Cleanup(func() { _ = rdb.Close() })
	h := New(rdb, Options{})
	t.Cleanup(func() { _ = h.Close() })
	require.NotNil(t, h.log)
	require.Equal(t, time.Second, h.heartbeat)
	require.NoError(t, h.learnMode(t.Context()))
	h.mu.Lock()
	mode := h.mode
	h.mu.Unlock()
	require.Equal(t, Classic, mode)
	h = New(rdb, Options{Heartbeat: -time.Minute})
	t.Cleanup(func() { _ = h.Close() })
	require.Equal(t, time.Second, h.heartbeat, "a negative heartbeat means the default too")
}
