package notify

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fairlock/fairlock/internal/errs"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// newRing returns a ring over two servers of the test's own, closed when t
// ends, and the servers.
func newRing(t *testing.T, opts redis.RingOptions) (*redis.Ring, []*redistest.Server) {
	t.Helper()
	srvs := []*redistest.Server{startServer(t), startServer(t)}
	opts.Addrs = map[string]string{"a": srvs[0].Addr, "b": srvs[1].Addr}
	ring := redis.NewRing(&opts)
	t.Cleanup(func() { _ = ring.Close() })
	return ring, srvs
}

// lockChannels returns n wake channels of distinct locks.
func lockChannels(t *testing.T, n int) []string {
	prefix := redistest.Prefix(t)
	channels := make([]string, n)
	for i := range channels {
		channels[i] = fmt.Sprintf("%s:{lock%d}:wake", prefix, i)
	}
	return channels
}

// owner returns the address of the ring shard that owns channel.
func owner(t testing.TB, ring *redis.Ring, channel string) string {
	t.Helper()
	shard, err := ring.GetShardClientForKey(channel)
	require.NoError(t, err)
	return shard.Options().Addr
}

// pubsubConns returns how many pub/sub connections srv serves.
func pubsubConns(t testing.TB, srv *redistest.Server) int {
	t.Helper()
	list, err := srv.Client(t).Do(t.Context(), "CLIENT", "LIST", "TYPE", "pubsub").Text()
	require.NoError(t, err)
	n := 0
	for range strings.Lines(list) {
		n++
	}
	return n
}

func TestRingSubscribesEachChannelOnTheShardThatOwnsIt(t *testing.T) {
	redistest.Slow(t)
	ring, srvs := newRing(t, redis.RingOptions{})
	h := newHub(t, ring, Options{})
	channels := lockChannels(t, 40)
	owned := make(map[string][]string) // shard address -> its channels
	for _, channel := range channels {
		addr := owner(t, ring, channel)
		owned[addr] = append(owned[addr], channel)
	}
	require.Len(t, owned, 2, "the test needs channels on both shards")

	waiters := make([]*Waiter, len(channels))
	for i, channel := range channels {
		waiters[i] = watch(t, h, channel, fmt.Sprintf("w%d", i))
	}
	for i, w := range waiters {
		require.EqualValues(t, 1, publish(t, ring, w.channel, fmt.Sprintf("w%d %d", i, i+1)),
			"%s is not subscribed on the shard that owns it", w.channel)
		requireSignal(t, w, "grant published through the ring")
		token, ok := w.Grant()
		require.True(t, ok)
		require.EqualValues(t, i+1, token)
	}

	for _, srv := range srvs {
		require.Equal(t, 1, pubsubConns(t, srv), "pub/sub connections of the hub on shard %s", srv.Addr)
		for channel, n := range numSub(t, srv.Client(t), channels...) {
			want := 0
			if owner(t, ring, channel) == srv.Addr {
				want = 1
			}
			require.EqualValues(t, want, n, "subscriptions of %s on shard %s", channel, srv.Addr)
		}
	}
}

func TestHubOverARingClosesCleanly(t *testing.T) {
	redistest.Slow(t)
	srvs := []*redistest.Server{startServer(t), startServer(t)}
	before := goleak.IgnoreCurrent()
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": srvs[0].Addr, "b": srvs[1].Addr}})
	h := New(ring, Options{Logger: testLogger(t)})
	channels := lockChannels(t, 10)
	var waiters []*Waiter
	for i, channel := range channels {
		waiters = append(waiters, watch(t, h, channel, fmt.Sprintf("w%d", i)))
	}
	waiters[0].Stop()

	start := time.Now()
	require.NoError(t, h.Close())
	require.Less(t, time.Since(start), 2*time.Second, "Close was not prompt")
	require.NoError(t, h.Close(), "second Close")
	_, err := h.Watch(context.Background(), channels[1], "late")
	require.ErrorIs(t, err, errs.ErrClosed)
	for _, w := range waiters {
		w.Stop()
	}
	require.NoError(t, ring.Close())
	goleak.VerifyNone(t, before)
}

func TestRingShardThatGoesDownHandsItsChannelsToTheLiveShard(t *testing.T) {
	redistest.Slow(t)
	ring, srvs := newRing(t, redis.RingOptions{HeartbeatFrequency: 20 * time.Millisecond})
	h := newHub(t, ring, Options{Heartbeat: 100 * time.Millisecond})
	channels := lockChannels(t, 20)
	live, doomed := srvs[0], srvs[1]
	var waiters, movers []*Waiter
	for i, channel := range channels {
		w := watch(t, h, channel, fmt.Sprintf("w%d", i))
		waiters = append(waiters, w)
		if owner(t, ring, channel) == doomed.Addr {
			movers = append(movers, w)
		}
	}
	require.NotEmpty(t, movers, "the test needs channels on the shard that goes down")
	require.Less(t, len(movers), len(waiters), "the test needs channels on the shard that stays")

	doomed.Stop()
	require.Eventually(t, func() bool {
		for _, channel := range channels {
			if owner(t, ring, channel) != live.Addr {
				return false
			}
		}
		return true
	}, patience, 10*time.Millisecond, "the ring never noticed the shard was down")

	for _, w := range movers {
		requireSignal(t, w, "messages may have been lost while the channel moved")
	}
	for _, w := range waiters {
		requireDelivered(t, ring, w)
	}
	require.Len(t, watched(h), len(channels))
	require.Equal(t, 1, pubsubConns(t, live), "pub/sub connections of the hub on the live shard")
}
