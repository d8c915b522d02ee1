package fairlock_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/fairlock/fairlock/queue"
)

// The tests of this file each hold one promise of the docs that broke
// outside the happy path: other deployments behind the same key, nested
// contexts, fixed leases handed over, restarts, error replies, Close.

func TestSameNameInAnotherDBIsAnotherLock(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	a := e.client().Mutex("invoice")
	db1 := func() *redis.Client {
		c := redis.NewClient(&redis.Options{Addr: e.srv.Addr, DB: 1})
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	newDB1Client := func() *fairlock.Client {
		c, err := fairlock.New(db1(), fairlock.WithPrefix(e.prefix))
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	b := newDB1Client().Mutex("invoice")

	actx, err := a.Lock(ctx)
	require.NoError(t, err)
	bctx, err := b.Lock(actx)
	require.NoError(t, err, "the same name in DB 1 is another lock, free")

	_, err = newDB1Client().Mutex("invoice").TryLock(ctx)
	require.ErrorIs(t, err, fairlock.ErrLocked, "the lock in DB 1 is held")
	n, err := a.HoldCount(actx)
	require.NoError(t, err)
	require.Equal(t, 1, n, "the hold in DB 0 was not re-entered")
	n, err = b.HoldCount(bctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	ta, err := a.Token(bctx)
	require.NoError(t, err, "the context still carries the DB 0 hold")
	tb, err := b.Token(bctx)
	require.NoError(t, err)
	// Each is the token of its own DB's hold (two locks granted in one ms
	// may get the same token: each lock's tokens rise on their own).
	key := e.keys("invoice").Lock
	require.Equal(t, strconv.FormatInt(ta, 10), e.rdb.HGet(ctx, key, "token").Val(), "the DB 0 hold's token")
	require.Equal(t, strconv.FormatInt(tb, 10), db1().HGet(ctx, key, "token").Val(), "the DB 1 hold's token")

	require.ErrorIs(t, b.Unlock(actx), fairlock.ErrNotHeld, "actx carries no hold of the DB 1 lock")
	require.NoError(t, b.Unlock(bctx))
	locked, err := a.IsLocked(ctx)
	require.NoError(t, err)
	require.True(t, locked, "the DB 0 lock is untouched by unlocking DB 1")
	require.NoError(t, a.Unlock(bctx), "bctx still carries the DB 0 hold")
	locked, err = b.IsLocked(ctx)
	require.NoError(t, err)
	require.False(t, locked)
}

func TestSameLockThroughAnotherClientIsReentered(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	a := e.client().Mutex("shared-deployment")
	a2 := e.client().Mutex("shared-deployment") // another Client, the same Redis and prefix

	actx, err := a.Lock(ctx)
	require.NoError(t, err)
	a2ctx, err := a2.Lock(actx)
	require.NoError(t, err, "the same lock: re-entered, not waited for")
	n, err := a.HoldCount(actx)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	require.NoError(t, a2.Unlock(a2ctx))
	require.NoError(t, a.Unlock(actx))
	locked, err := a.IsLocked(ctx)
	require.NoError(t, err)
	require.False(t, locked)
}

func TestLostHoldInANestedContextIsNotReentered(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	// Renewed every third of a second: the outer hold is lost at its next
	// renewal, and the inner one, renewed as often, outlives a loaded
	// machine's scheduling delays.
	c := e.client(fairlock.WithLease(time.Second))
	a, b := c.Mutex("outer"), c.Mutex("inner")
	actx, err := a.Lock(ctx)
	require.NoError(t, err)
	bctx, err := b.Lock(actx)
	require.NoError(t, err)

	require.NoError(t, e.rdb.Del(ctx, e.keys("outer").Lock).Err())
	requireDone(t, actx, 3*time.Second)
	require.NoError(t, bctx.Err(), "the inner hold is not lost")

	_, err = a.Lock(bctx)
	require.ErrorIs(t, err, fairlock.ErrLeaseLost, "a re-entry of a lost hold is never a fresh grant")
	_, err = a.Lock(actx)
	require.ErrorIs(t, err, fairlock.ErrLeaseLost, "the lost hold's own context says why it ended")
	require.ErrorIs(t, err, context.Canceled)
	locked, err := a.IsLocked(ctx)
	require.NoError(t, err)
	require.False(t, locked)
	require.NoError(t, b.Unlock(bctx))
}

func TestFixedLeaseGrantedByHandOverLastsItsFullLength(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("longer than the waiter TTL", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		holder := e.client().Mutex("fixed-long")
		hctx, err := holder.Lock(ctx)
		require.NoError(t, err)
		next := lockAsync(ctx, e.client().Mutex("fixed-long", fairlock.WithFixedLease(30*time.Second)))
		e.waitQueued("fixed-long", 1)
		require.NoError(t, holder.Unlock(hctx))
		r := await(t, next, 5*time.Second)
		require.NoError(t, r.err)
		ttl, err := holder.TTL(ctx)
		require.NoError(t, err)
		require.Greater(t, ttl, 25*time.Second, "a 30s fixed lease, not the 10s waiter TTL")
		require.NoError(t, holder.Unlock(r.ctx))
	})

	t.Run("context and Redis end it together", func(t *testing.T) {
		redistest.Slow(t)
		t.Parallel()
		e := newEnv(t)
		const d = 1500 * time.Millisecond
		ttl := fairlock.WithWaiterTTL(500 * time.Millisecond)
		holder := e.client(ttl).Mutex("fixed-short")
		hctx, err := holder.Lock(ctx)
		require.NoError(t, err)
		fixed := e.client(ttl).Mutex("fixed-short", fairlock.WithFixedLease(d))
		next := lockAsync(ctx, fixed)
		e.waitQueued("fixed-short", 1)
		third := lockAsync(ctx, e.client().Mutex("fixed-short"))
		e.waitQueued("fixed-short", 2)
		require.NoError(t, holder.Unlock(hctx))
		r := await(t, next, 5*time.Second)
		require.NoError(t, r.err)
		granted := time.Now()
		token, err := fixed.Token(r.ctx)
		require.NoError(t, err)

		requireDone(t, r.ctx, d+2*time.Second)
		ended := time.Now()
		require.ErrorIs(t, context.Cause(r.ctx), fairlock.ErrLeaseLost)
		require.GreaterOrEqual(t, ended.Sub(granted), d-100*time.Millisecond,
			"the hold lasted %v of its %v", ended.Sub(granted), d)
		// The key does not outlive the context: the hold is released (or
		// expires) as the context ends, and the next waiter gets the lock.
		require.Eventually(t, func() bool {
			return e.rdb.HGet(ctx, e.keys("fixed-short").Lock, "token").Val() != strconv.FormatInt(token, 10)
		}, 500*time.Millisecond, time.Millisecond, "the key outlived the hold's context")
		r3 := await(t, third, 5*time.Second)
		require.NoError(t, r3.err)
		require.NoError(t, holder.Unlock(r3.ctx))
	})
}

func TestTokensKeepRisingAcrossARestartWithoutPersistence(t *testing.T) {
	t.Parallel()
	e := newPrivateEnv(t)
	ctx := context.Background()
	m := e.client().Mutex("restart-tokens")
	var last int64
	for range 3 {
		hctx, err := m.Lock(ctx)
		require.NoError(t, err)
		last, err = m.Token(hctx)
		require.NoError(t, err)
		require.NoError(t, m.Unlock(hctx))
	}
	require.NoError(t, e.srv.Restart())
	var hctx context.Context
	require.Eventually(t, func() bool {
		var err error
		hctx, err = m.Lock(ctx)
		return err == nil
	}, 5*time.Second, 20*time.Millisecond)
	tok, err := m.Token(hctx)
	require.NoError(t, err)
	require.Greater(t, tok, last, "the restarted server lost the counter, not the order")
	require.NoError(t, m.Unlock(hctx))
}

func TestHealthyUnlocksLogNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	logs := &logRecorder{info: true}
	c := e.client(fairlock.WithLease(10*time.Millisecond), fairlock.WithLogger(slog.New(logs)))
	m := c.Mutex("quiet")
	ctx := context.Background()
	lost := 0
	for i := range 100 {
		hctx, err := m.Lock(ctx)
		require.NoError(t, err)
		time.Sleep(time.Duration(i%7) * time.Millisecond) // a renewal every 3.3ms: some are out at Unlock
		if err := m.Unlock(hctx); err != nil {
			// A machine too busy to renew a 10ms lease in time loses it
			// for real: that is not what this test is about.
			require.ErrorIs(t, err, fairlock.ErrLeaseLost)
			lost++
		}
	}
	require.NoError(t, c.Close()) // the renewals still out are answered
	// A hold lost for real is logged once, and its Unlock says so; a
	// renewal that our own Unlock overtook is no loss, and logs nothing.
	var losses []string
	for _, l := range logs.all() {
		if strings.Contains(l, "lease lost") {
			losses = append(losses, l)
		}
	}
	require.LessOrEqual(t, len(losses), lost,
		"a renewal cut short by our own Unlock is no failure: %d holds lost: %q", lost, losses)
}

func TestUnansweredUnlockIsSentAgainUntilRedisAnswers(t *testing.T) {
	t.Parallel()
	e := newPrivateEnv(t)
	ctx := context.Background()
	// A call timeout of a second: the Unlock gives up on its answer then.
	c, proxy := e.proxied(&redis.Options{MaxRetries: 1, DialTimeout: 200 * time.Millisecond, ReadTimeout: 200 * time.Millisecond},
		fairlock.WithCallTimeout(time.Second))
	holder := c.Mutex("resent-unlock") // a 30s lease
	hctx, err := holder.Lock(ctx)
	require.NoError(t, err)
	next := lockAsync(ctx, e.client().Mutex("resent-unlock"))
	e.waitQueued("resent-unlock", 1)

	proxy.Reject()
	err = holder.Unlock(hctx)
	require.Error(t, err)
	require.NotErrorIs(t, err, fairlock.ErrLeaseLost)
	require.ErrorContains(t, err, "sent again")
	requireDone(t, hctx, time.Second)
	proxy.Heal()
	r := await(t, next, 5*time.Second) // not the 30s lease
	require.NoError(t, r.err)
	require.NoError(t, e.client().Mutex("resent-unlock").Unlock(r.ctx))
}

func TestTransientErrorRepliesKeepAWaiterInLine(t *testing.T) {
	t.Parallel()
	e := newPrivateEnv(t)
	ctx := context.Background()
	holder := e.client().Mutex("readonly")
	hctx, err := holder.Lock(ctx)
	require.NoError(t, err)
	waiter := e.client(fairlock.WithWaiterTTL(900 * time.Millisecond)).Mutex("readonly")
	next := lockAsync(ctx, waiter)
	e.waitQueued("readonly", 1)

	// A primary demoted to a replica (as in a failover) answers every
	// script that writes with READONLY; nothing listens on port 1, so it
	// keeps its data. The waiter's polls are refused, and sent again.
	require.NoError(t, e.rdb.Do(ctx, "REPLICAOF", "127.0.0.1", "1").Err())
	require.Eventually(t, func() bool {
		info, err := e.rdb.Info(ctx, "errorstats").Result()
		var n int
		_, _ = fmt.Sscanf(redistest.InfoField(info, "errorstat_READONLY"), "count=%d", &n)
		return err == nil && n >= 2
	}, 5*time.Second, 5*time.Millisecond, "the waiter polled while the server was read-only")
	require.NoError(t, e.rdb.Do(ctx, "REPLICAOF", "NO", "ONE").Err())
	select {
	case r := <-next:
		t.Fatalf("the waiter left the line: %v", r.err)
	default:
	}
	require.NoError(t, holder.Unlock(hctx))
	r := await(t, next, 5*time.Second)
	require.NoError(t, r.err)
	require.NoError(t, waiter.Unlock(r.ctx))
}

func TestCloseReturnsWithinOneCallTimeoutOnAHungServer(t *testing.T) {
	redistest.Slow(t)
	t.Parallel()
	e := newPrivateEnv(t)
	ctx := context.Background()
	const callTimeout = 1500 * time.Millisecond
	// Every call on the hung server lasts until its context's deadline.
	c, proxy := e.proxied(&redis.Options{ContextTimeoutEnabled: true, ReadTimeout: time.Minute},
		fairlock.WithCallTimeout(callTimeout))
	for _, name := range []string{"held-1", "held-2"} {
		_, err := c.Mutex(name).Lock(ctx)
		require.NoError(t, err)
	}
	other := e.client().Mutex("busy")
	octx, err := other.Lock(ctx)
	require.NoError(t, err)
	waiting := lockAsync(ctx, c.Mutex("busy"))
	e.waitQueued("busy", 1)

	proxy.FreezeAll()
	start := time.Now()
	require.NoError(t, c.Close())
	took := time.Since(start)
	// One call timeout, with room for a loaded machine; clean-ups one
	// after another took twice that.
	require.Less(t, took, callTimeout+time.Second, "Close took %v", took)
	r := await(t, waiting, time.Second)
	require.ErrorIs(t, r.err, fairlock.ErrClosed)
	require.NoError(t, other.Unlock(octx))
}

func TestUnlockAndTokenAfterCloseAreNotHeldAndClosed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := e.client()
	m := c.Mutex("after-close")
	hctx, err := m.Lock(context.Background())
	require.NoError(t, err)
	require.NoError(t, c.Close())
	for _, err := range []error{m.Unlock(hctx), func() error { _, err := m.Token(hctx); return err }()} {
		require.ErrorIs(t, err, fairlock.ErrNotHeld)
		require.ErrorIs(t, err, fairlock.ErrClosed)
	}
	_, err = m.Lock(context.Background())
	require.True(t, errors.Is(err, fairlock.ErrClosed))
}

