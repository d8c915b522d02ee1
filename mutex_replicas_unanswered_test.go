//go:build unix

package fairlock_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/fairlock/fairlock/queue"
)

// WithReplicas when the replicas cannot answer: a server that lost its
// scripts costs a call no more than one replica timeout, a grant that was
// not acknowledged is given back on the primary before the call returns,
// and a primary with fewer replicas than asked for is reported at once.

// pair is a primary with one replica, without a sentinel, and plain
// clients of each.
type pair struct {
	primary, replica *redis.Client
}

// startPair starts a primary and a replica of it, and waits until the
// replica is in sync.
func startPair(t *testing.T) *pair {
	t.Helper()
	primary, err := redistest.Start("--repl-diskless-sync-delay", "0")
	require.NoError(t, err)
	t.Cleanup(primary.Stop)
	host, port, ok := strings.Cut(primary.Addr, ":")
	require.True(t, ok)
	replica, err := redistest.Start("--replicaof", host, port)
	require.NoError(t, err)
	t.Cleanup(replica.Stop)
	p := &pair{primary: primary.Client(t), replica: replica.Client(t)}
	require.Eventually(t, func() bool {
		info, err := p.primary.Info(context.Background(), "replication").Result()
		return err == nil && strings.Contains(info, "state=online")
	}, 10*time.Second, 10*time.Millisecond, "the replica syncs")
	return p
}

// connected returns how many replicas rdb reports connected.
func connected(t *testing.T, rdb *redis.Client) int {
	t.Helper()
	return int(infoInt(t, rdb, "replication", "connected_slaves"))
}

// waitsServed returns how many WAIT commands rdb's server has answered.
func waitsServed(t *testing.T, rdb *redis.Client) int {
	t.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	require.NoError(t, err)
	stats := redistest.InfoField(info, "cmdstat_wait") // "calls=N,usec=...", or none before the first WAIT
	if stats == "" {
		return 0
	}
	var n int
	_, err = fmt.Sscanf(stats, "calls=%d,", &n)
	require.NoError(t, err)
	return n
}

