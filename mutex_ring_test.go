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

// newRing starts two redis-servers and returns a Ring over them, closed
// when the test ends.
func newRing(t *testing.T) *redis.Ring {
	t.Helper()
	addrs := map[string]string{}
	for _, shard := range []string{"a", "b"} {
		srv, err := redistest.Start()
		require.NoError(t, err)
		t.Cleanup(srv.Stop)
		addrs[shard] = srv.Addr
	}
	ring := redis.NewRing(&redis.RingOptions{Addrs: addrs})
	t.Cleanup(func() { _ = ring.Close() })
	return ring
}

func TestRingHandsOverByPushOnEveryShard(t *testing.T) {
	redistest.Slow(t)
	t.Parallel()
	ring := newRing(t)
	ctx := context.Background()
	prefix := redistest.Prefix(t)
	// Waiters poll every 10s: a grant within 2s came by push.
	opts := []fairlock.Option{fairlock.WithPrefix(prefix), fairlock.WithWaiterTTL(30 * time.Second)}
	newClient := func() *fairlock.Client {
		c, err := fairlock.New(ring, opts...)
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	holders, waiters := newClient(), newClient()

	// Lock names until both shards own some.
	shards := map[string][]string{}
	enough := func() bool {
		for _, ns := range shards {
			if len(ns) < 2 {
				return false
			}
		}
		return len(shards) == 2
	}
	for i := 0; !enough(); i++ {
		require.Less(t, i, 1000)
		name := fmt.Sprintf("ring-%d", i)
		shard, err := ring.GetShardClientForKey(prefix + ":{" + name + "}")
		require.NoError(t, err)
		addr := shard.Options().Addr
		if len(shards[addr]) < 2 {
			shards[addr] = append(shards[addr], name)
		}
	}
	var names []string
	for _, ns := range shards {
		names = append(names, ns...)
	}

	held := map[string]context.Context{}
	next := map[string]<-chan result{}
	for _, name := range names {
		hctx, err := holders.Mutex(name).Lock(ctx)
		require.NoError(t, err)
		held[name] = hctx
		_, err = holders.Mutex(name).TryLock(ctx)
		require.ErrorIs(t, err, fairlock.ErrLocked)
		next[name] = lockAsync(ctx, waiters.Mutex(name))
	}
	for _, name := range names {
		shard, err := ring.GetShardClientForKey(prefix + ":{" + name + "}")
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			return shard.LLen(ctx, prefix+":{"+name+"}:queue").Val() == 1
		}, 5*time.Second, 2*time.Millisecond, "%s queued on its shard", name)
	}
	for _, name := range names {
		require.NoError(t, holders.Mutex(name).Unlock(held[name]))
		r := await(t, next[name], 2*time.Second)
		require.NoError(t, r.err, name)
		n, err := waiters.Mutex(name).HoldCount(r.ctx)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		require.NoError(t, waiters.Mutex(name).Unlock(r.ctx))
	}
}

// The MultiLock core cases on a Ring of two shards: its names land on
// both, and are taken in one order like any others.
func TestRingMultiLock(t *testing.T) {
	redistest.Slow(t)
	t.Parallel()
	ring := newRing(t)
	dial := func(testing.TB) redis.UniversalClient { return ring }
	for _, c := range []struct {
		name string
		run  func(t *testing.T, e *env, base string)
	}{
		{"HoldsEveryNameUntilUnlock", multiLockHoldsEveryNameUntilUnlock},
		{"TryLockIsAllOrNone", multiLockTryLockIsAllOrNone},
		{"ThatGivesUpHoldsNothing", multiLockThatGivesUpHoldsNothing},
		{"OverlappingSetsNeverDeadlock", multiLockOverlappingSetsNeverDeadlock},
		{"WaitsInLineHoldingTheNamesBefore", func(t *testing.T, e *env, _ string) { multiLockWaitsInLineAndIsServedInOrder(t, e, true) }},
		{"GivesUpWhenANameItTookIsLost", func(t *testing.T, e *env, _ string) { multiLockGivesUpWhenANameItTookIsLost(t, e) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.run(t, &env{t: t, rdb: ring, prefix: redistest.Prefix(t), dial: dial}, "ring")
		})
	}
}
