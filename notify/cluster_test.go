package notify

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/fairlock/fairlock/internal/errs"
	"github.com/fairlock/fairlock/internal/redistest"
)

// Sharded mode on a real Redis Cluster of 3 masters with a replica each.

// shardedHub returns a hub in Sharded mode over rdb, closed when t ends.
func shardedHub(t *testing.T, rdb *redis.ClusterClient, opts Options) *Hub {
	t.Helper()
	opts.Mode = func(context.Context) (Mode, error) { return Sharded, nil }
	return newHub(t, rdb, opts)
}

// spublisher publishes with SPUBLISH through a cluster client, asking it
// to reload its slot map first: after a failover go-redis would keep
// sending a dead master's slots to it.
type spublisher struct{ rdb *redis.ClusterClient }

func (p spublisher) Publish(ctx context.Context, channel string, message any) *redis.IntCmd {
	p.rdb.ReloadState(ctx)
	return p.rdb.SPublish(ctx, channel, message)
}

// channelsByMaster returns perMaster lock wake channels served by each
// master, by master address.
func channelsByMaster(t *testing.T, c *redistest.Cluster, perMaster int) map[string][]string {
	t.Helper()
	ctx := t.Context()
	masters, err := c.Masters(ctx)
	require.NoError(t, err)
	require.Len(t, masters, 3)
	prefix := redistest.Prefix(t)
	byMaster := make(map[string][]string)
	full := 0
	for i := 0; full < len(masters); i++ {
		require.Less(t, i, 1000, "no lock names on every master")
		channel := fmt.Sprintf("%s:{lock%d}:wake", prefix, i)
		m, err := c.MasterOf(ctx, channel)
		require.NoError(t, err)
		if len(byMaster[m]) < perMaster {
			byMaster[m] = append(byMaster[m], channel)
			if len(byMaster[m]) == perMaster {
				full++
			}
		}
	}
	return byMaster
}

// nodeConns returns how many pub/sub connections the node at addr serves.
func nodeConns(t *testing.T, c *redistest.Cluster, addr string) int {
	t.Helper()
	return pubsubConns(t, c.Node(addr))
}

// shardNumSub returns the node's sharded subscriber count of each channel.
func shardNumSub(t *testing.T, c *redistest.Cluster, addr string, channels ...string) map[string]int64 {
	t.Helper()
	n, err := c.Node(addr).Client(t).PubSubShardNumSub(t.Context(), channels...).Result()
	require.NoError(t, err)
	return n
}

// requireLayout checks that the hub holds exactly one pub/sub connection
// on each master in want, subscribed to exactly the channels listed for
// it, and none on any other node.
func requireLayout(t *testing.T, c *redistest.Cluster, want map[string][]string) {
	t.Helper()
	require.Eventually(t, func() bool {
		masters, err := c.Masters(t.Context())
		require.NoError(t, err)
		replicas, err := c.Replicas(t.Context())
		require.NoError(t, err)
		for _, addr := range append(masters, replicas...) {
			n := 0
			if len(want[addr]) > 0 {
				n = 1
			}
			if nodeConns(t, c, addr) != n {
				return false
			}
			for _, m := range shardNumSub(t, c, addr, want[addr]...) {
				if m != 1 {
					return false
				}
			}
		}
		return true
	}, patience, 20*time.Millisecond, "one pub/sub connection per master with waiters, each channel on its master, none on replicas")
}

// watchAll registers a waiter on each channel, stopped when t ends.
func watchAll(t *testing.T, h *Hub, byMaster map[string][]string) map[string]*Waiter {
	t.Helper()
	waiters := make(map[string]*Waiter)
	for _, channels := range byMaster {
		for _, channel := range channels {
			waiters[channel] = watch(t, h, channel, "w-"+channel)
		}
	}
	return waiters
}

