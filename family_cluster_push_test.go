package fairlock_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/internal/redistest"
)

// clusterACLRules is the least-privileged user of a Redis Cluster of
// Redis 7, where wake messages travel by sharded pub/sub. docs/operations.md
// shows this very line; TestClusterShardedWakeUps checks both.
const clusterACLRules = "ACL SETUSER locker on >secret resetkeys ~fairlock:* resetchannels &fairlock:*" +
	" -@all +evalsha +eval +fcall +function|load +get +set +hget +hmget +hset +hincrby +hdel +del +pexpire +pttl" +
	" +lindex +lpop +rpush +lrem +zscore +zadd +zrem +time +spublish" +
	" +exists +ssubscribe +sunsubscribe +ping +cluster|slots"

// TestClusterShardedWakeUps runs its cases one after the other on one
// cluster of 3 masters with a replica each.
func TestClusterShardedWakeUps(t *testing.T) {
	redistest.Slow(t)
	t.Parallel()
	cluster := redistest.ClusterFor(t, 3, 1)
	masters, err := cluster.Masters(t.Context())
	require.NoError(t, err)
	require.Len(t, masters, 3)
	replicas, err := cluster.Replicas(t.Context())
	require.NoError(t, err)
	require.Len(t, replicas, 3)

	// The first case: nothing else has published on this cluster yet.
	t.Run("HandOverByShardedPushOnEveryMaster", func(t *testing.T) {
		handOverByShardedPushOnEveryMaster(t, cluster, masters, replicas)
	})
	t.Run("ACLUserWithTheShardedRules", func(t *testing.T) {
		aclUserWithTheShardedRules(t, cluster, masters, replicas)
	})
	t.Run("WeightedACLUserWithTheShardedRules", func(t *testing.T) {
		weightedACLUserWithTheShardedRules(t, cluster, masters, replicas)
	})
}

// On a Redis Cluster of Redis 7, hand-overs travel by sharded pub/sub:
// every lock, whichever master serves it, is handed to its waiter by push,
// through one SSUBSCRIBE connection per master of the waiting Client and
// none on a replica, and nothing is broadcast over the cluster bus.
func handOverByShardedPushOnEveryMaster(t *testing.T, cluster *redistest.Cluster, masters, replicas []string) {
	ctx := context.Background()
	bus := busPublishes(t, cluster, append(masters, replicas...))

	handOverOnEveryMaster(t, cluster, masters, replicas, redistest.Prefix(t),
		func() redis.UniversalClient { return cluster.Client(t) })

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

// The user of clusterACLRules, created on every node, hands locks over by
// push on every master, and is refused nothing but what go-redis and the
// server check do without (COMMAND, INFO): with INFO refused, the Client
// reads the server's version with a script, and still picks sharded
// pub/sub.
func aclUserWithTheShardedRules(t *testing.T, cluster *redistest.Cluster, masters, replicas []string) {
	doc, err := os.ReadFile("docs/operations.md")
	require.NoError(t, err)
	require.Contains(t, string(doc), "\n"+clusterACLRules+"\n", "docs/operations.md shows the rule line the test checks")
	ctx := context.Background()
	fields := strings.Fields(clusterACLRules)
	args := make([]any, len(fields))
	for i, f := range fields {
		args[i] = f
	}
	for _, addr := range append(masters, replicas...) {
		require.NoError(t, cluster.Node(addr).Client(t).Do(ctx, args...).Err())
	}

	handOverOnEveryMaster(t, cluster, masters, replicas, "fairlock", func() redis.UniversalClient {
		rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs(), Username: "locker", Password: "secret"})
		t.Cleanup(func() { _ = rdb.Close() })
		return rdb
	})

	for _, addr := range append(masters, replicas...) {
		entries, err := cluster.Node(addr).Client(t).Do(ctx, "ACL", "LOG").Slice()
		require.NoError(t, err)
		for _, e := range entries {
			entry := fmt.Sprint(e)
			if strings.Contains(entry, "object:info") || strings.Contains(entry, "object:command") {
				continue
			}
			t.Errorf("refused on %s: %s", addr, entry)
		}
	}
}

// handOverOnEveryMaster locks two names served by each master through one
// Client, queues a waiter of each through another, and checks that every
// Unlock hands the lock to its waiter by push: waiters poll only every
// 10s here, and each is granted within a fraction of that. Meanwhile the
// waiting Client holds one pub/sub connection on every master and none on
// a replica.
func handOverOnEveryMaster(t *testing.T, cluster *redistest.Cluster, masters, replicas []string, prefix string,
	newRedis func() redis.UniversalClient) {
	t.Helper()
	ctx := context.Background()
	newClient := func() *fairlock.Client {
		c, err := fairlock.New(newRedis(), fairlock.WithPrefix(prefix), fairlock.WithWaiterTTL(30*time.Second))
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	holders, waiters := newClient(), newClient()

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
	// Connections of Clients closed before may take a moment to go.
	require.Eventually(t, func() bool {
		for _, addr := range masters {
			if pubsubClients(t, cluster, addr) != 1 {
				return false
			}
		}
		for _, addr := range replicas {
			if pubsubClients(t, cluster, addr) != 0 {
				return false
			}
		}
		return true
	}, 5*time.Second, 10*time.Millisecond, "one pub/sub connection on every master, none on a replica")

	for _, name := range names {
		start := time.Now()
		require.NoError(t, holders.Mutex(name).Unlock(held[name]))
		r := await(t, next[name], 2*time.Second)
		require.NoError(t, r.err, name)
		t.Logf("%s handed over in %v", name, time.Since(start))
		require.NoError(t, waiters.Mutex(name).Unlock(r.ctx))
	}
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
		if v := redistest.InfoField(info, "cluster_stats_messages_publish_sent"); v != "" {
			var m int
			_, err := fmt.Sscan(v, &m)
			require.NoError(t, err)
			n += m
		}
	}
	return n
}
