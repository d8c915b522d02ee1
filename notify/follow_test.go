package notify

import (
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock/internal/redistest"
)

// The hub takes the newest configuration epoch that the hellos give, of
// the master they name first: a hello of an older or the same epoch, or of
// another master, moves nothing; one of a newer epoch naming another
// address moves the primary there.
func TestFollowerTakesTheNewestConfigurationEpochOnly(t *testing.T) {
	rdb := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "m", SentinelAddrs: []string{"127.0.0.1:1"}})
	t.Cleanup(func() { _ = rdb.Close() })
	var told atomic.Int32
	h := newHub(t, rdb, Options{Moved: func() { told.Add(1) }})
	hello := func(master, port, epoch string) {
		h.follow.hello(strings.Join([]string{"127.0.0.1", "1", "id", epoch, master, "127.0.0.1", port, epoch}, ","))
	}
	for _, step := range []struct {
		master, port, epoch string
		primary             string
		moves               int32
	}{
		{"m", "7001", "3", "127.0.0.1:7001", 0}, // the first names the primary
		{"m", "7002", "3", "127.0.0.1:7001", 0}, // the same epoch: a sentinel that lags
		{"m", "7002", "2", "127.0.0.1:7001", 0}, // an older one
		{"other", "7009", "9", "127.0.0.1:7001", 0},
		{"m", "7001", "4", "127.0.0.1:7001", 0}, // newer, the same address: an aborted failover
		{"m", "7002", "5", "127.0.0.1:7002", 1},
		{"m", "7001", "4", "127.0.0.1:7002", 1},
	} {
		hello(step.master, step.port, step.epoch)
		h.follow.mu.Lock()
		primary := h.follow.primary
		h.follow.mu.Unlock()
		require.Equal(t, step.primary, primary, "after %+v", step)
		require.Equal(t, step.moves, told.Load(), "after %+v", step)
	}
	h.follow.hello("not,a,hello")
	require.Equal(t, int32(1), told.Load())
}

// A failover client asks one sentinel. When that sentinel hears of a
// graceful failover late (here: it is paused until 3 s after the switch),
// the hub hears of it from the sentinel that led it: within a second of
// its +switch-master the client keeps no connection to the old primary,
// its next command reaches the new one, and the waiters are signalled.
func TestHubLeavesTheOldPrimaryWhenAnySentinelAnnouncesTheSwitch(t *testing.T) {
	redistest.Slow(t)
	t.Parallel()
	set := redistest.SentinelFor(t, 1, 3)
	switches := set.WatchSwitches(t)
	ctx := t.Context()
	name := redistest.Prefix(t)
	rdb := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName: set.MasterName(), SentinelAddrs: set.SentinelAddrs(), ClientName: name,
	})
	t.Cleanup(func() { _ = rdb.Close() })
	var told atomic.Int32
	h := newHub(t, rdb, Options{Moved: func() { told.Add(1) }})
	w := watch(t, h, name+":switch", "w")
	require.NoError(t, rdb.Ping(ctx).Err())
	require.Eventually(t, func() bool { return following(h) == len(set.SentinelAddrs()) },
		patience, 10*time.Millisecond, "the hub follows every sentinel")

	var leader string
	for _, s := range set.SentinelAddrs() {
		names, err := redistest.ClientNames(ctx, s, false)
		require.NoError(t, err)
		if !slices.Contains(names, name) {
			leader = s
		} else {
			defer set.PauseSentinel(t, s)() // the sentinel the client asks
		}
	}
	old, err := set.FailoverVia(ctx, leader)
	require.NoError(t, err)
	sw, err := switches.First(time.Now().Add(-time.Minute), 30*time.Second)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		names, err := redistest.ClientNames(ctx, old, true)
		return err == nil && !slices.Contains(names, name) && told.Load() > 0
	}, time.Until(sw.At.Add(time.Second)), 5*time.Millisecond, "the client left %s", old)
	requireSignal(t, w, "the connection moved")
	info, err := rdb.Info(ctx, "server").Result()
	require.NoError(t, err)
	require.Contains(t, info, "tcp_port:"+sw.New[strings.LastIndex(sw.New, ":")+1:]+"\r\n")
}

// following returns how many sentinels the hub follows.
func following(h *Hub) int {
	h.follow.mu.Lock()
	defer h.follow.mu.Unlock()
	n := 0
	for _, l := range h.follow.links {
		if l.sc != nil {
			n++
		}
	}
	return n
}

// A user whose ACL refuses Sentinel's hellos loses nothing but the
// following of every sentinel: the refusal is logged once, and the hub's
// waiters are served as before.
func TestHubOfAUserWithoutTheHellosChannelServesItsWaiters(t *testing.T) {
	redistest.Slow(t)
	t.Parallel()
	set := redistest.SentinelFor(t, 0, 1)
	ctx := t.Context()
	primary, err := set.Primary(ctx)
	require.NoError(t, err)
	prefix := redistest.Prefix(t)
	require.NoError(t, set.Server(primary).Client(t).Do(ctx, "ACL", "SETUSER", "waiter", "on", ">pw",
		"resetchannels", "&"+prefix+":*", "allcommands", "allkeys").Err())
	rdb := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: set.MasterName(),
		SentinelAddrs: set.SentinelAddrs(), Username: "waiter", Password: "pw"})
	t.Cleanup(func() { _ = rdb.Close() })
	var logged strings.Builder
	var mu sync.Mutex
	h := newHub(t, rdb, Options{Logger: slog.New(slog.NewTextHandler(lockedWriter{&mu, &logged}, nil))})
	w := watch(t, h, prefix+":w", "w")
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return strings.Contains(logged.String(), "hellos refused")
	}, patience, 10*time.Millisecond)
	requireDelivered(t, rdb, w)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, 1, strings.Count(logged.String(), "hellos refused"), logged.String())
}

// lockedWriter writes to w under mu.
type lockedWriter struct {
	mu *sync.Mutex
	w  *strings.Builder
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// Close does not wait for the hub's subscriptions to Sentinel to time
// out: they are closed at once. With the sentinel paused, nothing arrives
// on them, and a receive would last its full 5 s.
func TestCloseOfAFailoverClientsHubReturnsPromptly(t *testing.T) {
	redistest.Slow(t)
	t.Parallel()
	set := redistest.SentinelFor(t, 0, 1)
	rdb := set.Client(t)
	h := New(rdb, Options{Logger: testLogger(t)})
	w, err := h.Watch(t.Context(), redistest.Prefix(t)+":close", "w")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return following(h) == 1 }, patience, 10*time.Millisecond)
	resume := set.PauseSentinel(t, set.SentinelAddrs()[0])
	defer resume()
	time.Sleep(100 * time.Millisecond) // both subscriptions into a receive that nothing ends
	w.Stop()
	start := time.Now()
	require.NoError(t, h.Close())
	require.Less(t, time.Since(start), time.Second)
}