func TestRedisKeepsOnlyTheTokenAndShortLivedReceiptsOfAFreeLock(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	m := e.client().Mutex("footprint") // a 30s lease
	hctx, err := m.Lock(ctx)
	require.NoError(t, err)
	inner, err := m.Lock(hctx)
	require.NoError(t, err)
	require.NoError(t, m.Unlock(inner))
	require.NoError(t, m.Unlock(hctx))

	k := e.keys("footprint")
	keys, err := e.rdb.Keys(ctx, e.prefix+":*").Result()
	require.NoError(t, err)
	var receipts []string
	for _, key := range keys {
		switch {
		case key == k.Token:
			ttl := e.rdb.PTTL(ctx, key).Val()
			require.Positive(t, ttl, "the token counter expires")
			require.LessOrEqual(t, ttl, 30*time.Second, "with the hold it was taken for")
		case strings.HasPrefix(key, k.Call("")):
			receipts = append(receipts, key)
		case key == queue.LayoutKey(e.prefix):
			// the prefix's layout version: one key per prefix, not per lock
		default:
			t.Errorf("a free lock keeps %s", key)
		}
	}
	require.Len(t, receipts, 3, "one per call whose re-send would be ambiguous: the re-entry and the two releases")
	var short, long int
	for _, key := range receipts {
		ttl := e.rdb.PTTL(ctx, key).Val()
		require.Positive(t, ttl, "%s expires", key)
		switch {
		case ttl <= 20*time.Second:
			short++ // a re-entry's: twice the call timeout
		case ttl <= 50*time.Second:
			long++ // a release's: the lease and twice the call timeout, for its re-sends
		default:
			t.Errorf("%s lives %v", key, ttl)
		}
	}
	require.Equal(t, 1, short)
	require.Equal(t, 2, long)
}

