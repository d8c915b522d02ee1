package fairlock_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/internal/redistest"
)

// loadingServer is a redis-server on an append-only file that takes
// seconds to load it after a restart: its base holds filler keys, each
// loaded after a delay. While it loads, Redis answers LOADING to every
// command that touches data.
type loadingServer struct {
	srv   *redistest.Server
	admin *redis.Client
}

// loadingFiller and loadingDelay make a load last about 2-4 s: the base
// file's keys, and the delay before each is loaded, in µs.
const (
	loadingFiller = 20000
	loadingDelay  = 60
)

func newLoadingServer(t *testing.T) *loadingServer {
	t.Helper()
	srv, err := redistest.Start("--appendonly", "yes", "--appendfsync", "always",
		"--key-load-delay", strconv.Itoa(loadingDelay), "--enable-debug-command", "local",
		// Answer while loading every 1 KB of the file, not every 2 MB.
		"--loading-process-events-interval-bytes", "1024")
	require.NoError(t, err)
	t.Cleanup(srv.Stop)
	s := &loadingServer{srv: srv, admin: srv.Client(t)}
	ctx := context.Background()
	require.NoError(t, s.admin.Do(ctx, "DEBUG", "POPULATE", loadingFiller, "filler").Err())
	// The rewrite makes the filler the file's base, an RDB image, whose
	// keys are loaded with the delay.
	require.NoError(t, s.admin.BgRewriteAOF(ctx).Err())
	require.Eventually(t, func() bool {
		info, err := s.admin.Info(ctx, "persistence").Result()
		return err == nil && redistest.InfoField(info, "aof_rewrite_in_progress") == "0" &&
			redistest.InfoField(info, "aof_rewrite_scheduled") == "0"
	}, 20*time.Second, 10*time.Millisecond, "the append-only file was not rewritten")
	return s
}

// restart kills the server and starts it again on its file; it returns
// while the server loads it.
func (s *loadingServer) restart(t *testing.T) {
	t.Helper()
	require.NoError(t, s.srv.RestartLoading())
	require.True(t, s.loading(), "the server finished loading before the test could use it")
}

// loading reports whether the server is loading its data set.
func (s *loadingServer) loading() bool {
	info, err := s.admin.Info(context.Background(), "persistence").Result()
	return err == nil && redistest.InfoField(info, "loading") == "1"
}

// loadingReplies returns how many LOADING replies the server gave since it
// started.
func (s *loadingServer) loadingReplies(t *testing.T) int {
	t.Helper()
	info, err := s.admin.Info(context.Background(), "errorstats").Result()
	require.NoError(t, err)
	v := redistest.InfoField(info, "errorstat_LOADING")
	if v == "" {
		return 0
	}
	n, err := strconv.Atoi(v[len("count="):])
	require.NoError(t, err, v)
	return n
}

// taken is a step that takes a lock with lock and gives it back with
// unlock, on ctx.
func taken(ctx context.Context, lock func(context.Context) (context.Context, error), unlock func(context.Context) error) func() error {
	return func() error {
		h, err := lock(ctx)
		if err != nil {
			return err
		}
		return unlock(h)
	}
}

// atOnce runs every step at once, and meanwhile (if not nil) on the
// test's goroutine, and fails t for each step that fails.
func atOnce(t *testing.T, steps map[string]func() error, meanwhile func()) {
	t.Helper()
	errs := make(map[string]error, len(steps))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for name, step := range steps {
		wg.Go(func() {
			err := step()
			mu.Lock()
			errs[name] = err
			mu.Unlock()
		})
	}
	if meanwhile != nil {
		meanwhile()
	}
	wg.Wait()
	for name := range steps {
		assert.NoError(t, errs[name], name)
	}
}

