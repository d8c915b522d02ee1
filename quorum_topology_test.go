package fairlock_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/internal/redistest"
)

// A quorum's members may be any go-redis client kind: here a Redis
// Cluster, a failover client under Sentinel and a Ring. Hand-overs are
// pushed by each (a waiter's polls come every 10 s, the grant within a
// few), and a Sentinel failover of one member changes nothing for the
// majority.
func TestQuorumOfEveryClientKind(t *testing.T) {
	redistest.Slow(t)
	var (
		wg                 sync.WaitGroup
		cluster            *redistest.Cluster
		set                *redistest.SentinelSet
		clusterErr, setErr error
	)
	wg.Go(func() { cluster, clusterErr = redistest.StartCluster(3, 0) })
	wg.Go(func() { set, setErr = redistest.StartSentinel(1, 3) })
	wg.Wait()
	if cluster != nil {
		t.Cleanup(cluster.Stop)
	}
	if set != nil {
		t.Cleanup(set.Stop)
	}
	require.NoError(t, clusterErr)
	require.NoError(t, setErr)
	ring := redistest.Masters(t, 1)[0]

	members := func(t *testing.T) []redis.UniversalClient {
		r := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": ring.Addr}})
		t.Cleanup(func() { _ = r.Close() })
		return []redis.UniversalClient{cluster.Client(t), set.Client(t), r}
	}
	prefix := redistest.Prefix(t)
	newClient := func() *fairlock.Client {
		c, err := fairlock.NewQuorum(context.Background(), members(t), fairlock.WithPrefix(prefix), fairlock.WithWaiterTTL(30*time.Second))
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	a, b := newClient(), newClient()
	ctx := context.Background()
	for _, name := range []string{"alpha", "beta", "gamma"} { // on several Cluster slots
		ma, mb := a.Mutex(name), b.Mutex(name)
		held, err := ma.Lock(ctx)
		require.NoError(t, err)
		first, err := ma.Token(held)
		require.NoError(t, err)
		got := make(chan context.Context, 1)
		go func() {
			h, err := mb.Lock(ctx)
			if err != nil {
				t.Error(err)
			}
			got <- h
		}()
		time.Sleep(300 * time.Millisecond)
		released := time.Now()
		require.NoError(t, ma.Unlock(held))
		var h context.Context
		select {
		case h = <-got:
		case <-time.After(8 * time.Second):
			t.Fatal("no pushed hand-over: the waiter's polls come every 10 s")
		}
		require.Less(t, time.Since(released), 8*time.Second)
		second, err := mb.Token(h)
		require.NoError(t, err)
		require.Greater(t, second, first)
		require.NoError(t, mb.Unlock(h))
	}

	// A Sentinel failover of one member while a hold lives: the hold
	// keeps its majority, and the lock works on after.
	m := a.Mutex("failover")
	held, err := m.Lock(ctx)
	require.NoError(t, err)
	tok, err := m.Token(held)
	require.NoError(t, err)
	_, err = set.Failover(ctx)
	require.NoError(t, err)
	require.NoError(t, held.Err(), "the hold lost its majority")
	require.NoError(t, m.Unlock(held))
	h, err := b.Mutex("failover").Lock(ctx)
	require.NoError(t, err)
	tok2, err := b.Mutex("failover").Token(h)
	require.NoError(t, err)
	require.Greater(t, tok2, tok)
	require.NoError(t, b.Mutex("failover").Unlock(h))
}
