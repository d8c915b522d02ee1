package fairlock_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/internal/redistest"
)

// On a Redis Cluster of Redis 7, hand-overs travel by sharded pub/sub:
// every lock, whichever master serves it, is handed to its waiter by push
// (waiters poll only every 10s here), through one SSUBSCRIBE connection
// per master of the waiting Client and none on a replica, and nothing is
// broadcast over the cluster bus.
func TestClusterHandsOverByShardedPushOnEveryMaster(t *testing.T) {
	t.Parallel()
	cluster, err := redistest.StartCluster(3, 1)
	require.NoError(t, err)
	t.Cleanup(cluster.Stop)
	ctx := context.Background()
	masters, err := cluster.Masters(ctx)
	require.NoError(t, err)
	require.Len(t, masters, 3)
	replicas, err := cluster.Replicas(ctx)
	require.NoError(t, err)
	require.Len(t, replicas, 3)

	prefix := redistest.Prefix(t)
	opts := []fairlock.Option{fairlock.WithPrefix(prefix), fairlock.WithWaiterTTL(30 * time.Second)}
	newClient := func() *fairlock.Client {
		c, err := fairlock.New(cluster.Client(t), opts...)
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	holders, waiters := newClient(), newClient()

	// Two lock names on each master.
	byMaster := map[string][]string{}
	var names []string
	for i := 0; len(names) < 2*len(masters); i++ {
		require.Less(t, i, 1000)
		name := fmt.Sprintf("sharded-%d", i)
		m, err := cluster.MasterOf(ctx, prefix+":{"+name+"}")
		require.NoError(t, err)
		if len(byMaster[m]) < 2 {
			byMaster[m] = append(byMaster[m], name)
			names = append(names, name)
		}
	}
	bus := busPublishes(t, cluster, append(masters, replicas...))

	held := map[string]context.Context{}
	next := map[string]<-chan result{}
	for _, name := range names {
		hctx, err := holders.Mutex(name).Lock(ctx)
		require.NoError(t, err)
		held[name] = hctx
		next[name] = lockAsync(ctx, waiters.Mutex(name))
	}
	for m, ns := range byMaster {
		rdb := cluster.Node(m).Client(t)
		for _, name := range ns {
			require.Eventually(t, func() bool {
				return rdb.LLen(ctx, prefix+":{"+name+"}:queue").Val() == 1
			}, 5*time.Second, 2*time.Millisecond, "%s queued on its master", name)
		}
	}
	for _, addr := range masters {
		require.Equal(t, 1, pubsubClients(t, cluster, addr), "pub/sub connections on master %s", addr)
	}
	for _, addr := range replicas {
		require.Zero(t, pubsubClients(t, cluster, addr), "pub/sub connections on replica %s", addr)
	}

	for _, name := range names {
		start := time.Now()
		require.NoError(t, holders.Mutex(name).Unlock(held[name]))
		r := await(t, next[name], 2*time.Second)
		require.NoError(t, r.err, name)
		t.Logf("%s handed over in %v", name, time.Since(start))
		require.NoError(t, waiters.Mutex(name).Unlock(r.ctx))
	}

	spublished := 0
	for _, addr := range masters {
		stats, err := cluster.Node(addr).Client(t).Info(ctx, "commandstats").Result()
		require.NoError(t, err)
		require.NotContains(t, stats, "cmdstat_publish:", "classic PUBLISH on %s", addr)
		if strings.Contains(stats, "cmdstat_spublish:") {
			spublished++
		}
	}
	require.Equal(t, len(masters), spublished, "every master sent its wake messages with SPUBLISH")
	require.Equal(t, bus, busPublishes(t, cluster, append(masters, replicas...)),
		"PUBLISH messages broadcast over the cluster bus")
}

// pubsubClients returns how many pub/sub connections the node at addr
// serves.
func pubsubClients(t *testing.T, cluster *redistest.Cluster, addr string) int {
	t.Helper()
	list, err := cluster.Node(addr).Client(t).Do(t.Context(), "CLIENT", "LIST", "TYPE", "pubsub").Text()
	require.NoError(t, err)
	return strings.Count(list, "\n")
}

// busPublishes returns how many classic PUBLISH messages the nodes have
// sent each other over the cluster bus, in all.
func busPublishes(t *testing.T, cluster *redistest.Cluster, addrs []string) int {
	t.Helper()
	n := 0
	for _, addr := range addrs {
		info, err := cluster.Node(addr).Client(t).ClusterInfo(t.Context()).Result()
		require.NoError(t, err)
		for line := range strings.Lines(info) {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "cluster_stats_messages_publish_sent:"); ok {
				var m int
				_, err := fmt.Sscan(v, &m)
				require.NoError(t, err)
				n += m
			}
		}
	}
	return n
}
