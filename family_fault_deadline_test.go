package fairlock_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/fairlock/fairlock/queue"
)

// deadlineBound is how long after it was called a call with a 100ms
// deadline may return on a hung server: the deadline, the clean-up grace
// of a Lock (200ms) and room for a loaded machine. A call that waits for
// the server instead returns after the hang (about 3s).
const deadlineBound = time.Second

// hangBySleep makes the server busy for 3s with DEBUG SLEEP, sent from a
// connection of its own, and returns once the server has stopped
// answering.
func hangBySleep(t *testing.T, e *env) {
	t.Helper()
	sleeper := e.dial(t)
	refused := make(chan error, 1)
	go func() {
		if err := sleeper.Do(context.Background(), "DEBUG", "SLEEP", 3).Err(); err != nil {
			refused <- err
		}
	}()
	requireHung(t, e, refused)
}

// requireHung waits until a PING on a fresh connection goes unanswered,
// unless the hang fails (refused).
func requireHung(t *testing.T, e *env, refused <-chan error) {
	t.Helper()
	probe := redis.NewClient(&redis.Options{Addr: e.srv.Addr, ReadTimeout: 50 * time.Millisecond, MaxRetries: -1})
	defer probe.Close()
	require.Eventually(t, func() bool {
		select {
		case err := <-refused:
			require.NoError(t, err, "hanging the server")
		default:
		}
		err := probe.Ping(context.Background()).Err()
		var timeout interface{ Timeout() bool }
		return errors.As(err, &timeout) && timeout.Timeout()
	}, 5*time.Second, time.Millisecond, "the server stops answering")
}

// hungClients are Clients that have made no call yet, each to make one
// kind of call on a hung server.
type hungClients struct {
	lock, try, reenter, isLocked, ttl, holdCount, force *fairlock.Mutex
}

func newHungClients(e *env) hungClients {
	fresh := func(name string) *fairlock.Mutex { return e.client().Mutex(name) }
	return hungClients{
		lock: fresh("hung"), try: fresh("hung"), reenter: fresh("hung"),
		isLocked: fresh("hung"), ttl: fresh("hung"), holdCount: fresh("hung"),
		force: fresh("forced"), // a free lock: its ForceUnlock, answered late, removes nothing
	}
}

// calls returns each kind of call, by name; held is the context of a hold
// of the lock taken through another Client.
func (c hungClients) calls(held context.Context) map[string]func(ctx context.Context) error {
	return map[string]func(ctx context.Context) error{
		"Lock":    func(ctx context.Context) error { _, err := c.lock.Lock(ctx); return err },
		"TryLock": func(ctx context.Context) error { _, err := c.try.TryLock(ctx); return err },
		// A context that carries a hold taken through another Client:
		// whether it is this lock's is asked of Redis first.
		"Lock re-entering another Client's hold": func(ctx context.Context) error {
			_, err := c.reenter.Lock(withValuesOf(ctx, held))
			return err
		},
		"IsLocked": func(ctx context.Context) error { _, err := c.isLocked.IsLocked(ctx); return err },
		"TTL":      func(ctx context.Context) error { _, err := c.ttl.TTL(ctx); return err },
		"HoldCount": func(ctx context.Context) error {
			_, err := c.holdCount.HoldCount(fairlock.ContextWithOwner(ctx, "someone"))
			return err
		},
		"ForceUnlock": func(ctx context.Context) error { _, err := c.force.ForceUnlock(ctx); return err },
	}
}

// unlockOnHold returns an Unlock of a hold taken before the hang,
// made with a context that carries the hold and the call's deadline, and
// returns a check, for when the server answers again, that the release
// went on in the background: the lock is freed, a lease before it would
// have expired.
func unlockOnHold(t *testing.T, e *env) (unlock func(ctx context.Context) error, freed func()) {
	t.Helper()
	m := e.client().Mutex("unlocked")
	held, err := m.Lock(context.Background())
	require.NoError(t, err)
	unlock = func(ctx context.Context) error { return m.Unlock(withValuesOf(ctx, held)) }
	return unlock, func() {
		t.Helper()
		requireDone(t, held, deadlineBound)
		require.Eventually(t, func() bool {
			locked, err := m.IsLocked(context.Background())
			return err == nil && !locked
		}, 10*time.Second, 10*time.Millisecond, "the release sent before the deadline frees the lock once the server answers")
	}
}

// withValuesOf returns ctx with the values of vals (the hold it carries)
// and ctx's deadline.
func withValuesOf(ctx, vals context.Context) context.Context {
	return valuesOf{Context: ctx, vals: vals}
}

