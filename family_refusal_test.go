package fairlock_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/fairlock/fairlock/queue"
)

// refusalWithin bounds every wait of the refusal tests: far below the
// 30 s lease, so that a lock freed within it was not freed by its expiry.
const refusalWithin = 5 * time.Second

// scriptRefuser is a server whose user may, at the test's word, be
// refused every script: Redis then answers NOPERM to each release, as it
// does after an operator's ACL change.
type scriptRefuser struct {
	admin *redis.Client
	user  *redis.Client
}

func newScriptRefuser(t *testing.T) *scriptRefuser {
	t.Helper()
	srv, err := redistest.Start()
	require.NoError(t, err)
	t.Cleanup(srv.Stop)
	admin := srv.Client(t)
	user := newACLUser(t, srv.Addr, admin, "ACL SETUSER locker on >secret resetkeys ~* resetchannels &* +@all")
	t.Cleanup(func() { _ = user.Close() })
	return &scriptRefuser{admin: admin, user: user}
}

// refuse takes EVAL, EVALSHA and FCALL from the user (on) or gives them
// back.
func (r *scriptRefuser) refuse(t *testing.T, on bool) {
	t.Helper()
	rule := []any{"+evalsha", "+eval", "+fcall"}
	if on {
		rule = []any{"-evalsha", "-eval", "-fcall"}
	}
	require.NoError(t, r.admin.Do(context.Background(), append([]any{"ACL", "SETUSER", "locker"}, rule...)...).Err())
}

