package redistest_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock/internal/redistest"
)

func TestSentinelFailsOverGracefullyAndAfterAKill(t *testing.T) {
	redistest.Slow(t)
	t.Parallel()
	start := time.Now()
	ss, err := redistest.StartSentinel(2, 3)
	require.NoError(t, err)
	t.Cleanup(ss.Stop)
	t.Logf("a primary, 2 replicas and 3 sentinels ready in %v", time.Since(start))
	ctx := context.Background()
	require.Equal(t, "fairlock", ss.MasterName())
	require.Len(t, ss.SentinelAddrs(), 3)
	first, err := ss.Primary(ctx)
	require.NoError(t, err)
	require.Equal(t, ss.Addrs()[0], first)

	rdb := ss.Client(t)
	require.NoError(t, rdb.Set(ctx, "k", "v", 0).Err())
	old, err := ss.Failover(ctx)
	require.NoError(t, err)
	require.Equal(t, first, old)
	at := time.Now()
	now, err := ss.WaitFailover(old, 30*time.Second)
	require.NoError(t, err)
	t.Logf("graceful failover from %s to %s in %v", old, now, time.Since(at))
	require.NotEqual(t, old, now)
	require.Eventually(t, func() bool { return rdb.Set(ctx, "k2", "v", 0).Err() == nil },
		30*time.Second, 20*time.Millisecond, "the failover client writes to the new primary")
	require.Equal(t, "v", rdb.Get(ctx, "k").Val())

	old, err = ss.KillPrimary(ctx)
	require.NoError(t, err)
	require.Equal(t, now, old)
	at = time.Now()
	now, err = ss.WaitFailover(old, 30*time.Second)
	require.NoError(t, err)
	t.Logf("failover from the killed %s to %s in %v", old, now, time.Since(at))
	require.Eventually(t, func() bool { return rdb.Set(ctx, "k3", "v", 0).Err() == nil },
		30*time.Second, 20*time.Millisecond, "the failover client writes to the new primary")

	// The killed server comes back as a replica of the new primary, so
	// that the set has two replicas again.
	require.NoError(t, ss.Rejoin(ctx, old))
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	primary, err := ss.WaitSynced(wctx)
	require.NoError(t, err)
	require.Equal(t, now, primary)
	back := redis.NewClient(&redis.Options{Addr: old})
	defer back.Close()
	require.Equal(t, "v", back.Get(ctx, "k3").Val(), "the rejoined server copied the primary's data")
	require.Contains(t, back.Info(ctx, "replication").Val(), "role:slave")
	ss.Stop()
	ss.Stop()
}