type valuesOf struct {
	context.Context
	vals context.Context
}

func (v valuesOf) Value(key any) any { return v.vals.Value(key) }

// requireDeadlinesHonoured makes every call at once on the hung server,
// each with a 100ms deadline, and asserts that each returns
// context.DeadlineExceeded within deadlineBound.
func requireDeadlinesHonoured(t *testing.T, calls map[string]func(ctx context.Context) error) {
	t.Helper()
	type outcome struct {
		took time.Duration
		err  error
	}
	var mu sync.Mutex
	got := make(map[string]outcome)
	var wg sync.WaitGroup
	for name, call := range calls {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			start := time.Now()
			err := call(ctx)
			mu.Lock()
			got[name] = outcome{time.Since(start), err}
			mu.Unlock()
		})
	}
	wg.Wait()
	for name, o := range got {
		assert.ErrorIs(t, o.err, context.DeadlineExceeded, name)
		assert.Less(t, o.took, deadlineBound, "%s returned %v after it was called", name, o.took)
	}
}

// The first Lock of a Client checks the server (INFO, CONFIG GET); while
// DEBUG SLEEP keeps the server busy, that check, like every other call,
// ends at the caller's deadline. A check cut short is no verdict: once
// the server answers, the Clients refuse its unsafe eviction policy.
func TestFirstCallsHonourTheirDeadlineWhileRedisSleeps(t *testing.T) {
	redistest.Slow(t)
	t.Parallel()
	srv, err := redistest.Start("--enable-debug-command", "local")
	require.NoError(t, err)
	t.Cleanup(srv.Stop)
	e := serverEnv(t, srv)
	ctx := context.Background()
	holder := e.client().Mutex("hung")
	held, err := holder.Lock(ctx) // its Client checked the server before the policy changed
	require.NoError(t, err)
	unlock, freed := unlockOnHold(t, e)
	require.NoError(t, e.rdb.ConfigSet(ctx, "maxmemory", "1gb").Err())
	require.NoError(t, e.rdb.ConfigSet(ctx, "maxmemory-policy", "allkeys-lru").Err())
	c := newHungClients(e)
	calls := c.calls(held)
	calls["Unlock"] = unlock

	hangBySleep(t, e)
	requireDeadlinesHonoured(t, calls)

	// The server answers again once it has slept.
	require.Eventually(t, func() bool {
		_, err := c.isLocked.IsLocked(ctx)
		return err == nil
	}, 10*time.Second, 10*time.Millisecond, "the Client reads the lock once the server answers")
	_, err = c.lock.Lock(ctx)
	require.ErrorIs(t, err, fairlock.ErrUnsafeServer)
	_, err = c.try.TryLock(ctx)
	require.ErrorIs(t, err, fairlock.ErrUnsafeServer)
	ttl, err := c.ttl.TTL(ctx)
	require.NoError(t, err)
	require.Positive(t, ttl)
	n, err := c.holdCount.HoldCount(fairlock.ContextWithOwner(ctx, "someone"))
	require.NoError(t, err)
	require.Zero(t, n)
	require.NoError(t, holder.Unlock(held))
	freed()
}

// The same while the server is stopped (SIGSTOP): every call ends at its
// deadline, and once the server runs again the same Clients lock.
func TestFirstCallsHonourTheirDeadlineWhileRedisIsStopped(t *testing.T) {
	t.Parallel()
	e := newPrivateEnv(t)
	ctx := context.Background()
	holder := e.client().Mutex("hung")
	held, err := holder.Lock(ctx)
	require.NoError(t, err)
	c := newHungClients(e)
	calls := c.calls(held)
	unlock, freed := unlockOnHold(t, e)
	calls["Unlock"] = unlock

	resume := redistest.Pause(t, e.rdb.(*redis.Client))
	requireHung(t, e, nil)
	requireDeadlinesHonoured(t, calls)
	resume()
	freed()

	locked, err := c.isLocked.IsLocked(ctx)
	require.NoError(t, err)
	require.True(t, locked)
	_, err = c.try.TryLock(ctx)
	require.ErrorIs(t, err, fairlock.ErrLocked)
	require.NoError(t, holder.Unlock(held))
	for _, m := range []*fairlock.Mutex{c.lock, c.try, c.reenter} {
		lctx, err := m.Lock(ctx)
		require.NoError(t, err)
		require.NoError(t, m.Unlock(lctx))
	}
	removed, err := c.force.ForceUnlock(ctx)
	require.NoError(t, err)
	require.False(t, removed)
	e.requireClean("hung")
}

