package redistest_test

import (
	"context"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock/internal/redistest"
)

func TestClusterFailsOverAKilledMasterAndStopEndsEveryNode(t *testing.T) {
	redistest.Slow(t)
	t.Parallel()
	start := time.Now()
	c, err := redistest.StartCluster(3, 1)
	require.NoError(t, err)
	t.Cleanup(c.Stop)
	t.Logf("3 masters and 3 replicas ready in %v", time.Since(start))
	ctx := context.Background()
	require.Len(t, c.Addrs(), 6)
	masters, err := c.Masters(ctx)
	require.NoError(t, err)
	require.Len(t, masters, 3)
	replicas, err := c.Replicas(ctx)
	require.NoError(t, err)
	require.Len(t, replicas, 3)
	require.NotContains(t, masters, replicas[0])

	rdb := c.Client(t)
	old, err := c.MasterOf(ctx, "{k}")
	require.NoError(t, err)
	require.Contains(t, masters, old)
	// The key reaches the replica before the kill: WAIT on the connection
	// that wrote it.
	pipe := c.Node(old).Client(t).Pipeline()
	pipe.Set(ctx, "{k}", "v", 0)
	acked := pipe.Do(ctx, "WAIT", 1, 5000)
	_, err = pipe.Exec(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 1, acked.Val(), "the replica has the key")
	require.NoError(t, c.Kill(old))
	killed := time.Now()
	now, err := c.WaitFailover("{k}", old, 30*time.Second)
	require.NoError(t, err)
	t.Logf("%s took over from %s %v after the kill", now, old, time.Since(killed))
	require.Contains(t, replicas, now)
	masters, err = c.Masters(ctx)
	require.NoError(t, err)
	require.NotContains(t, masters, old)
	require.Contains(t, masters, now)

	rdb.ReloadState(ctx) // go-redis reloads its slot map on MOVED, not when a node is gone
	require.Eventually(t, func() bool { return rdb.Get(ctx, "{k}").Val() == "v" },
		10*time.Second, 20*time.Millisecond, "the replicated key is served by the new master")
	owners, err := c.MastersOf(ctx, "{k}", "{k}x")
	require.NoError(t, err)
	require.Equal(t, []string{now, now}, owners)

	// The killed master comes back as the replica of the one that took
	// over its slots.
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	require.NoError(t, c.Restart(wctx, old))
	require.NoError(t, c.WaitHealthy(wctx))
	require.Eventually(t, func() bool {
		replicas, err = c.Replicas(ctx)
		return err == nil && slices.Contains(replicas, old)
	}, 10*time.Second, 20*time.Millisecond, "the restarted node is a replica (replicas: %v, %v)", replicas, err)
	masters, err = c.Masters(ctx)
	require.NoError(t, err)
	require.Len(t, masters, 3)
	require.NotContains(t, masters, old)

	c.Stop()
	c.Stop()
	for _, addr := range c.Addrs() {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = conn.Close()
		}
		require.Error(t, err, "%s still listens after Stop", addr)
	}
}

func TestStartClusterRejectsTooFewMasters(t *testing.T) {
	t.Parallel()
	_, err := redistest.StartCluster(2, 1)
	require.Error(t, err)
}