// Every call of every primitive rides out a server that is loading its
// data set after a restart: it waits, within its context, until the
// server answers, and succeeds as it would have before the restart. Nothing
// was lost (the file is synced at every write), so nothing may fail.
func TestCallsRideOutAServerLoadingItsData(t *testing.T) {
	redistest.Slow(t)
	t.Parallel()
	s := newLoadingServer(t)
	prefix := redistest.Prefix(t)
	c, err := fairlock.New(s.srv.Client(t), fairlock.WithPrefix(prefix))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	other, err := fairlock.New(s.srv.Client(t), fairlock.WithPrefix(prefix))
	require.NoError(t, err)
	t.Cleanup(func() { _ = other.Close() })
	bg := context.Background()

	// Holds taken before the restart, for the calls that end them.
	m, sem, rw := c.Mutex("m"), c.Semaphore("sem", 3), c.RWMutex("rw")
	rr := c.RWMutex("rr")
	ml := c.MultiLock([]string{"ml-1", "ml-2"})
	forced := other.Mutex("forced")
	mctx, err := m.Lock(bg)
	require.NoError(t, err)
	sctx, err := sem.Acquire(bg, 2)
	require.NoError(t, err)
	wctx, err := rw.Lock(bg)
	require.NoError(t, err)
	rctx, err := rr.RLock(bg)
	require.NoError(t, err)
	mlctx, err := ml.Lock(bg)
	require.NoError(t, err)
	_, err = forced.Lock(bg)
	require.NoError(t, err)
	tok, err := m.Token(mctx)
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(bg, 30*time.Second)
	defer cancel()
	fm, fs, frw, fml := c.Mutex("fresh"), c.Semaphore("fresh-sem", 2), c.RWMutex("fresh-rw"), c.MultiLock([]string{"fresh-1", "fresh-2"})
	tm, ts, trw, tml := c.Mutex("try"), c.Semaphore("try-sem", 2), c.RWMutex("try-rw"), c.MultiLock([]string{"try-1", "try-2"})
	rs := c.RWMutex("fresh-rs")
	trs := c.RWMutex("try-rs")
	resized := c.Semaphore("resized", 2)
	steps := map[string]func() error{
		"Mutex.Unlock":         func() error { return m.Unlock(mctx) },
		"Semaphore.Release":    func() error { return sem.Release(sctx) },
		"RWMutex.Unlock":       func() error { return rw.Unlock(wctx) },
		"RWMutex.RUnlock":      func() error { return rr.RUnlock(rctx) },
		"MultiLock.Unlock":     func() error { return ml.Unlock(mlctx) },
		"Mutex.Lock":           taken(ctx, fm.Lock, fm.Unlock),
		"Mutex.TryLock":        taken(ctx, tm.TryLock, tm.Unlock),
		"Semaphore.Acquire":    taken(ctx, func(ctx context.Context) (context.Context, error) { return fs.Acquire(ctx, 2) }, fs.Release),
		"Semaphore.TryAcquire": taken(ctx, func(ctx context.Context) (context.Context, error) { return ts.TryAcquire(ctx, 1) }, ts.Release),
		"Semaphore.SetPermits": func() error { return resized.SetPermits(ctx, 5) },
		"RWMutex.Lock":         taken(ctx, frw.Lock, frw.Unlock),
		"RWMutex.RLock":        taken(ctx, rs.RLock, rs.RUnlock),
		"RWMutex.TryLock":      taken(ctx, trw.TryLock, trw.Unlock),
		"RWMutex.TryRLock":     taken(ctx, trs.TryRLock, trs.RUnlock),
		"MultiLock.Lock":       taken(ctx, fml.Lock, fml.Unlock),
		"MultiLock.TryLock":    taken(ctx, tml.TryLock, tml.Unlock),
		"Mutex.IsLocked":       func() error { _, err := other.Mutex("forced").IsLocked(ctx); return err },
		"Mutex.HoldCount":      func() error { _, err := other.Mutex("forced").HoldCount(ctx); return err },
		"Mutex.TTL":            func() error { _, err := other.Mutex("forced").TTL(ctx); return err },
		"Mutex.ForceUnlock":    func() error { _, err := c.Mutex("forced").ForceUnlock(ctx); return err },
		"Client.Inspect":       func() error { _, err := c.Inspect(ctx, "m"); return err },
		"Client.List":          func() error { _, err := c.List(ctx, "*"); return err },
	}

	s.restart(t)
	// Token must be read before Unlock ends the hold: it goes first, alone.
	got, err := m.Token(mctx)
	require.NoError(t, err, "Token")
	require.Equal(t, tok, got, "Token after the restart")
	require.True(t, s.loading(), "the server finished loading before the calls were sent")
	for _, h := range []context.Context{mctx, sctx, wctx, rctx, mlctx} {
		require.NoError(t, h.Err(), "a hold ended while the server loaded: %v", context.Cause(h))
	}
	atOnce(t, steps, nil)
	assert.GreaterOrEqual(t, s.loadingReplies(t), len(steps), "the calls met a loading server")

	// The ended holds are gone from Redis, and nothing is left held.
	for _, h := range []context.Context{mctx, sctx, wctx, rctx, mlctx} {
		requireDone(t, h, time.Second)
	}
	for _, name := range []string{"m", "ml-1", "ml-2", "forced", "fresh", "try", "fresh-1", "fresh-2", "try-1", "try-2"} {
		locked, err := c.Mutex(name).IsLocked(bg)
		require.NoError(t, err)
		assert.False(t, locked, name)
	}
	for _, name := range []string{"rw", "rr", "fresh-rw", "fresh-rs", "try-rw", "try-rs"} {
		wctx, err := c.RWMutex(name).TryLock(bg)
		require.NoError(t, err, name)
		require.NoError(t, c.RWMutex(name).Unlock(wctx))
	}
	for _, s := range []*fairlock.Semaphore{sem, fs, ts} {
		sctx, err := s.TryAcquire(bg, s.Permits())
		require.NoError(t, err, s.Name())
		require.NoError(t, s.Release(sctx))
	}
	_, err = resized.TryAcquire(bg, 5)
	require.NoError(t, err, "SetPermits took effect")
}