func (r *scriptRefuser) client(t *testing.T) *fairlock.Client {
	t.Helper()
	c, err := fairlock.New(r.user)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// requireLive fails unless the hold's context is still live.
func requireLive(t *testing.T, hctx context.Context) {
	t.Helper()
	require.NoError(t, hctx.Err(), "the hold's context ended: %v", context.Cause(hctx))
}

// deploymentRefuser is a user of every node of an env's deployment (each
// server of a Cluster, the primary and replicas under Sentinel) that may,
// at the test's word, be refused every script, as scriptRefuser's is.
type deploymentRefuser struct {
	admins []*redis.Client
	user   string
	rdb    redis.UniversalClient // the deployment, as the user
}

func newDeploymentRefuser(t *testing.T, e *env) *deploymentRefuser {
	t.Helper()
	require.NotNil(t, e.dialAs, "the env reaches its deployment as a user of its own")
	r := &deploymentRefuser{user: "locker-" + queue.NewID()[:12]}
	for _, addr := range e.nodes {
		admin := redis.NewClient(&redis.Options{Addr: addr})
		t.Cleanup(func() { _ = admin.Close() })
		require.NoError(t, admin.Do(context.Background(), "ACL", "SETUSER", r.user, "on", ">secret",
			"resetkeys", "~*", "resetchannels", "&*", "+@all").Err())
		r.admins = append(r.admins, admin)
	}
	r.rdb = e.dialAs(t, r.user, "secret")
	return r
}

// refuse takes EVAL, EVALSHA and FCALL from the user on every node (on),
// or gives them back.
func (r *deploymentRefuser) refuse(t *testing.T, on bool) {
	t.Helper()
	rule := []any{"+evalsha", "+eval", "+fcall"}
	if on {
		rule = []any{"-evalsha", "-eval", "-fcall"}
	}
	for _, admin := range r.admins {
		require.NoError(t, admin.Do(context.Background(), append([]any{"ACL", "SETUSER", r.user}, rule...)...).Err())
	}
}

// reentrant is a primitive whose holds are re-entered through their
// contexts, as the refusal tests drive it.
type reentrant struct {
	name   string
	lock   func(ctx context.Context) (context.Context, error)
	unlock func(ctx context.Context) error
	keys   []string // the keys that exist while it is held
}

// reentrants returns each re-entrant primitive of c (whose prefix is
// prefix), on locks named after base.
func reentrants(t *testing.T, c *fairlock.Client, prefix, base string) []reentrant {
	key := func(name string) string {
		k, err := queue.For(prefix, name)
		require.NoError(t, err)
		return k.Lock
	}
	rwKey := func(name string) string {
		k, err := queue.Weighted(prefix, name, queue.KindRWMutex)
		require.NoError(t, err)
		return k.Lock
	}
	m := c.Mutex(base + "-mutex")
	rw := c.RWMutex(base + "-rw")
	names := []string{base + "-multi-1", base + "-multi-2"}
	ml := c.MultiLock(names)
	return []reentrant{
		{"Mutex", m.Lock, m.Unlock, []string{key(m.Name())}},
		{"RWMutexWrite", rw.Lock, rw.Unlock, []string{rwKey(rw.Name())}},
		{"RWMutexRead", rw.RLock, rw.RUnlock, []string{rwKey(rw.Name())}},
		{"MultiLock", ml.Lock, ml.Unlock, []string{key(names[0]), key(names[1])}},
	}
}

// existing counts the keys of keys that exist, one at a time (they may
// live on different servers of a Cluster).
func existing(rdb redis.UniversalClient, keys []string) int64 {
	n := int64(0)
	for _, k := range keys {
		n += rdb.Exists(context.Background(), k).Val()
	}
	return n
}

// refusedInnerUnlockThenTheOuterUnlockFreesTheLock drives the usual shape
// of nested holds,
//
//	outer, _ := m.Lock(ctx); defer m.Unlock(outer)
//	inner, _ := m.Lock(outer); ...; if err := m.Unlock(inner); err != nil { log(err) }
//
// with Redis refusing the inner Unlock (NOPERM, as during an ACL change).
// The inner Unlock says so and that its release is sent again; the level
// counts as gone, so the outer Unlock is the hold's last: when Redis
// takes releases again before it, it frees the lock and returns nil;
// when Redis still refuses, it returns the refusal, the hold ends, and
// the lock is free as soon as Redis takes releases again. The outer
// Unlock never returns nil while the lock stays held. Every re-entrant
// primitive, in both orders; a family case, so on every kind of client.
func refusedInnerUnlockThenTheOuterUnlockFreesTheLock(t *testing.T, e *env, lock string) {
	for _, order := range []string{"RedisBackBeforeTheOuterUnlock", "RedisBackAfterTheOuterUnlock"} {
		t.Run(order, func(t *testing.T) {
			r := newDeploymentRefuser(t, e)
			c, err := fairlock.New(r.rdb, fairlock.WithPrefix(e.prefix))
			require.NoError(t, err)
			t.Cleanup(func() { _ = c.Close() })
			for _, p := range reentrants(t, c, e.prefix, lock+"-"+order) {
				t.Run(p.name, func(t *testing.T) {
					ctx := context.Background()
					outer, err := p.lock(ctx)
					require.NoError(t, err)
					inner, err := p.lock(outer)
					require.NoError(t, err)

					r.refuse(t, true)
					err = p.unlock(inner)
					require.ErrorIs(t, err, fairlock.ErrNoPermission)
					require.ErrorContains(t, err, "sent again in the background")
					requireLive(t, outer)

					if order == "RedisBackBeforeTheOuterUnlock" {
						r.refuse(t, false)
						require.NoError(t, p.unlock(outer))
						requireDone(t, outer, refusalWithin)
						require.Zero(t, existing(e.rdb, p.keys), "the lock is free when the outer Unlock returns nil")
						return
					}
					err = p.unlock(outer)
					require.ErrorIs(t, err, fairlock.ErrNoPermission, "the lock is still held: the outer Unlock must not return nil")
					requireDone(t, outer, refusalWithin)
					r.refuse(t, false)
					require.Eventually(t, func() bool { return existing(e.rdb, p.keys) == 0 },
						refusalWithin, 10*time.Millisecond, "the releases were sent again once Redis took them")
					require.ErrorIs(t, p.unlock(outer), fairlock.ErrNotHeld)
				})
			}
		})
	}
}

// TestARefusedFinalUnlockIsSentAgainUntilRedisTakesIt has Redis refuse the
// release of a hold's only level. The hold ends in the process (nobody
// renews it), the error says the release goes on, and once Redis takes
// releases again the lock is free: a lease before it would have expired.
func TestARefusedFinalUnlockIsSentAgainUntilRedisTakesIt(t *testing.T) {
	t.Parallel()
	r := newScriptRefuser(t)
	m := r.client(t).Mutex("final")
	ctx := context.Background()
	hctx, err := m.Lock(ctx)
	require.NoError(t, err)

	r.refuse(t, true)
	err = m.Unlock(hctx)
	require.ErrorIs(t, err, fairlock.ErrNoPermission)
	require.ErrorContains(t, err, "sent again in the background")
	requireDone(t, hctx, refusalWithin)
	require.Equal(t, int64(1), r.admin.Exists(ctx, "fairlock:{final}").Val(), "refused: the hold is still in Redis")

	r.refuse(t, false)
	require.Eventually(t, func() bool { return r.admin.Exists(ctx, "fairlock:{final}").Val() == 0 },
		refusalWithin, 10*time.Millisecond, "the release was sent again once Redis took it")
}

// fullServer is a redis-server whose memory the test fills (maxmemory far
// below what it uses, under noeviction) and frees again.
type fullServer struct {
	*env
}

func newFullServer(t *testing.T) *fullServer {
	t.Helper()
	e := newPrivateEnv(t)
	require.NoError(t, e.rdb.ConfigSet(context.Background(), "maxmemory-policy", "noeviction").Err())
	return &fullServer{e}
}

// fill makes the server full: every command that may grow memory is
// refused with OOM from now on.
func (f *fullServer) fill(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	used := infoInt(t, f.rdb, "memory", "used_memory")
	require.NoError(t, f.rdb.ConfigSet(ctx, "maxmemory", strconv.FormatInt(used/2, 10)).Err())
	err := f.rdb.Set(ctx, f.prefix+"probe", "x", 0).Err()
	require.ErrorContains(t, err, "OOM", "the server is full")
}

// free lifts the memory limit.
func (f *fullServer) free(t *testing.T) {
	t.Helper()
	require.NoError(t, f.rdb.ConfigSet(context.Background(), "maxmemory", "0").Err())
}

// infoInt reads one integer field of an INFO section.
func infoInt(t *testing.T, rdb redis.UniversalClient, section, field string) int64 {
	t.Helper()
	info, err := rdb.Info(context.Background(), section).Result()
	require.NoError(t, err)
	v := redistest.InfoField(info, field)
	require.NotEmpty(t, v, "INFO %s has no %s", section, field)
	n, err := strconv.ParseInt(v, 10, 64)
	require.NoError(t, err)
	return n
}

// TestAFullServerStillReleasesAndHandsOver fills the server's memory while
// a lock is held and a waiter is in line. The Unlock goes through, and the
// waiter is handed the lock by push, not a lease later.
func TestAFullServerStillReleasesAndHandsOver(t *testing.T) {
	t.Parallel()
	f := newFullServer(t)
	ctx := context.Background()
	m1 := f.client().Mutex("full")
	m2 := f.client().Mutex("full")
	hctx, err := m1.Lock(ctx)
	require.NoError(t, err)
	inner, err := m1.Lock(hctx)
	require.NoError(t, err)
	waiter := lockAsync(ctx, m2)
	f.waitQueued("full", 1)

	f.fill(t)
	require.NoError(t, m1.Unlock(inner), "an inner level is released on a full server")
	requireLive(t, hctx)
	require.NoError(t, m1.Unlock(hctx), "the last level is released on a full server")
	r := await(t, waiter, refusalWithin)
	require.NoError(t, r.err)
	require.NoError(t, m2.Unlock(r.ctx), "and so is the hand-over's")
	locked, err := m2.IsLocked(ctx)
	require.NoError(t, err)
	require.False(t, locked)
}

// TestWhatAFullServerAllows runs each call on a full server: what keeps or
// ends a hold, and a waiter already in line, go on; what would add to a
// lock is refused (TryLock) or waits until memory is freed (Lock).
func TestWhatAFullServerAllows(t *testing.T) {
	redistest.Slow(t)
	t.Parallel()
	f := newFullServer(t)
	ctx := context.Background()
	short := fairlock.WithWaiterTTL(300 * time.Millisecond) // a heartbeat every 100 ms
	c1 := f.client(fairlock.WithLease(600 * time.Millisecond))
	c2 := f.client(short)
	c3 := f.client(short)

	held := c1.Mutex("held")
	hctx, err := held.Lock(ctx)
	require.NoError(t, err)
	queued := lockAsync(ctx, c2.Mutex("held"))
	f.waitQueued("held", 1)
	gctx, giveUp := context.WithCancel(ctx)
	defer giveUp()
	gaveUp := lockAsync(gctx, c3.Mutex("held"))
	f.waitQueued("held", 2)
	forced := c1.Mutex("forced")
	_, err = forced.Lock(ctx)
	require.NoError(t, err)
	fixed := c1.Mutex("fixed", fairlock.WithFixedLease(time.Minute))
	fctx, err := fixed.Lock(ctx)
	require.NoError(t, err)

	f.fill(t)

	// A fixed lease's levels come and go too (its inner release extends
	// nothing, so it writes first what changes nothing).
	finner, err := fixed.Lock(fctx)
	require.NoError(t, err)
	require.NoError(t, fixed.Unlock(finner))
	requireLive(t, fctx)
	require.NoError(t, fixed.Unlock(fctx))
	require.Zero(t, f.rdb.Exists(ctx, f.keys("fixed").Lock).Val())

	// A hold is renewed: it outlives several leases.
	require.Never(t, func() bool { return hctx.Err() != nil }, 2*time.Second, 20*time.Millisecond,
		"the hold's renewals went through")
	// A re-entry counts, and its release too.
	inner, err := held.Lock(hctx)
	require.NoError(t, err)
	require.NoError(t, held.Unlock(inner))
	// The waiters kept their places through their heartbeats.
	require.Len(t, f.queued("held"), 2)

	// A fresh grant is refused to TryLock, with the server's reply, and
	// leaves nothing.
	_, err = c3.Mutex("fresh").TryLock(ctx)
	require.ErrorContains(t, err, "OOM")
	require.Zero(t, f.rdb.Exists(ctx, f.keys("fresh").Lock).Val())

	// Lock waits: it cannot join the line while memory is full.
	wctx, cancel := context.WithTimeout(ctx, 400*time.Millisecond)
	_, err = c3.Mutex("fresh").Lock(wctx)
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded)
	f.requireClean("fresh")
	later := lockAsync(ctx, c3.Mutex("joins"))
	_, err = c1.Mutex("joins").TryLock(ctx)
	require.ErrorContains(t, err, "OOM")

	// A waiter that gives up leaves; ForceUnlock removes a hold.
	giveUp()
	require.ErrorIs(t, await(t, gaveUp, refusalWithin).err, context.Canceled)
	require.Len(t, f.queued("held"), 1)
	removed, err := c3.Mutex("forced").ForceUnlock(ctx)
	require.NoError(t, err)
	require.True(t, removed)

	// The release hands the lock to the waiter.
	require.NoError(t, held.Unlock(hctx))
	r := await(t, queued, refusalWithin)
	require.NoError(t, r.err)
	require.NoError(t, c2.Mutex("held").Unlock(r.ctx))

	// Once memory is freed, the Lock that waited to join is granted.
	f.free(t)
	r = await(t, later, refusalWithin)
	require.NoError(t, r.err)
	require.NoError(t, c3.Mutex("joins").Unlock(r.ctx))
}

