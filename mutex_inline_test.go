package fairlock_test

import (
	"bytes"
	"context"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock"
)

// goroutineID returns the id of the calling goroutine, from its stack's
// first line ("goroutine 12 [running]:").
func goroutineID() string {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	id, _, _ := bytes.Cut(bytes.TrimPrefix(buf, []byte("goroutine ")), []byte(" "))
	return string(id)
}

// scriptGoroutines is a go-redis hook that records the goroutine of each
// script call (FCALL, EVALSHA, EVAL) sent alone.
type scriptGoroutines struct {
	mu  sync.Mutex
	ids []string
}

func (h *scriptGoroutines) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *scriptGoroutines) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		switch cmd.Name() {
		case "fcall", "evalsha", "eval":
			h.mu.Lock()
			h.ids = append(h.ids, goroutineID())
			h.mu.Unlock()
		}
		return next(ctx, cmd)
	}
}
func (h *scriptGoroutines) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *scriptGoroutines) take() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	ids := h.ids
	h.ids = nil
	return ids
}

// On a go-redis client that bounds each call by its context's deadline
// (ContextTimeoutEnabled), a Lock whose context has a deadline sends its
// calls from the caller's goroutine; on one that does not, from a
// goroutine of its own, so that it can return the moment the context
// ends. Either way the Lock and the Unlock work, uncontended and
// contended.
func TestLockRunsOnTheCallersGoroutineWhereGoRedisHonoursTheDeadline(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, honours := range []bool{true, false} {
		hook := &scriptGoroutines{}
		rdb := redis.NewClient(&redis.Options{Addr: e.srv.Addr, ContextTimeoutEnabled: honours})
		t.Cleanup(func() { _ = rdb.Close() })
		rdb.AddHook(hook)
		c, err := fairlock.New(rdb, fairlock.WithPrefix(e.prefix))
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		m := c.Mutex("inline")

		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		hctx, err := m.Lock(ctx) // the server check runs first
		require.NoError(t, err)
		require.NoError(t, m.Unlock(hctx))
		hook.take()

		me := goroutineID()
		hctx, err = m.Lock(ctx)
		require.NoError(t, err)
		requireSentFrom(t, hook.take(), me, honours, "Lock")

		// Contended: a second Lock waits in line and is handed the lock.
		// The Unlock's context has the Lock's deadline: its release goes
		// out the same way.
		next := lockAsync(ctx, m)
		e.waitQueued("inline", 1)
		hook.take()
		uctx, ucancel := context.WithTimeout(hctx, 10*time.Second) // the held context has no deadline of its own
		require.NoError(t, m.Unlock(uctx))
		ucancel()
		requireSentFrom(t, hook.take(), me, honours, "Unlock")
		got := await(t, next, 5*time.Second)
		require.NoError(t, got.err)
		require.NoError(t, m.Unlock(got.ctx))

		// A MultiLock's Unlock: the releases of its names in one call.
		ml := c.MultiLock([]string{"inline-a", "inline-b"})
		mctx, err := ml.Lock(ctx)
		require.NoError(t, err)
		hook.take()
		uctx, ucancel = context.WithTimeout(mctx, 10*time.Second)
		require.NoError(t, ml.Unlock(uctx))
		ucancel()
		requireSentFrom(t, hook.take(), me, honours, "MultiLock.Unlock")

		// A Semaphore's Release and a RWMutex's Unlock and RUnlock, weighted
		// holds: the same.
		sem, rw := c.Semaphore("inline-s", 2), c.RWMutex("inline-rw")
		releases := map[string]func() error{
			"Semaphore.Release": func() error {
				sctx, err := sem.Acquire(ctx, 1)
				require.NoError(t, err)
				hook.take()
				uctx, ucancel := context.WithTimeout(sctx, 10*time.Second)
				defer ucancel()
				return sem.Release(uctx)
			},
			"RWMutex.Unlock": func() error {
				wctx, err := rw.Lock(ctx)
				require.NoError(t, err)
				hook.take()
				uctx, ucancel := context.WithTimeout(wctx, 10*time.Second)
				defer ucancel()
				return rw.Unlock(uctx)
			},
			"RWMutex.RUnlock": func() error {
				rctx, err := rw.RLock(ctx)
				require.NoError(t, err)
				hook.take()
				uctx, ucancel := context.WithTimeout(rctx, 10*time.Second)
				defer ucancel()
				return rw.RUnlock(uctx)
			},
		}
		for what, release := range releases {
			require.NoError(t, release(), what)
			requireSentFrom(t, hook.take(), me, honours, what)
		}
		cancel()
		e.requireClean("inline")
		e.requireClean("inline-a")
		e.requireClean("inline-b")
	}
}