func TestShardedHubSubscribesEachChannelOnItsMasterOnly(t *testing.T) {
	redistest.Slow(t)
	c := redistest.ClusterFor(t, 3, 1)
	rdb := c.Client(t)
	h := shardedHub(t, rdb, Options{})
	byMaster := channelsByMaster(t, c, 3)
	waiters := watchAll(t, h, byMaster)

	for master, channels := range byMaster {
		for _, channel := range channels {
			w := waiters[channel]
			token := tokenSeq.Add(1)
			n, err := rdb.SPublish(t.Context(), channel, fmt.Sprintf("%s %d", w.id, token)).Result()
			require.NoError(t, err)
			require.EqualValues(t, 1, n, "%s is not subscribed on its master %s", channel, master)
			requireSignal(t, w, "grant published on the channel's master")
			got, ok := w.Grant()
			require.True(t, ok)
			require.Equal(t, token, got)
		}
	}
	requireLayout(t, c, byMaster)

	// A classic PUBLISH reaches nobody: the channels are sharded ones.
	for channel := range waiters {
		require.Zero(t, publish(t, rdb, channel, "w-"+channel+" 1"))
	}
}

func TestShardedHubRegroupsAChannelWhoseSlotMoved(t *testing.T) {
	redistest.Slow(t)
	c := redistest.ClusterFor(t, 3, 1)
	rdb := c.Client(t)
	h := shardedHub(t, rdb, Options{})
	byMaster := channelsByMaster(t, c, 2)
	waiters := watchAll(t, h, byMaster)
	requireLayout(t, c, byMaster)

	masters := slices.Sorted(func(yield func(string) bool) {
		for m := range byMaster {
			if !yield(m) {
				return
			}
		}
	})
	from, to := masters[0], masters[1]
	moving := byMaster[from][0]
	moveSlot(t, c, moving, from, to)

	requireSignal(t, waiters[moving], "a wake message may have been lost while the channel moved")
	for _, w := range waiters {
		requireDelivered(t, spublisher{rdb}, w)
	}
	want := map[string][]string{
		from:       byMaster[from][1:],
		to:         append(slices.Clone(byMaster[to]), moving),
		masters[2]: byMaster[masters[2]],
	}
	requireLayout(t, c, want)
}

func TestShardedHubFollowsAFailover(t *testing.T) {
	redistest.Slow(t)
	c := redistest.ClusterFor(t, 3, 1)
	rdb := c.Client(t)
	h := shardedHub(t, rdb, Options{Heartbeat: 200 * time.Millisecond})
	byMaster := channelsByMaster(t, c, 2)
	waiters := watchAll(t, h, byMaster)
	requireLayout(t, c, byMaster)

	var doomed string
	for m := range byMaster {
		doomed = m
		break
	}
	require.NoError(t, c.Kill(doomed))
	heir, err := c.WaitFailover(byMaster[doomed][0], doomed, patience)
	require.NoError(t, err)

	requireFailedOver(t, c, rdb, waiters, byMaster, doomed, heir)
}

// moveSlot hands the slot of key from master from to master to, as a
// resharding does, and waits until a live node agrees.
func moveSlot(t *testing.T, c *redistest.Cluster, key, from, to string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), patience)
	defer cancel()
	move, err := c.MoveSlot(ctx, key, from, to)
	require.NoError(t, err)
	require.NoError(t, move.Finish(ctx))
}

// A Watch through a cluster client whose slot map is out of date
// subscribes on the master that used to serve the slot, is answered MOVED,
// and is regrouped onto the master that serves it now before it returns.
func TestShardedWatchWithAStaleSlotMapIsRegrouped(t *testing.T) {
	redistest.Slow(t)
	c := redistest.ClusterFor(t, 3, 1)
	rdb := c.Client(t)
	h := shardedHub(t, rdb, Options{})
	byMaster := channelsByMaster(t, c, 2)
	masters, err := c.Masters(t.Context())
	require.NoError(t, err)
	from, to := masters[0], masters[1]
	first := watch(t, h, byMaster[from][0], "first") // loads the map, opens from's connection

	late := byMaster[from][1]
	moveSlot(t, c, late, from, to)
	stale, err := rdb.MasterForKey(t.Context(), late)
	require.NoError(t, err)
	require.Equal(t, from, stale.Options().Addr, "the test needs a map that is out of date")

	w := watch(t, h, late, "late")
	requireDelivered(t, spublisher{rdb}, w)
	requireDelivered(t, spublisher{rdb}, first)
	requireLayout(t, c, map[string][]string{from: {byMaster[from][0]}, to: {late}})
}