// TestAFullServerKeepsAWaitingTicketAndRefusesANewOne fills the server's
// memory while a MultiLock waits with a ticket: its heartbeats keep its
// places, a second MultiLock cannot join any line and leaves nothing,
// and the release of the lock the ticket waits for grants it every name.
func TestAFullServerKeepsAWaitingTicketAndRefusesANewOne(t *testing.T) {
	redistest.Slow(t)
	t.Parallel()
	f := newFullServer(t)
	ctx := context.Background()
	short := fairlock.WithWaiterTTL(300 * time.Millisecond) // a heartbeat every 100 ms
	holder := f.client().Mutex("tb")
	hctx, err := holder.Lock(ctx)
	require.NoError(t, err)
	ml := f.client(short).MultiLock([]string{"ta", "tb"})
	waiting := lockAsync(ctx, ml)
	f.waitQueued("tb", 1)

	f.fill(t)
	time.Sleep(600 * time.Millisecond) // two waiter TTLs: only heartbeats keep the ticket
	require.Len(t, f.queued("ta"), 1, "the ticket kept its place")
	require.Len(t, f.queued("tb"), 1, "the ticket kept its place")
	wctx, cancel := context.WithTimeout(ctx, 400*time.Millisecond)
	_, err = f.client(short).MultiLock([]string{"tb", "tc"}).Lock(wctx)
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Len(t, f.queued("tb"), 1, "the new ticket joined no line")
	f.requireClean("tc")

	require.NoError(t, holder.Unlock(hctx))
	r := await(t, waiting, refusalWithin)
	require.NoError(t, r.err)
	require.NoError(t, ml.Unlock(r.ctx))
	f.free(t)
}