// requireSentFrom asserts that the script calls ids (goroutine ids, at
// least one) were sent from the goroutine me when honours, and from
// others otherwise.
func requireSentFrom(t *testing.T, ids []string, me string, honours bool, what string) {
	t.Helper()
	require.NotEmpty(t, ids, what)
	for _, id := range ids {
		if honours {
			require.Equal(t, me, id, "%s, ContextTimeoutEnabled: sent from the caller's goroutine", what)
		} else {
			require.NotEqual(t, me, id, "%s, without ContextTimeoutEnabled: from a goroutine of its own", what)
		}
	}
}

// On a client with ContextTimeoutEnabled, an Unlock whose release's reply
// is lost (the server released; the answer never comes) returns the
// deadline's error by its deadline, and the release is sent again in the
// background under the same call id: the waiter is handed the lock at
// once, not when the 30 s lease runs out. One whose release never got
// there (every connection refused) is sent again too, and counts once
// Redis is back.
func TestInlineUnlockCutByItsDeadlineIsSentAgain(t *testing.T) {
	t.Parallel()
	for _, refused := range []bool{false, true} {
		e := newPrivateEnv(t)
		c, proxy := e.proxied(&redis.Options{ContextTimeoutEnabled: true, MaxRetries: -1})
		m := c.Mutex("cut")
		hctx, err := m.Lock(context.Background())
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			libs, err := e.rdb.FunctionList(context.Background(), redis.FunctionListQuery{}).Result()
			return err == nil && len(libs) > 0
		}, 5*time.Second, 10*time.Millisecond, "the library is loaded (in the background), so that the lost reply is the Unlock's")
		other := e.client().Mutex("cut")
		next := lockAsync(context.Background(), other)
		e.waitQueued("cut", 1)

		if refused {
			proxy.Reject()
		} else {
			proxy.LoseNextReply()
		}
		ctx, cancel := context.WithTimeout(hctx, 300*time.Millisecond)
		start := time.Now()
		err = m.Unlock(ctx)
		cancel()
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.Less(t, time.Since(start), 2*time.Second, "by the deadline, not the 10 s call timeout")
		require.ErrorIs(t, m.Unlock(hctx), fairlock.ErrNotHeld, "the hold ended here")
		if refused {
			proxy.Heal()
		} else {
			require.Equal(t, 1, proxy.Lost(), "the server released; its answer was lost")
		}
		got := await(t, next, 5*time.Second)
		require.NoError(t, got.err, "the waiter is handed the lock by the release, not by its lease running out")
		require.NoError(t, other.Unlock(got.ctx))
		e.requireClean("cut")
	}
}

// On a client with ContextTimeoutEnabled, a Lock whose reply is lost (the
// server granted it; the answer never comes) returns with its context's
// error by its deadline, not at the call timeout, and gives back what the
// server did: the next Lock is granted at once, not when the 30 s lease
// runs out, and Redis keeps nothing of the first. The same holds for a
// Lock that waited in line when its deadline came.
func TestInlineLockCutByItsDeadlineLeavesNothing(t *testing.T) {
	t.Parallel()
	e := newPrivateEnv(t)
	c, proxy := e.proxied(&redis.Options{ContextTimeoutEnabled: true, MaxRetries: -1})
	m := c.Mutex("cut")
	warm, err := m.Lock(context.Background()) // the server check and the library load
	require.NoError(t, err)
	require.NoError(t, m.Unlock(warm))
	require.Eventually(t, func() bool {
		libs, err := e.rdb.FunctionList(context.Background(), redis.FunctionListQuery{}).Result()
		return err == nil && len(libs) > 0
	}, 5*time.Second, 10*time.Millisecond, "the library is loaded (in the background), so that the lost reply is the Lock's")

	proxy.LoseNextReply()
	ctx, cancel := context.WithTimeout(fairlock.ContextWithOwner(context.Background(), "cut-owner"), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = m.Lock(ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Less(t, time.Since(start), 5*time.Second, "by the deadline (and a grace for the clean-up), not the 10 s call timeout")
	require.Equal(t, 1, proxy.Lost(), "the server acted on the Lock; its answer was lost")

	other := e.client().Mutex("cut")
	octx, ocancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer ocancel()
	hctx, err := other.Lock(octx)
	require.NoError(t, err, "the grant the lost answer carried was given back")
	require.Eventually(t, func() bool { return e.traceOf("cut", "cut-owner") == "" }, 5*time.Second, 10*time.Millisecond)

	// A Lock that waits in line past its deadline leaves the line.
	wctx, wcancel := context.WithTimeout(fairlock.ContextWithOwner(context.Background(), "cut-waiter"), 300*time.Millisecond)
	defer wcancel()
	_, err = m.Lock(wctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Eventually(t, func() bool { return e.traceOf("cut", "cut-waiter") == "" }, 5*time.Second, 10*time.Millisecond)
	require.NoError(t, other.Unlock(hctx))
	e.requireClean("cut")
}