func TestShardedHubClosesCleanly(t *testing.T) {
	redistest.Slow(t)
	c := redistest.ClusterFor(t, 3, 1)
	before := goleak.IgnoreCurrent()
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	h := New(rdb, Options{Logger: testLogger(t), Mode: func(context.Context) (Mode, error) { return Sharded, nil }})
	byMaster := channelsByMaster(t, c, 2)
	waiters := make(map[string]*Waiter)
	for _, channels := range byMaster {
		for _, channel := range channels {
			w, err := h.Watch(t.Context(), channel, "w")
			require.NoError(t, err)
			waiters[channel] = w
		}
	}
	masters, err := c.Masters(t.Context())
	require.NoError(t, err)
	moving := byMaster[masters[0]][0]
	moveSlot(t, c, moving, masters[0], masters[1]) // starts the regroup goroutine
	requireSignal(t, waiters[moving], "regrouped")

	start := time.Now()
	require.NoError(t, h.Close())
	require.Less(t, time.Since(start), 2*time.Second, "Close was not prompt")
	_, err = h.Watch(context.Background(), byMaster[masters[1]][0], "late")
	require.ErrorIs(t, err, errs.ErrClosed)
	for _, w := range waiters {
		w.Stop()
	}
	require.NoError(t, rdb.Close())
	goleak.VerifyNone(t, before)
}

// A master demoted by a graceful failover (CLUSTER FAILOVER on its
// replica) drops our subscriptions with a "sunsubscribe" of each: they are
// regrouped on the new master, and the connection to the replica it has
// become is closed.
func TestShardedHubFollowsAGracefulFailover(t *testing.T) {
	redistest.Slow(t)
	c := redistest.ClusterFor(t, 3, 1)
	rdb := c.Client(t)
	h := shardedHub(t, rdb, Options{})
	byMaster := channelsByMaster(t, c, 2)
	waiters := watchAll(t, h, byMaster)
	requireLayout(t, c, byMaster)

	masters, err := c.Masters(t.Context())
	require.NoError(t, err)
	old := masters[0]
	oldID, err := c.Node(old).Client(t).ClusterMyID(t.Context()).Result()
	require.NoError(t, err)
	replicas, err := c.Replicas(t.Context())
	require.NoError(t, err)
	var heir string
	for _, r := range replicas {
		nodes, err := c.Node(r).Client(t).ClusterNodes(t.Context()).Result()
		require.NoError(t, err)
		for line := range strings.Lines(nodes) {
			f := strings.Fields(line)
			if len(f) > 3 && strings.Contains(f[2], "myself") && f[3] == oldID {
				heir = r
			}
		}
	}
	require.NotEmpty(t, heir, "a replica of %s", old)
	require.NoError(t, c.Node(heir).Client(t).Do(t.Context(), "CLUSTER", "FAILOVER").Err())
	require.Eventually(t, func() bool {
		m, err := c.MasterOf(t.Context(), byMaster[old][0])
		return err == nil && m == heir
	}, patience, 20*time.Millisecond, "%s took over from %s", heir, old)

	requireFailedOver(t, c, rdb, waiters, byMaster, old, heir)
}

// requireFailedOver checks the hub once heir took over the slots of the
// master old: the waiters of old's channels were signalled (messages may
// have been lost), every waiter hears what is published now, and every
// channel is subscribed on the master that serves it, none on old.
func requireFailedOver(t *testing.T, c *redistest.Cluster, rdb *redis.ClusterClient, waiters map[string]*Waiter, byMaster map[string][]string, old, heir string) {
	t.Helper()
	for _, channel := range byMaster[old] {
		requireSignal(t, waiters[channel], "wake messages may have been lost in the failover")
	}
	for _, w := range waiters {
		requireDelivered(t, spublisher{rdb}, w)
	}
	want := make(map[string][]string)
	for m, channels := range byMaster {
		if m == old {
			m = heir
		}
		want[m] = append(want[m], channels...)
	}
	requireLayout(t, c, want)
}