// A quorum's calls ride out masters that are loading their data sets: with
// every master loading, none can answer before its load ends, and each
// call waits for a majority instead of failing.
func TestQuorumCallsRideOutMastersLoadingTheirData(t *testing.T) {
	redistest.Slow(t)
	t.Parallel()
	servers := make([]*loadingServer, 3)
	addrs := make([]string, len(servers))
	for i := range servers {
		servers[i] = newLoadingServer(t)
		addrs[i] = servers[i].srv.Addr
	}
	c := quorumVia(t, addrs)
	other := quorumVia(t, addrs)
	bg := context.Background()
	m := c.Mutex("m")
	mctx, err := m.Lock(bg)
	require.NoError(t, err)
	tok, err := m.Token(mctx)
	require.NoError(t, err)
	_, err = other.Mutex("forced").Lock(bg)
	require.NoError(t, err)

	var wg sync.WaitGroup
	for _, s := range servers {
		wg.Go(func() { s.restart(t) })
	}
	wg.Wait()
	ctx, cancel := context.WithTimeout(bg, 30*time.Second)
	defer cancel()
	got, err := m.Token(mctx)
	require.NoError(t, err, "Token")
	require.Equal(t, tok, got)
	for _, s := range servers {
		require.True(t, s.loading(), "a master finished loading before the calls were sent")
	}
	fresh, try := c.Mutex("fresh"), c.Mutex("try")
	steps := map[string]func() error{
		"Unlock":      func() error { return m.Unlock(mctx) },
		"Lock":        taken(ctx, fresh.Lock, fresh.Unlock),
		"TryLock":     taken(ctx, try.TryLock, try.Unlock),
		"IsLocked":    func() error { _, err := c.Mutex("forced").IsLocked(ctx); return err },
		"HoldCount":   func() error { _, err := c.Mutex("forced").HoldCount(ctx); return err },
		"TTL":         func() error { _, err := c.Mutex("forced").TTL(ctx); return err },
		"ForceUnlock": func() error { _, err := c.Mutex("forced").ForceUnlock(ctx); return err },
	}
	atOnce(t, steps, nil)
	for _, s := range servers {
		assert.Positive(t, s.loadingReplies(t), "the calls met a loading master")
	}
	requireDone(t, mctx, time.Second)
	for _, name := range []string{"m", "forced", "fresh", "try"} {
		locked, err := c.Mutex(name).IsLocked(bg)
		require.NoError(t, err)
		assert.False(t, locked, name)
	}
}