// clientOf returns a Client over a redis client of its own of rdb's server.
func clientOf(t *testing.T, rdb *redis.Client, prefix string, opts ...fairlock.Option) *fairlock.Client {
	t.Helper()
	own := redis.NewClient(&redis.Options{Addr: rdb.Options().Addr})
	t.Cleanup(func() { _ = own.Close() })
	c, err := fairlock.New(own, append([]fairlock.Option{fairlock.WithPrefix(prefix)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestUnacknowledgedTryLockOnAScriptlessServerTakesOneTimeoutAndLeavesNothing(t *testing.T) {
	redistest.Slow(t)
	t.Parallel()
	p := startPair(t)
	bg := context.Background()
	prefix, k := freshLock(t)
	const timeout = 400 * time.Millisecond
	m := clientOf(t, p.primary, prefix, fairlock.WithReplicas(1, timeout)).Mutex("lock")
	warm, err := m.Lock(bg) // checks the server and loads the scripts
	require.NoError(t, err)
	require.NoError(t, m.Unlock(warm))

	// The library and the scripts are gone (as after a restart or a
	// failover), and the replica acknowledges nothing: the primary's
	// offset moves past what it has acknowledged, so every WAIT runs out.
	require.NoError(t, p.primary.FunctionFlush(bg).Err())
	require.NoError(t, p.primary.ScriptFlush(bg).Err())
	require.NoError(t, p.replica.ScriptFlush(bg).Err())
	resume := redistest.Pause(t, p.replica)
	require.NoError(t, p.primary.Set(bg, prefix+"moved", "1", 0).Err())

	waits := waitsServed(t, p.primary)
	start := time.Now()
	_, err = m.TryLock(bg)
	took := time.Since(start)
	served := waitsServed(t, p.primary) - waits
	t.Logf("TryLock took %v", took)
	left := nothingLeft(p.primary, k)
	require.ErrorIs(t, err, fairlock.ErrNotReplicated)
	require.NotErrorIs(t, err, fairlock.ErrLocked)
	require.Empty(t, left, "the grant is given back on the primary when TryLock returns")
	other, err := clientOf(t, p.primary, prefix).Mutex("lock").TryLock(bg)
	require.NoError(t, err, "another Client takes the lock right after")
	require.Less(t, took, timeout+timeout/2, "one replica timeout, not one per script sent")
	// On Redis 7.0 the WAIT behind the NOSCRIPT waits for the SET above
	// and runs out: the script is sent again without a WAIT, and the
	// grant given back without one.
	require.Equal(t, 1, served, "WAITs the TryLock sent")

	resume()
	require.NoError(t, clientOf(t, p.primary, prefix).Mutex("lock").Unlock(other))
}

func TestPrimaryWithoutReplicasFailsAtOnce(t *testing.T) {
	redistest.Slow(t)
	t.Parallel()
	e := newEnv(t)
	bg := context.Background()
	k := e.keys("lock")
	const timeout = 200 * time.Millisecond
	m := e.client(fairlock.WithReplicas(1, timeout)).Mutex("lock")
	const says = "asked for 1 replica, the primary has 0 connected"

	start := time.Now()
	r := await(t, lockAsync(bg, m), 10*time.Second)
	require.ErrorIs(t, r.err, fairlock.ErrNotReplicated)
	require.ErrorContains(t, r.err, says)
	require.Less(t, time.Since(start), 3*timeout, "Lock fails after one WAIT, not when its context ends")
	require.Empty(t, nothingLeft(e.rdb.(*redis.Client), k), "Lock leaves the lock free and the line empty")

	start = time.Now()
	_, err := m.TryLock(bg)
	require.ErrorIs(t, err, fairlock.ErrNotReplicated)
	require.ErrorContains(t, err, says)
	require.Less(t, time.Since(start), 3*timeout)
	require.Empty(t, nothingLeft(e.rdb.(*redis.Client), k), "TryLock gives its grant back")

	// A waiter that is handed the lock fails too, and leaves the line.
	holder := e.client()
	hctx, err := holder.Mutex("lock").Lock(bg)
	require.NoError(t, err)
	waiter := lockAsync(bg, m)
	e.waitQueued("lock", 1)
	require.NoError(t, holder.Mutex("lock").Unlock(hctx))
	r = await(t, waiter, 10*time.Second)
	require.ErrorIs(t, r.err, fairlock.ErrNotReplicated)
	require.ErrorContains(t, r.err, says)
	require.Empty(t, nothingLeft(e.rdb.(*redis.Client), k), "the hand-over is given back")
}

func TestUnlockReportsAPrimaryThatLostItsReplicas(t *testing.T) {
	redistest.Slow(t)
	t.Parallel()
	p := startPair(t)
	bg := context.Background()
	prefix, k := freshLock(t)
	m := clientOf(t, p.primary, prefix, fairlock.WithReplicas(1, 100*time.Millisecond)).Mutex("lock")
	hctx, err := m.Lock(bg)
	require.NoError(t, err)

	require.NoError(t, p.replica.ReplicaOf(bg, "NO", "ONE").Err())
	require.Eventually(t, func() bool { return connected(t, p.primary) == 0 },
		10*time.Second, 10*time.Millisecond, "the replica leaves")
	err = m.Unlock(hctx)
	require.ErrorIs(t, err, fairlock.ErrNotReplicated)
	require.ErrorContains(t, err, "released on the primary")
	require.ErrorContains(t, err, "asked for 1 replica, the primary has 0 connected")
	require.NotContains(t, err.Error(), "sent again", "no replica can acknowledge a re-send")
	require.Empty(t, nothingLeft(p.primary, k))
	requireDone(t, hctx, time.Second)
}

// A user that may not run INFO cannot learn how many replicas the primary
// has: a short WAIT is then retried as before, until the context ends.
func TestPrimaryWithoutReplicasIsWaitedForWithoutInfo(t *testing.T) {
	redistest.Slow(t)
	t.Parallel()
	srv, err := redistest.Start()
	require.NoError(t, err)
	t.Cleanup(srv.Stop)
	admin := srv.Client(t)
	rdb := newACLUser(t, srv.Addr, admin, aclRules+" +wait")
	t.Cleanup(func() { _ = rdb.Close() })
	c, err := fairlock.New(rdb, fairlock.WithReplicas(1, 100*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	m := c.Mutex("lock")
	k, err := queue.For("fairlock", "lock")
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, err = m.Lock(ctx)
	require.ErrorIs(t, err, fairlock.ErrNotReplicated)
	require.ErrorIs(t, err, context.DeadlineExceeded, "retried until the context ended")
	require.ErrorContains(t, err, "0 of 1 replicas acknowledged")
	require.NotContains(t, err.Error(), "connected")
	require.Empty(t, nothingLeft(admin, k), "the grant is given back and the line left when Lock returns")

	_, err = m.TryLock(context.Background())
	require.ErrorIs(t, err, fairlock.ErrNotReplicated)
	require.ErrorContains(t, err, "0 of 1 replicas acknowledged")
	require.Empty(t, nothingLeft(admin, k))
}
