package fairlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/internal/redistest"
)

// On every client kind built with ContextTimeoutEnabled, every primitive's
// Lock (Acquire) with a context that has a deadline sends its calls from
// the caller's goroutine, uncontended; and contended, a second Client's
// call waits in line and is handed the lock when the first lets go.
func TestEveryPrimitiveRunsOnTheCallersGoroutineOnEachClientKindWithContextTimeouts(t *testing.T) {
	redistest.Slow(t)
	t.Parallel()
	type kind struct {
		name string
		dial func(t *testing.T) redis.UniversalClient
	}
	closing := func(t *testing.T, rdb redis.UniversalClient) redis.UniversalClient {
		t.Cleanup(func() { _ = rdb.Close() })
		return rdb
	}
	one, err := redistest.Start()
	require.NoError(t, err)
	t.Cleanup(one.Stop)
	cluster := redistest.ClusterFor(t, 3, 0)
	shards := map[string]string{}
	for _, shard := range []string{"a", "b"} {
		srv, err := redistest.Start()
		require.NoError(t, err)
		t.Cleanup(srv.Stop)
		shards[shard] = srv.Addr
	}
	set, err := redistest.StartSentinel(1, 1)
	require.NoError(t, err)
	t.Cleanup(set.Stop)
	kinds := []kind{
		{"Client", func(t *testing.T) redis.UniversalClient {
			return closing(t, redis.NewClient(&redis.Options{Addr: one.Addr, ContextTimeoutEnabled: true}))
		}},
		{"ClusterClient", func(t *testing.T) redis.UniversalClient {
			return closing(t, redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs(), ContextTimeoutEnabled: true}))
		}},
		{"Ring", func(t *testing.T) redis.UniversalClient {
			return closing(t, redis.NewRing(&redis.RingOptions{Addrs: shards, ContextTimeoutEnabled: true}))
		}},
		{"failover client", func(t *testing.T) redis.UniversalClient {
			return closing(t, redis.NewFailoverClient(&redis.FailoverOptions{MasterName: set.MasterName(),
				SentinelAddrs: set.SentinelAddrs(), ContextTimeoutEnabled: true}))
		}},
	}
	primitives := clientPrimitives("inline")
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			prefix := redistest.Prefix(t)
			hook := &scriptGoroutines{}
			newClient := func(rdb redis.UniversalClient) *fairlock.Client {
				c, err := fairlock.New(rdb, fairlock.WithPrefix(prefix))
				require.NoError(t, err)
				t.Cleanup(func() { _ = c.Close() })
				return c
			}
			rdbA := k.dial(t)
			rdbA.AddHook(hook)
			a, b := newClient(rdbA), newClient(k.dial(t))
			for _, p := range primitives {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				// The first round does the Client's checks and loads the
				// library, on goroutines of its own.
				held, err := p.lock(a, ctx)
				require.NoError(t, err, p.name)
				_, err = p.unlock(a, held)
				require.NoError(t, err, p.name)
				hook.take()

				me := goroutineID()
				held, err = p.lock(a, ctx)
				require.NoError(t, err, p.name)
				calls := hook.take()
				require.NotEmpty(t, calls, p.name)
				for _, id := range calls {
					require.Equal(t, me, id, "%s: every call of the Lock from the caller's goroutine", p.name)
				}

				p.handsOver(t, ctx, a, b, held)
				cancel()
			}
		})
	}
}
