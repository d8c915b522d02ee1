package fairlock_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/internal/redistest"
)

// Every primitive, through two Clients of each client kind, uncontended
// and contended, runs on servers that start without fairlock's function
// library: the first calls go as scripts, every node that serves locks
// (each master of a Cluster, each shard of a Ring, the primary of a
// failover client and, by replication, its replicas) gets the library,
// and the calls after it go by FCALL.
func TestEveryPrimitiveLoadsTheLibraryOnEachClientKind(t *testing.T) {
	redistest.Slow(t)
	t.Parallel()
	type kind struct {
		name  string
		dial  func(t *testing.T) redis.UniversalClient
		nodes []string // every node that must end with the library
	}
	var kinds []kind

	one, err := redistest.Start()
	require.NoError(t, err)
	t.Cleanup(one.Stop)
	kinds = append(kinds, kind{"Client", func(t *testing.T) redis.UniversalClient { return one.Client(t) }, []string{one.Addr}})

	cluster := redistest.ClusterFor(t, 3, 0)
	masters, err := cluster.Masters(context.Background())
	require.NoError(t, err)
	kinds = append(kinds, kind{"ClusterClient", func(t *testing.T) redis.UniversalClient { return cluster.Client(t) }, masters})

	var shards []string
	addrs := map[string]string{}
	for _, shard := range []string{"a", "b"} {
		srv, err := redistest.Start()
		require.NoError(t, err)
		t.Cleanup(srv.Stop)
		addrs[shard] = srv.Addr
		shards = append(shards, srv.Addr)
	}
	kinds = append(kinds, kind{"Ring", func(t *testing.T) redis.UniversalClient {
		ring := redis.NewRing(&redis.RingOptions{Addrs: addrs})
		t.Cleanup(func() { _ = ring.Close() })
		return ring
	}, shards})

	set, err := redistest.StartSentinel(1, 1)
	require.NoError(t, err)
	t.Cleanup(set.Stop)
	kinds = append(kinds, kind{"failover client", func(t *testing.T) redis.UniversalClient { return set.Client(t) }, set.Addrs()})

	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			prefix := redistest.Prefix(t)
			newClient := func() *fairlock.Client {
				c, err := fairlock.New(k.dial(t), fairlock.WithPrefix(prefix))
				require.NoError(t, err)
				t.Cleanup(func() { _ = c.Close() })
				return c
			}
			a, b := newClient(), newClient()
			round := func(tag string) {
				for _, p := range clientPrimitives(tag) {
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					// Uncontended through a, then b waits behind a and is
					// handed the lock when a lets go.
					held, err := p.lock(a, ctx)
					require.NoError(t, err, "%s: %s", tag, p.name)
					p.handsOver(t, ctx, a, b, held)
					cancel()
				}
			}
			round("first")
			for _, addr := range k.nodes {
				node := redis.NewClient(&redis.Options{Addr: addr})
				t.Cleanup(func() { _ = node.Close() })
				require.Eventually(t, func() bool {
					libs, err := node.FunctionList(context.Background(), redis.FunctionListQuery{LibraryNamePattern: "fairlock_*"}).Result()
					return err == nil && len(libs) == 1
				}, 10*time.Second, 10*time.Millisecond, "the library on %s", addr)
			}
			before := fcalls(t, k.nodes)
			round("second")
			require.Greater(t, fcalls(t, k.nodes), before, "the calls after the load go by FCALL")
		})
	}
}

// fcalls sums the FCALLs the nodes ran.
func fcalls(t *testing.T, nodes []string) int {
	t.Helper()
	n := 0
	for _, addr := range nodes {
		node := redis.NewClient(&redis.Options{Addr: addr})
		info, err := node.Info(context.Background(), "commandstats").Result()
		_ = node.Close()
		require.NoError(t, err)
		var calls int
		if v := redistest.InfoField(info, "cmdstat_fcall"); v != "" {
			_, err := fmt.Sscanf(v, "calls=%d,", &calls)
			require.NoError(t, err, v)
		}
		n += calls
	}
	return n
}