// TestTheLastUnlockReleasesLevelsWhoseReleaseIsStillOnItsWay lets an
// inner Unlock return at its deadline while its release is held up on
// the way to Redis, then unlocks the outer level. Redis still counts the
// inner level then; the hold's owner id is its own, so the last Unlock
// releases that level too, and the lock is free when it returns, not
// when the held-up release arrives.
func TestTheLastUnlockReleasesLevelsWhoseReleaseIsStillOnItsWay(t *testing.T) {
	redistest.Slow(t)
	t.Parallel()
	e := newEnv(t)
	c, p := e.proxied(&redis.Options{})
	m := c.Mutex("levels")
	ctx := context.Background()
	outer, err := m.Lock(ctx)
	require.NoError(t, err)
	inner, err := m.Lock(outer)
	require.NoError(t, err)

	p.SetLatency(3 * time.Second)
	dctx, cancel := context.WithTimeout(inner, 100*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, m.Unlock(dctx), context.DeadlineExceeded)
	p.SetLatency(0)

	require.NoError(t, m.Unlock(outer))
	requireDone(t, outer, refusalWithin)
	require.Zero(t, e.rdb.Exists(ctx, e.keys("levels").Lock).Val(), "the lock is free when the last Unlock returns")
}

// TestAQuorumRefusedInnerUnlockThenTheOuterUnlockFreesTheLock is
// refusedInnerUnlockThenTheOuterUnlockFreesTheLock on a quorum of three
// masters, each of which refuses the scripts.
func TestAQuorumRefusedInnerUnlockThenTheOuterUnlockFreesTheLock(t *testing.T) {
	redistest.Slow(t)
	t.Parallel()
	for _, order := range []string{"RedisBackBeforeTheOuterUnlock", "RedisBackAfterTheOuterUnlock"} {
		t.Run(order, func(t *testing.T) {
			t.Parallel()
			var (
				rs      []*scriptRefuser
				masters []redis.UniversalClient
			)
			for range 3 {
				r := newScriptRefuser(t)
				rs = append(rs, r)
				masters = append(masters, r.user)
			}
			refuse := func(on bool) {
				for _, r := range rs {
					r.refuse(t, on)
				}
			}
			keys, err := queue.Quorum("fairlock", "q")
			require.NoError(t, err)
			held := func() int64 {
				n := int64(0)
				for _, r := range rs {
					n += r.admin.Exists(context.Background(), keys.Lock).Val()
				}
				return n
			}
			c, err := fairlock.NewQuorum(context.Background(), masters)
			require.NoError(t, err)
			t.Cleanup(func() { _ = c.Close() })
			m := c.Mutex("q")
			ctx := context.Background()
			outer, err := m.Lock(ctx)
			require.NoError(t, err)
			inner, err := m.Lock(outer)
			require.NoError(t, err)

			refuse(true)
			err = m.Unlock(inner)
			require.ErrorIs(t, err, fairlock.ErrNoQuorum)
			require.ErrorContains(t, err, "sent again in the background")
			requireLive(t, outer)

			if order == "RedisBackBeforeTheOuterUnlock" {
				refuse(false)
				require.NoError(t, m.Unlock(outer))
				requireDone(t, outer, refusalWithin)
				require.LessOrEqual(t, held(), int64(1), "a majority is free when the outer Unlock returns nil")
			} else {
				require.ErrorIs(t, m.Unlock(outer), fairlock.ErrNoQuorum, "the lock is still held: the outer Unlock must not return nil")
				requireDone(t, outer, refusalWithin)
				refuse(false)
			}
			require.Eventually(t, func() bool { return held() == 0 },
				refusalWithin, 10*time.Millisecond, "every master is free once it takes releases again")
		})
	}
}
