package fairlock_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/internal/redistest"
)

// auditTrips is a go-redis hook for the node clients of a cluster client:
// it counts, per node, the round trips that carry the failover audit's
// reads (HMGET, HGET, ZSCORE: the Lock and Unlock of a Mutex send none),
// and keeps the time of the last.
type auditTrips struct {
	mu    sync.Mutex
	trips map[string]int // guarded by mu: by node address, pipelines and commands alike
	last  atomic.Int64   // unix ns of the last
}

func (a *auditTrips) hook(addr string) redis.Hook { return auditHook{a: a, addr: addr} }

func (a *auditTrips) count(addr string, cmds []redis.Cmder) {
	if !slices.ContainsFunc(cmds, func(c redis.Cmder) bool { return slices.Contains([]string{"hmget", "hget", "zscore"}, c.Name()) }) {
		return
	}
	a.last.Store(time.Now().UnixNano())
	a.mu.Lock()
	defer a.mu.Unlock()
	a.trips[addr]++
}

type auditHook struct {
	a    *auditTrips
	addr string
}

func (h auditHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h auditHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.a.count(h.addr, []redis.Cmder{cmd})
		return next(ctx, cmd)
	}
}

func (h auditHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.a.count(h.addr, cmds)
		return next(ctx, cmds)
	}
}

// The failover audit of a Client on a Cluster costs what docs/operations.md
// says whatever the number of names: after Lock and Unlock of hundreds of
// names, it reads each master once a look (once a second: one round trip
// per master and second, not one per name) and stops once 10 s have
// passed since the last Unlock.
func TestTheAuditOfAClusterClientReadsEachMasterOnceASecondForTenSeconds(t *testing.T) {
	redistest.Slow(t)
	t.Parallel()
	cluster := redistest.ClusterFor(t, 3, 0)
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs()})
	t.Cleanup(func() { _ = rdb.Close() })
	trips := &auditTrips{trips: map[string]int{}}
	rdb.OnNewNode(func(c *redis.Client) { c.AddHook(trips.hook(c.Options().Addr)) })
	c, err := fairlock.New(rdb, fairlock.WithPrefix(redistest.Prefix(t)))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })

	const names, goroutines = 600, 8
	ctx := context.Background()
	start := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < names; i = next.Add(1) - 1 {
				m := c.Mutex(fmt.Sprintf("n%d", i))
				held, err := m.Lock(ctx)
				if !assertNoError(t, err) {
					return
				}
				assertNoError(t, m.Unlock(held))
			}
		})
	}
	wg.Wait()
	lastUnlock := time.Now()

	// Wait until the audit has read nothing for 3 s (its looks are a
	// second apart), or a minute.
	require.Eventually(t, func() bool {
		last := time.Unix(0, trips.last.Load())
		return last.After(start) && time.Since(last) > 3*time.Second
	}, time.Minute, 100*time.Millisecond, "the audit never read, or never stopped")
	over := time.Unix(0, trips.last.Load()).Sub(lastUnlock)
	elapsed := time.Unix(0, trips.last.Load()).Sub(start)
	trips.mu.Lock()
	defer trips.mu.Unlock()
	t.Logf("%d names in %v; the audit read until %v after the last Unlock, in %v round trips",
		names, lastUnlock.Sub(start).Round(time.Millisecond), over.Round(time.Millisecond), trips.trips)
	require.Less(t, over, 12*time.Second, "10 s after the last call ended, and a look's second")
	require.Len(t, trips.trips, 3, "every master was read")
	for node, n := range trips.trips {
		require.LessOrEqual(t, n, int(elapsed/time.Second)+2, "node %s: one round trip per look, a look a second", node)
	}
}
