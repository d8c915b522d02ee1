package fairlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/fairlock/fairlock/queue"
)

// revokedWithin bounds how long a forced unlock may take to end the
// holder's context: a push's latency, with room for a loaded machine;
// far below the renewal (a third of the 30 s lease) that found it before.
const revokedWithin = 2 * time.Second

// waitSubscribed waits until some node of e's deployment has a
// subscription to a wake channel of the lock (plain or sharded): the
// holder's Client listens for its revocation there.
func (e *env) waitSubscribed(t *testing.T, k queue.Keys) {
	t.Helper()
	ctx := context.Background()
	var admins []*redis.Client
	for _, addr := range e.nodes {
		admin := redis.NewClient(&redis.Options{Addr: addr})
		t.Cleanup(func() { _ = admin.Close() })
		admins = append(admins, admin)
	}
	require.Eventually(t, func() bool {
		for _, a := range admins {
			plain, _ := a.PubSubChannels(ctx, k.Wake+":*").Result()
			sharded, _ := a.PubSubShardChannels(ctx, k.Wake+":*").Result()
			if len(plain)+len(sharded) > 0 {
				return true
			}
		}
		return false
	}, 10*time.Second, 5*time.Millisecond, "no Client subscribed to a wake channel of %s", k.Name)
}

// A forced unlock through another Client ends the holder's context within
// a push's latency, with ErrLeaseLost, for a Mutex and for the MultiLock
// that holds the name; the next waiter is granted at once.
func forcedUnlockEndsTheHoldersContextAtOnce(t *testing.T, e *env, lock string) {
	holder, other := e.client(), e.client()
	bg := context.Background()

	m := holder.Mutex(lock)
	hctx, err := m.Lock(bg)
	require.NoError(t, err)
	e.waitSubscribed(t, e.keys(lock))
	next := lockAsync(bg, other.Mutex(lock))
	forced := time.Now()
	removed, err := other.Mutex(lock).ForceUnlock(bg)
	require.NoError(t, err)
	require.True(t, removed)
	requireDone(t, hctx, revokedWithin)
	require.ErrorIs(t, context.Cause(hctx), fairlock.ErrLeaseLost)
	t.Logf("the holder's context ended %v after the forced unlock", time.Since(forced))
	r := await(t, next, revokedWithin)
	require.NoError(t, r.err)
	require.ErrorIs(t, m.Unlock(hctx), fairlock.ErrNotHeld)
	require.NoError(t, other.Mutex(lock).Unlock(r.ctx))

	// A hold forced right after its grant, on a lock its Client had no
	// subscription for: it ends about a second after its grant, not at
	// its renewal.
	hctx, err = m.Lock(bg)
	require.NoError(t, err)
	forced = time.Now()
	removed, err = other.Mutex(lock).ForceUnlock(bg)
	require.NoError(t, err)
	require.True(t, removed)
	requireDone(t, hctx, time.Second+revokedWithin)
	require.ErrorIs(t, context.Cause(hctx), fairlock.ErrLeaseLost)
	t.Logf("a young hold's context ended %v after the forced unlock", time.Since(forced))

	names := []string{lock + "-x", lock + "-y"}
	ml := holder.MultiLock(names)
	mlctx, err := ml.Lock(bg)
	require.NoError(t, err)
	e.waitSubscribed(t, e.keys(names[1]))
	forced = time.Now()
	removed, err = other.Mutex(names[1]).ForceUnlock(bg)
	require.NoError(t, err)
	require.True(t, removed)
	requireDone(t, mlctx, revokedWithin)
	require.ErrorIs(t, context.Cause(mlctx), fairlock.ErrLeaseLost)
	t.Logf("the MultiLock's context ended %v after the forced unlock of one name", time.Since(forced))
	_ = ml.Unlock(mlctx) // gives back the name it still holds
	for _, name := range names {
		locked, err := other.Mutex(name).IsLocked(bg)
		require.NoError(t, err)
		require.False(t, locked, name)
	}
}

// A forced unlock of a quorum lock ends the holder's context within a
// push's latency, once a majority of the masters no longer has the hold.
func TestQuorumForcedUnlockEndsTheHoldersContextAtOnce(t *testing.T) {
	redistest.Slow(t)
	t.Parallel()
	servers := redistest.Masters(t, 3)
	holder, other := quorumOf(t, servers), quorumOf(t, servers)
	bg := context.Background()
	hctx, err := holder.Mutex("forced").Lock(bg)
	require.NoError(t, err)
	k := quorumKeys(t, "forced")
	for _, s := range servers {
		e := &env{nodes: []string{s.Addr}}
		e.waitSubscribed(t, k)
	}
	forced := time.Now()
	removed, err := other.Mutex("forced").ForceUnlock(bg)
	require.NoError(t, err)
	require.True(t, removed)
	requireDone(t, hctx, revokedWithin)
	require.ErrorIs(t, context.Cause(hctx), fairlock.ErrLeaseLost)
	t.Logf("the holder's context ended %v after the forced unlock", time.Since(forced))
}
