package fairlock_test

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/internal/redistest"
)

// A waiter keeps its place while its lock's slot moves to another master
// with its keys, as a resharding moves it: an ASK or MOVED reply that the
// cluster client did not follow (its redirect limit, 0 here, as any limit
// can run out while a slot is moving) means the script did not run, and
// is retried, where the reloaded slot map says, not returned to the
// caller. TryLock, which makes one attempt, returns it.
func TestWaiterKeepsItsPlaceWhileItsSlotMoves(t *testing.T) {
	redistest.Slow(t)
	t.Parallel()
	c := redistest.ClusterFor(t, 3, 0)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	prefix := redistest.Prefix(t)
	const name = "moving"
	holderClient, err := fairlock.New(c.Client(t), fairlock.WithPrefix(prefix))
	require.NoError(t, err)
	t.Cleanup(func() { _ = holderClient.Close() })
	noRedirects := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs(), MaxRedirects: -1})
	t.Cleanup(func() { _ = noRedirects.Close() })
	logs := &logRecorder{debug: true} // a poll's ASK is routine: logged at Debug
	waiterClient, err := fairlock.New(noRedirects, fairlock.WithPrefix(prefix),
		fairlock.WithWaiterTTL(900*time.Millisecond), fairlock.WithLogger(slog.New(logs)))
	require.NoError(t, err)
	t.Cleanup(func() { _ = waiterClient.Close() })

	holder := holderClient.Mutex(name)
	hctx, err := holder.Lock(ctx)
	require.NoError(t, err)
	next := lockAsync(ctx, waiterClient.Mutex(name))
	key := prefix + ":{" + name + "}"
	probe := c.Client(t)
	require.Eventually(t, func() bool { return probe.LLen(ctx, key+":queue").Val() == 1 },
		10*time.Second, 5*time.Millisecond)

	from, err := c.MasterOf(ctx, key)
	require.NoError(t, err)
	masters, err := c.Masters(ctx)
	require.NoError(t, err)
	to := masters[0]
	if to == from {
		to = masters[1]
	}
	// The keys move while the slot is migrating: the old master answers
	// the waiter's polls with ASK.
	move, err := c.MoveSlot(ctx, key, from, to)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		return slices.ContainsFunc(logs.all(), func(l string) bool { return strings.Contains(l, "ASK") })
	}, 10*time.Second, 5*time.Millisecond, "the waiter polled the old master during the migration")
	// TryLock makes one attempt, and returns the reply as its error.
	_, err = waiterClient.Mutex(name).TryLock(ctx)
	require.ErrorContains(t, err, "ASK ")
	require.NoError(t, move.Finish(ctx))
	time.Sleep(time.Second) // more polls, where the slot is now
	select {
	case r := <-next:
		t.Fatalf("the waiter left the line: %v", r.err)
	default:
	}
	require.Equal(t, int64(1), probe.LLen(ctx, key+":queue").Val(), "the waiter is in line on the new master")
	require.NoError(t, holder.Unlock(hctx))
	r := await(t, next, 10*time.Second)
	require.NoError(t, r.err)
	require.NoError(t, waiterClient.Mutex(name).Unlock(r.ctx))
}