// TestEveryPrimitivesCallsHonourTheirDeadlineWhileRedisIsStopped is
// TestFirstCallsHonourTheirDeadlineWhileRedisIsStopped for the rest of
// the family: every call of a Semaphore, a RWMutex and a MultiLock, made
// through a Client of its own while the server is stopped, returns
// context.DeadlineExceeded within deadlineBound; the releases made then
// free their locks once the server runs again.
func TestEveryPrimitivesCallsHonourTheirDeadlineWhileRedisIsStopped(t *testing.T) {
	t.Parallel()
	e := newPrivateEnv(t)
	ctx := context.Background()
	fresh := func() *fairlock.Client { return e.client() }

	semHeld, err := fresh().Semaphore("sem", 1).Acquire(ctx, 1)
	require.NoError(t, err)
	released := fresh().Semaphore("sem-released", 1)
	toRelease, err := released.Acquire(ctx, 1)
	require.NoError(t, err)
	rwHeld, err := fresh().RWMutex("rw").Lock(ctx)
	require.NoError(t, err)
	runlocked := fresh().RWMutex("rw-read")
	toRUnlock, err := runlocked.RLock(ctx)
	require.NoError(t, err)
	_, err = fresh().Mutex("multi-1").Lock(ctx)
	require.NoError(t, err)
	unlocked := fresh().MultiLock([]string{"multi-unlocked-1", "multi-unlocked-2"})
	toUnlock, err := unlocked.Lock(ctx)
	require.NoError(t, err)

	sem, try, resized, semOther := fresh().Semaphore("sem", 1), fresh().Semaphore("sem", 1), fresh().Semaphore("sem", 1), fresh().Semaphore("sem", 1)
	rlock, wlock, tryR, rwOther := fresh().RWMutex("rw"), fresh().RWMutex("rw"), fresh().RWMutex("rw"), fresh().RWMutex("rw")
	multi, tryMulti := fresh().MultiLock([]string{"multi-1", "multi-2"}), fresh().MultiLock([]string{"multi-1", "multi-2"})
	calls := map[string]func(ctx context.Context) error{
		"Semaphore.Acquire":    func(ctx context.Context) error { _, err := sem.Acquire(ctx, 1); return err },
		"Semaphore.TryAcquire": func(ctx context.Context) error { _, err := try.TryAcquire(ctx, 1); return err },
		"Semaphore.SetPermits": func(ctx context.Context) error { return resized.SetPermits(ctx, 2) },
		"Semaphore.Token of another Client's hold": func(ctx context.Context) error {
			_, err := semOther.Token(withValuesOf(ctx, semHeld))
			return err
		},
		"Semaphore.Release": func(ctx context.Context) error { return released.Release(withValuesOf(ctx, toRelease)) },
		"RWMutex.RLock":     func(ctx context.Context) error { _, err := rlock.RLock(ctx); return err },
		"RWMutex.Lock":      func(ctx context.Context) error { _, err := wlock.Lock(ctx); return err },
		"RWMutex.TryRLock":  func(ctx context.Context) error { _, err := tryR.TryRLock(ctx); return err },
		"RWMutex.Lock re-entering another Client's hold": func(ctx context.Context) error {
			_, err := rwOther.Lock(withValuesOf(ctx, rwHeld))
			return err
		},
		"RWMutex.RUnlock":   func(ctx context.Context) error { return runlocked.RUnlock(withValuesOf(ctx, toRUnlock)) },
		"MultiLock.Lock":    func(ctx context.Context) error { _, err := multi.Lock(ctx); return err },
		"MultiLock.TryLock": func(ctx context.Context) error { _, err := tryMulti.TryLock(ctx); return err },
		"MultiLock.Unlock":  func(ctx context.Context) error { return unlocked.Unlock(withValuesOf(ctx, toUnlock)) },
	}

	resume := redistest.Pause(t, e.rdb.(*redis.Client))
	requireHung(t, e, nil)
	requireDeadlinesHonoured(t, calls)
	resume()

	requireDone(t, toRelease, deadlineBound)
	requireDone(t, toRUnlock, deadlineBound)
	requireDone(t, toUnlock, deadlineBound)
	e.requireWeightedGone("sem-released", queue.KindSemaphore)
	e.requireWeightedGone("rw-read", queue.KindRWMutex)
	require.Eventually(t, func() bool {
		return e.rdb.Exists(ctx, e.keys("multi-unlocked-1").Lock, e.keys("multi-unlocked-2").Lock).Val() == 0
	}, 10*time.Second, 10*time.Millisecond, "the MultiLock's releases free its names once the server answers")
}