func TestLockWaitsThroughAnOutageThatStartsBeforeIt(t *testing.T) {
	t.Parallel()
	e := newPrivateEnv(t)
	ctx := context.Background()
	// A call timeout of a second: the TryLock gives up on an answer then.
	c, proxy := e.proxied(&redis.Options{MaxRetries: 1, DialTimeout: 100 * time.Millisecond}, fairlock.WithCallTimeout(time.Second))
	m := c.Mutex("outage")
	hctx, err := m.Lock(ctx) // the server check and the scripts are done
	require.NoError(t, err)
	require.NoError(t, m.Unlock(hctx))

	proxy.Reject()
	_, err = m.TryLock(ctx)
	require.Error(t, err, "TryLock never waits")
	require.NotErrorIs(t, err, fairlock.ErrLocked)
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	r := lockAsync(wctx, m)
	time.Sleep(300 * time.Millisecond) // the outage outlasts the first attempt
	select {
	case got := <-r:
		t.Fatalf("Lock gave up during the outage: %v", got.err)
	default:
	}
	proxy.Heal()
	got := await(t, r, 8*time.Second)
	require.NoError(t, got.err)
	n, err := m.HoldCount(got.ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n, "one level, however many attempts")
	require.NoError(t, m.Unlock(got.ctx))
	e.requireClean("outage")
}

