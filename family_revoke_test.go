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

// A forced release of one holder of a Semaphore, and of a RWMutex's
// writer, through another Client ends that holder's context within a
// push's latency, with ErrLeaseLost, leaves the other holders alone, and
// grants the waiters that now fit at once.
func forcedReleaseEndsAWeightedHoldersContextAtOnce(t *testing.T, e *env, lock string) {
	holder, keeper, other := e.client(), e.client(), e.client()
	bg := context.Background()

	sem := lock + "-sem"
	hctx, err := holder.Semaphore(sem, 3).Acquire(bg, 2)
	require.NoError(t, err)
	kctx, err := keeper.Semaphore(sem, 3).Acquire(bg, 1)
	require.NoError(t, err)
	e.waitSubscribed(t, e.weightedKeys(sem, queue.KindSemaphore))
	next := lockAsync(bg, permitsOf{other.Semaphore(sem, 3), 2})
	e.waitWeightedQueued(sem, queue.KindSemaphore, 1)
	st, err := other.Semaphore(sem, 3).Inspect(bg)
	require.NoError(t, err)
	var owner string
	for _, h := range st.Holders {
		if h.Client == holder.ID() {
			owner = h.Owner
		}
	}
	require.NotEmpty(t, owner, "Inspect shows the holder's owner id: %+v", st.Holders)

	removed, err := other.Semaphore(sem, 3).ForceRelease(bg, "no-such-owner")
	require.NoError(t, err)
	require.False(t, removed, "an owner that holds nothing")
	_, err = other.Semaphore(sem, 3).ForceRelease(bg, "")
	require.ErrorIs(t, err, fairlock.ErrInvalidOwner)

	forced := time.Now()
	removed, err = other.Semaphore(sem, 3).ForceRelease(bg, owner)
	require.NoError(t, err)
	require.True(t, removed)
	requireDone(t, hctx, revokedWithin)
	require.ErrorIs(t, context.Cause(hctx), fairlock.ErrLeaseLost)
	t.Logf("the Semaphore holder's context ended %v after the forced release", time.Since(forced))
	r := await(t, next, revokedWithin)
	require.NoError(t, r.err, "2 permits fit beside the other holder's 1")
	require.NoError(t, kctx.Err(), "the other holder keeps its hold")
	require.ErrorIs(t, holder.Semaphore(sem, 3).Release(hctx), fairlock.ErrNotHeld)
	require.NoError(t, keeper.Semaphore(sem, 3).Release(kctx))
	require.NoError(t, other.Semaphore(sem, 3).Release(r.ctx))

	rw := lock + "-rw"
	wctx, err := holder.RWMutex(rw).Lock(bg)
	require.NoError(t, err)
	e.waitSubscribed(t, e.weightedKeys(rw, queue.KindRWMutex))
	reader := lockAsync(bg, readerOf{other.RWMutex(rw)})
	e.waitWeightedQueued(rw, queue.KindRWMutex, 1)
	st, err = other.RWMutex(rw).Inspect(bg)
	require.NoError(t, err)
	require.Len(t, st.Holders, 1)
	require.True(t, st.Writer)
	forced = time.Now()
	removed, err = other.RWMutex(rw).ForceRelease(bg, st.Holders[0].Owner)
	require.NoError(t, err)
	require.True(t, removed)
	requireDone(t, wctx, revokedWithin)
	require.ErrorIs(t, context.Cause(wctx), fairlock.ErrLeaseLost)
	t.Logf("the writer's context ended %v after the forced release", time.Since(forced))
	r = await(t, reader, revokedWithin)
	require.NoError(t, r.err)
	require.NoError(t, other.RWMutex(rw).RUnlock(r.ctx))
}
