package notify

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// refusalBound bounds how long a refused Watch may take. Redis answers a
// refused SUBSCRIBE at once; a Watch that waits for its context instead
// fails the test.
const refusalBound = 2 * time.Second

// checkRefused checks that err is the error of a Watch of channel whose
// SUBSCRIBE Redis answered with NOPERM.
func checkRefused(t assert.TestingT, err error, channel string) bool {
	var reply redis.Error
	return assert.Error(t, err) &&
		assert.NotErrorIs(t, err, context.DeadlineExceeded, "Watch waited for its context instead of failing") &&
		assert.ErrorAs(t, err, &reply, "the error does not wrap the server's reply") &&
		assert.True(t, strings.HasPrefix(reply.Error(), "NOPERM"), "reply: %v", reply) &&
		assert.Contains(t, err.Error(), fmt.Sprintf("%q", channel), "the error does not name the channel")
}

func TestRefusedSubscriptionFailsWatchAtOnceAndTheHubCarriesOn(t *testing.T) {
	t.Parallel()
	for _, protocol := range []int{2, 3} {
		t.Run(fmt.Sprintf("RESP%d", protocol), func(t *testing.T) {
			srv := startServer(t)
			admin := srv.Client(t)
			prefix := redistest.Prefix(t)
			denied := prefix + ":{denied}:wake"
			// Everything but the channels outside prefix:ok:*.
			require.NoError(t, admin.Do(t.Context(), "ACL", "SETUSER", "limited", "on", ">pw",
				"~*", "+@all", "-@dangerous", "resetchannels", "&"+prefix+":ok:*").Err())
			rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: "limited", Password: "pw", Protocol: protocol})
			t.Cleanup(func() { _ = rdb.Close() })
			h := newHub(t, rdb, Options{})

			refused := func(id string) error {
				ctx, cancel := context.WithTimeout(context.Background(), refusalBound)
				defer cancel()
				w, err := h.Watch(ctx, denied, id)
				assert.Nil(t, w)
				return err
			}

			// First on a fresh connection, which RESP2 has not yet put in
			// subscribed mode.
			checkRefused(t, refused("first"), denied)
			require.Empty(t, watched(h), "the refused channel was not dropped")

			allowed := watch(t, h, prefix+":ok:1", "a")
			require.EqualValues(t, 1, publish(t, admin, allowed.channel, "a 5"))
			requireSignal(t, allowed, "grant on an allowed channel")
			ps := currentPubSub(h)

			// Every concurrent Watch of the refused channel fails, on a
			// connection that is now subscribed.
			var wg sync.WaitGroup
			for i := range 5 {
				wg.Go(func() { checkRefused(t, refused(fmt.Sprintf("w%d", i)), denied) })
			}
			wg.Wait()
			require.Equal(t, []string{allowed.channel}, watched(h))
			require.Same(t, ps, currentPubSub(h), "a refusal made the hub rebuild its connection")

			requireDelivered(t, admin, allowed)
			other := watch(t, h, prefix+":ok:2", "b")
			require.EqualValues(t, 1, publish(t, admin, other.channel, "b"))
			requireSignal(t, other, "wake on a channel watched after the refusals")
			require.EqualValues(t, 0, numSub(t, admin, denied)[denied])

			start := time.Now()
			require.NoError(t, h.Close())
			require.Less(t, time.Since(start), 2*time.Second, "Close was not prompt")
		})
	}
}

// currentPubSub returns the pub/sub connection of a hub over a client that
// is not sharded.
func currentPubSub(h *Hub) *redis.PubSub {
	h.mu.Lock()
	defer h.mu.Unlock()
	if c := h.conns[nil]; c != nil {
		return c.ps
	}
	return nil
}

// panicky is a Subscriber whose Subscribe panics, as a *redis.Ring's does
// when it is given no channel.
type panicky struct{}

func (panicky) Subscribe(context.Context, ...string) *redis.PubSub {
	panic("at least one channel is required")
}

func TestSubscribePanicIsAWatchErrorAndCloseStillReturns(t *testing.T) {
	h := New(panicky{}, Options{Logger: testLogger(t)})
	for i := range 2 {
		ctx, cancel := context.WithTimeout(context.Background(), patience)
		w, err := h.Watch(ctx, "chan", fmt.Sprintf("w%d", i))
		cancel()
		require.Nil(t, w)
		require.ErrorContains(t, err, "at least one channel is required")
		require.NotErrorIs(t, err, context.DeadlineExceeded)
	}
	require.Empty(t, watched(h))
	requireCloseReturns(t, h)
}

// failsAfterFirst subscribes through rdb once and panics with errGone
// afterwards.
type failsAfterFirst struct {
	rdb   *redis.Client
	calls atomic.Int32
}

var errGone = errors.New("client gone")

func (f *failsAfterFirst) Subscribe(ctx context.Context, channels ...string) *redis.PubSub {
	if f.calls.Add(1) > 1 {
		panic(errGone)
	}
	return f.rdb.Subscribe(ctx, channels...)
}

func TestSubscribePanicDuringARebuildFailsItsChannelsAndCloseStillReturns(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	admin := srv.Client(t)
	h := newHub(t, &failsAfterFirst{rdb: srv.Client(t)}, Options{})
	waiters := watchSome(t, h)

	killed, err := admin.ClientKillByFilter(t.Context(), "TYPE", "pubsub").Result()
	require.NoError(t, err)
	require.EqualValues(t, 1, killed)

	for _, w := range waiters {
		requireSignal(t, w, "the channel's subscription is lost")
	}
	require.Eventually(t, func() bool { return len(watched(h)) == 0 },
		patience, time.Millisecond, "the channels of the connection that could not be rebuilt were kept")
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	_, err = h.Watch(ctx, redistest.Prefix(t), "late")
	require.ErrorIs(t, err, errGone)
	requireCloseReturns(t, h)
}

// requireCloseReturns closes h and checks that Close returns promptly.
func requireCloseReturns(t *testing.T, h *Hub) {
	t.Helper()
	closed := make(chan struct{})
	go func() {
		_ = h.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(patience):
		t.Fatal("Close blocked")
	}
}