func TestUnlockRefusedDuringAFailoverIsSentAgain(t *testing.T) {
	t.Parallel()
	e := newPrivateEnv(t)
	ctx := context.Background()
	// A 30 s lease, and a call timeout far below it.
	holder := e.client(fairlock.WithCallTimeout(500 * time.Millisecond)).Mutex("norepl")
	hctx, err := holder.Lock(ctx)
	require.NoError(t, err)
	next := lockAsync(ctx, e.client().Mutex("norepl"))
	e.waitQueued("norepl", 1)

	// Writes are refused (NOREPLICAS) as on a primary that lost its
	// replicas in a failover, for longer than the call timeout: Unlock
	// rides the refusal out until then, and then says so.
	require.NoError(t, e.rdb.ConfigSet(ctx, "min-replicas-to-write", "1").Err())
	err = holder.Unlock(hctx)
	require.ErrorContains(t, err, "NOREPLICAS")
	require.ErrorContains(t, err, "sent again")
	require.NoError(t, e.rdb.ConfigSet(ctx, "min-replicas-to-write", "0").Err())
	r := await(t, next, 5*time.Second) // not the 30s lease
	require.NoError(t, r.err)
	require.NoError(t, e.client().Mutex("norepl").Unlock(r.ctx))
}

func TestUnlockRidesOutARefusalThatEndsWithinTheCallTimeout(t *testing.T) {
	t.Parallel()
	e := newPrivateEnv(t)
	ctx := context.Background()
	holder := e.client().Mutex("norepl") // a 10s call timeout
	hctx, err := holder.Lock(ctx)
	require.NoError(t, err)
	next := lockAsync(ctx, e.client().Mutex("norepl"))
	e.waitQueued("norepl", 1)

	require.NoError(t, e.rdb.ConfigSet(ctx, "min-replicas-to-write", "1").Err())
	healed := make(chan struct{})
	go func() {
		defer close(healed)
		// Heal once the release was refused and sent again.
		assert.Eventually(t, func() bool {
			info, err := e.rdb.Info(ctx, "errorstats").Result()
			var n int
			_, _ = fmt.Sscanf(redistest.InfoField(info, "errorstat_NOREPLICAS"), "count=%d", &n)
			return err == nil && n >= 2
		}, 5*time.Second, 5*time.Millisecond)
		assert.NoError(t, e.rdb.ConfigSet(ctx, "min-replicas-to-write", "0").Err())
	}()
	require.NoError(t, holder.Unlock(hctx))
	<-healed
	r := await(t, next, 5*time.Second)
	require.NoError(t, r.err)
	require.NoError(t, e.client().Mutex("norepl").Unlock(r.ctx))
}

