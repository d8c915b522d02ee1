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
		calls := hook.take()
		require.NotEmpty(t, calls)
		for _, id := range calls {
			if honours {
				require.Equal(t, me, id, "ContextTimeoutEnabled: the calls are sent from the caller's goroutine")
			} else {
				require.NotEqual(t, me, id, "without ContextTimeoutEnabled: from a goroutine of their own")
			}
		}

		// Contended: a second Lock waits in line and is handed the lock.
		next := lockAsync(ctx, m)
		e.waitQueued("inline", 1)
		require.NoError(t, m.Unlock(hctx))
		got := await(t, next, 5*time.Second)
		require.NoError(t, got.err)
		require.NoError(t, m.Unlock(got.ctx))
		cancel()
		e.requireClean("inline")
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