// Calls that find the server down ride out its restart on an append-only
// file within the call timeout: Unlock (inner and outer levels), TryLock
// and a re-entry, of every primitive, return what the restarted server
// answers, not the network error, and count once.
func TestCallsRideOutARestartOnTheAppendOnlyFile(t *testing.T) {
	redistest.Slow(t)
	t.Parallel()
	srv, err := redistest.Start("--appendonly", "yes", "--appendfsync", "always")
	require.NoError(t, err)
	t.Cleanup(srv.Stop)
	c, err := fairlock.New(srv.Client(t), fairlock.WithPrefix(redistest.Prefix(t)))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	bg := context.Background()

	m, sem, rw := c.Mutex("m"), c.Semaphore("sem", 3), c.RWMutex("rw")
	ml := c.MultiLock([]string{"ml-1", "ml-2"})
	mctx, err := m.Lock(bg)
	require.NoError(t, err)
	inner, err := m.Lock(mctx)
	require.NoError(t, err)
	sctx, err := sem.Acquire(bg, 2)
	require.NoError(t, err)
	wctx, err := rw.Lock(bg)
	require.NoError(t, err)
	mlctx, err := ml.Lock(bg)
	require.NoError(t, err)
	reenter := c.Mutex("reenter")
	rctx, err := reenter.Lock(bg)
	require.NoError(t, err)
	try, trySem := c.Mutex("try"), c.Semaphore("try-sem", 2)

	srv.Kill()
	steps := map[string]func() error{
		"Mutex.Unlock of both levels": func() error {
			if err := m.Unlock(inner); err != nil {
				return err
			}
			return m.Unlock(mctx)
		},
		"Semaphore.Release": func() error { return sem.Release(sctx) },
		"RWMutex.Unlock":    func() error { return rw.Unlock(wctx) },
		"MultiLock.Unlock":  func() error { return ml.Unlock(mlctx) },
		"Mutex.TryLock":     taken(bg, try.TryLock, try.Unlock),
		"Semaphore.TryAcquire": taken(bg, func(ctx context.Context) (context.Context, error) { return trySem.TryAcquire(ctx, 2) },
			trySem.Release),
		"re-entry": func() error {
			h, err := reenter.Lock(rctx)
			if err != nil {
				return err
			}
			if n, err := reenter.HoldCount(h); err != nil || n != 2 {
				return fmt.Errorf("levels after the re-entry: %d, %v; want 2", n, err)
			}
			return reenter.Unlock(h)
		},
	}
	// The calls find the server down and keep trying; it comes back on
	// its file a while later.
	atOnce(t, steps, func() {
		time.Sleep(2 * time.Second) // the outage, longer than the redis client's own retries
		require.NoError(t, srv.Restart())
	})
	require.NoError(t, reenter.Unlock(rctx))
	for _, name := range []string{"m", "ml-1", "ml-2", "try", "reenter"} {
		locked, err := c.Mutex(name).IsLocked(bg)
		require.NoError(t, err)
		assert.False(t, locked, name)
	}
	for _, s := range []*fairlock.Semaphore{sem, trySem} {
		h, err := s.TryAcquire(bg, s.Permits())
		require.NoError(t, err, s.Name())
		require.NoError(t, s.Release(h))
	}
	h, err := rw.TryLock(bg)
	require.NoError(t, err)
	require.NoError(t, rw.Unlock(h))
}