func TestGrantAnsweredLateIsClaimedNotLost(t *testing.T) {
	redistest.Slow(t)
	t.Parallel()
	e := newPrivateEnv(t)
	ctx := context.Background()
	const lease = time.Second
	c, proxy := e.proxied(&redis.Options{ReadTimeout: 5 * time.Second}, fairlock.WithLease(lease))
	m := c.Mutex("late")
	hctx, err := m.Lock(ctx) // the server check and the scripts are done
	require.NoError(t, err)
	require.NoError(t, m.Unlock(hctx))

	// The grant reaches Redis 1.5s after it was sent (a stalled network):
	// by its answer, a lease from its send time is spent.
	proxy.SetLatency(1500 * time.Millisecond)
	r := lockAsync(ctx, m)
	time.Sleep(100 * time.Millisecond) // the call is on the wire
	proxy.SetLatency(0)
	got := await(t, r, 10*time.Second)
	require.NoError(t, got.err)
	select {
	case <-got.ctx.Done():
		t.Fatalf("the hold ended %v", context.Cause(got.ctx))
	case <-time.After(3 * lease):
	}
	ttl, err := m.TTL(ctx)
	require.NoError(t, err)
	require.Positive(t, ttl)
	require.NoError(t, m.Unlock(got.ctx))
}

func TestHoldCountOfAnEndedHoldsContextIsZero(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	m := e.client().Mutex("ended-count")
	hctx, err := m.Lock(ctx)
	require.NoError(t, err)
	require.NoError(t, m.Unlock(hctx))
	n, err := m.HoldCount(hctx)
	require.NoError(t, err)
	require.Zero(t, n)

	shared := fairlock.ContextWithOwner(ctx, "worker-7")
	a, err := m.Lock(shared)
	require.NoError(t, err)
	b, err := e.client().Mutex("ended-count").Lock(shared) // the same owner, another Client
	require.NoError(t, err)
	require.NoError(t, m.Unlock(a))
	n, err = m.HoldCount(a)
	require.NoError(t, err)
	require.Equal(t, 1, n, "the shared owner still holds a level")
	require.NoError(t, e.client().Mutex("ended-count").Unlock(b))
}

func TestWaiterThatGivesUpDuringAnOutageLeavesOnceRedisAnswers(t *testing.T) {
	t.Parallel()
	e := newPrivateEnv(t)
	ctx := context.Background()
	holder := e.client().Mutex("leave-later")
	hctx, err := holder.Lock(ctx)
	require.NoError(t, err)
	c, proxy := e.proxied(&redis.Options{MaxRetries: 1, DialTimeout: 100 * time.Millisecond})
	wctx, cancel := context.WithCancel(ctx)
	r := lockAsync(wctx, c.Mutex("leave-later")) // a 10s waiter TTL
	e.waitQueued("leave-later", 1)

	proxy.Reject()
	cancel()
	got := await(t, r, 5*time.Second)
	require.ErrorIs(t, got.err, context.Canceled)
	proxy.Heal()
	require.Eventually(t, func() bool { return len(e.queued("leave-later")) == 0 }, 5*time.Second, 10*time.Millisecond,
		"the entry leaves once Redis answers, not after the waiter TTL")
	e.requireClean("leave-later")
	require.NoError(t, holder.Unlock(hctx))
}
