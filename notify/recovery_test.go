package notify

import (
	"fmt"
	"testing"
	"time"

	"github.com/fairlock/fairlock/internal/faultproxy"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// watchSome registers five waiters on three channels.
func watchSome(t *testing.T, h *Hub) []*Waiter {
	t.Helper()
	prefix := redistest.Prefix(t)
	var waiters []*Waiter
	for i := range 5 {
		waiters = append(waiters, watch(t, h, fmt.Sprintf("%s:%d", prefix, i%3), fmt.Sprintf("w%d", i)))
	}
	return waiters
}

func TestKilledConnectionSignalsEveryWaiterAndDeliveryResumes(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	h := newHub(t, srv.Client(t), Options{})
	admin := srv.Client(t)
	waiters := watchSome(t, h)

	killed, err := admin.ClientKillByFilter(t.Context(), "TYPE", "pubsub").Result()
	require.NoError(t, err)
	require.EqualValues(t, 1, killed)

	for _, w := range waiters {
		requireSignal(t, w, "messages may have been lost while reconnecting")
	}
	for _, w := range waiters {
		requireDelivered(t, admin, w)
	}
}

func TestServerRestartSignalsEveryWaiterAndDeliveryResumes(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	h := newHub(t, srv.Client(t), Options{})
	pub := srv.Client(t)
	waiters := watchSome(t, h)

	require.NoError(t, srv.Restart())

	for _, w := range waiters {
		requireSignal(t, w, "messages may have been lost while the server was down")
	}
	for _, w := range waiters {
		requireDelivered(t, pub, w)
	}
}

func TestUnreachableServerIsRetriedAndWatchWaitsForIt(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	p := faultproxy.New(t, srv.Addr)
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	h := newHub(t, rdb, Options{})
	pub := srv.Client(t)
	waiters := watchSome(t, h)

	p.Reject()
	require.Eventually(t, func() bool { return p.Rejected() >= 3 },
		patience, time.Millisecond, "the hub stopped retrying")
	type result struct {
		w   *Waiter
		err error
	}
	late := make(chan result, 1)
	go func() {
		w, err := h.Watch(t.Context(), redistest.Prefix(t)+":late", "late")
		late <- result{w, err}
	}()
	require.Eventually(t, func() bool { return len(watched(h)) == 4 },
		patience, time.Millisecond, "Watch during the outage never registered")
	p.Heal()

	for _, w := range waiters {
		requireSignal(t, w, "messages may have been lost during the outage")
	}
	var w *Waiter
	select {
	case r := <-late:
		require.NoError(t, r.err, "Watch during the outage")
		w = r.w
	case <-time.After(patience):
		t.Fatal("Watch during the outage did not return after the server came back")
	}
	defer w.Stop()
	require.EqualValues(t, 1, publish(t, pub, w.channel, "late"),
		"the rebuild's confirmation released Watch before the channel was subscribed")
	requireSignal(t, w, "wake after the outage")
	for _, w := range waiters {
		requireDelivered(t, pub, w)
	}
}

func TestHalfOpenConnectionIsDetectedAndRebuilt(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	p := faultproxy.New(t, srv.Addr)
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	h := newHub(t, rdb, Options{Heartbeat: 100 * time.Millisecond})
	pub := srv.Client(t)
	waiters := watchSome(t, h)
	require.Equal(t, 1, p.Accepted())

	p.FreezeExisting()

	for _, w := range waiters {
		requireSignal(t, w, "the silent connection must be rebuilt")
	}
	require.GreaterOrEqual(t, p.Accepted(), 2, "the hub signalled without reconnecting")
	for _, w := range waiters {
		requireDelivered(t, pub, w)
	}
}

func TestSubscriptionsSurviveRepeatedRebuilds(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	p := faultproxy.New(t, srv.Addr)
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	h := newHub(t, rdb, Options{Heartbeat: 50 * time.Millisecond})
	pub := srv.Client(t)
	prefix := redistest.Prefix(t)
	stable := watch(t, h, prefix+":stable", "s")

	for i := range 5 {
		p.FreezeExisting()
		// Waiters come and go while the connection is being replaced.
		w := watch(t, h, fmt.Sprintf("%s:%d", prefix, i), "w")
		requireDelivered(t, pub, w)
		w.Stop()
		requireDelivered(t, pub, stable)
	}
	require.Equal(t, []string{stable.channel}, watched(h))
}
