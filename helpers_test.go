package fairlock_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/fairlock/fairlock/queue"
)

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		os.Exit(helperMain())
	}
	goleak.VerifyTestMain(redistest.Runner(m))
}

// env is one test's world: a redis-server shared by the package, a unique
// key prefix, and Clients that are closed when the test ends.
type env struct {
	t      testing.TB
	srv    *redistest.Server // nil on a topology
	rdb    redis.UniversalClient
	prefix string
	// dial returns a new redis client of the deployment, closed when t
	// ends.
	dial func(t testing.TB) redis.UniversalClient
}

func newEnv(t testing.TB) *env {
	return serverEnv(t, redistest.Shared(t))
}

func serverEnv(t testing.TB, srv *redistest.Server) *env {
	dial := func(t testing.TB) redis.UniversalClient { return srv.Client(t) }
	return &env{t: t, srv: srv, rdb: srv.Client(t), prefix: redistest.Prefix(t), dial: dial}
}

// newPrivateEnv is newEnv on a redis-server of the test's own, for tests
// that pause, restart or cut off the server.
func newPrivateEnv(t testing.TB) *env {
	srv, err := redistest.Start()
	require.NoError(t, err)
	t.Cleanup(srv.Stop)
	return serverEnv(t, srv)
}

// client returns a new Client with its own redis connections, as a
// separate process would have.
func (e *env) client(opts ...fairlock.Option) *fairlock.Client {
	e.t.Helper()
	c, err := fairlock.New(e.dial(e.t), append([]fairlock.Option{fairlock.WithPrefix(e.prefix)}, opts...)...)
	require.NoError(e.t, err)
	e.t.Cleanup(func() { _ = c.Close() })
	return c
}

func (e *env) keys(name string) queue.Keys {
	k, err := queue.For(e.prefix, name)
	require.NoError(e.t, err)
	return k
}

// queued returns the waiter entries of a lock, oldest first.
func (e *env) queued(name string) []string {
	q, err := e.rdb.LRange(context.Background(), e.keys(name).Queue, 0, -1).Result()
	require.NoError(e.t, err)
	return q
}

// waitQueued waits until the lock has n waiters in line.
func (e *env) waitQueued(name string, n int) {
	e.t.Helper()
	require.Eventually(e.t, func() bool { return len(e.queued(name)) == n },
		10*time.Second, 2*time.Millisecond, "waiting for %d queued waiters of %s", n, name)
}

// wakeSubscriptions returns the number of subscriptions of each wake
// channel of the lock name that has any: the shared one and each waiting
// Client's.
func (e *env) wakeSubscriptions(name string) (map[string]int64, error) {
	ctx := context.Background()
	channels, err := e.rdb.PubSubChannels(ctx, e.keys(name).Wake+"*").Result()
	if err != nil || len(channels) == 0 {
		return map[string]int64{}, err
	}
	return e.rdb.PubSubNumSub(ctx, channels...).Result()
}

// requireClean asserts that no waiter of the lock is left in Redis.
func (e *env) requireClean(name string) {
	e.t.Helper()
	k := e.keys(name)
	ctx := context.Background()
	require.Zero(e.t, e.rdb.LLen(ctx, k.Queue).Val(), "queue of %s", name)
	require.Zero(e.t, e.rdb.ZCard(ctx, k.Deadline).Val(), "deadlines of %s", name)
}

// result is what a background Lock call ended with.
type result struct {
	ctx context.Context
	err error
}

// locker is what lockAsync calls: a Mutex or a MultiLock.
type locker interface {
	Lock(ctx context.Context) (context.Context, error)
}

// lockAsync calls m.Lock(ctx) in a goroutine.
func lockAsync(ctx context.Context, m locker) <-chan result {
	ch := make(chan result, 1)
	go func() {
		lctx, err := m.Lock(ctx)
		ch <- result{lctx, err}
	}()
	return ch
}

func await(t testing.TB, ch <-chan result, within time.Duration) result {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(within):
		t.Fatalf("no result within %v", within)
		return result{}
	}
}

func requireDone(t testing.TB, ctx context.Context, within time.Duration) {
	t.Helper()
	select {
	case <-ctx.Done():
	case <-time.After(within):
		t.Fatalf("context not cancelled within %v", within)
	}
}

// The helper process: the test binary re-executed to play a separate
// process that can be killed.
const helperEnv = "FAIRLOCK_TEST_HELPER"

// startHelper starts a process that takes the lock name with the given
// role ("wait": Lock and hold forever). It returns the process.
func (e *env) startHelper(role, name string, opts ...string) *exec.Cmd {
	e.t.Helper()
	return e.spawnHelper(role, name, opts...).Cmd
}

// helperProc is a helper process and what it has reported.
type helperProc struct {
	*exec.Cmd
	granted chan struct{} // closed when the helper reports that Lock returned
}

// spawnHelper starts a helper process as startHelper does, and watches its
// output for the grant. Options are "lease=<duration>" and
// "waiterTTL=<duration>", and for the role "acquire" (a Semaphore's
// Acquire) "permits=<n>" and "weight=<n>"; the roles "rlock" and "wlock"
// take a RWMutex's read and write lock.
func (e *env) spawnHelper(role, name string, opts ...string) *helperProc {
	e.t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(),
		helperEnv+"="+role,
		"FAIRLOCK_ADDR="+e.srv.Addr,
		"FAIRLOCK_PREFIX="+e.prefix,
		"FAIRLOCK_NAME="+name,
		"FAIRLOCK_OPTS="+strings.Join(opts, ","),
	)
	h := &helperProc{Cmd: cmd, granted: make(chan struct{})}
	cmd.Stdout = &grantWatcher{granted: h.granted}
	cmd.Stderr = os.Stderr
	require.NoError(e.t, cmd.Start())
	e.t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return h
}

// awaitGrant waits until the helper reports its grant, and returns when
// the report arrived.
func (h *helperProc) awaitGrant(t testing.TB, within time.Duration) time.Time {
	t.Helper()
	select {
	case <-h.granted:
		return time.Now()
	case <-time.After(within):
		t.Fatalf("helper process %d reported no grant within %v", h.Process.Pid, within)
		return time.Time{}
	}
}

// kill ends the helper with SIGKILL, as a crash would, and reaps it.
func (h *helperProc) kill(t testing.TB) {
	t.Helper()
	require.NoError(t, h.Process.Signal(syscall.SIGKILL))
	_ = h.Wait() // a killed process exits with an error
}

// grantWatcher is a helper's standard output: it closes granted at the
// helper's "granted" line. Only exec's copying goroutine writes to it.
type grantWatcher struct {
	granted chan struct{}
	line    []byte
	seen    bool
}

func (w *grantWatcher) Write(p []byte) (int, error) {
	for _, b := range p {
		if b != '\n' {
			w.line = append(w.line, b)
			continue
		}
		if string(w.line) == "granted" && !w.seen {
			w.seen = true
			close(w.granted)
		}
		w.line = w.line[:0]
	}
	return len(p), nil
}

func helperMain() int {
	if os.Getenv(helperEnv) == quorumHolderRole {
		return quorumHolderMain()
	}
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("FAIRLOCK_ADDR")})
	opts := []fairlock.Option{fairlock.WithPrefix(os.Getenv("FAIRLOCK_PREFIX"))}
	permits, weight := int64(1), int64(1)
	for _, o := range strings.Split(os.Getenv("FAIRLOCK_OPTS"), ",") {
		if n, ok := strings.CutPrefix(o, "permits="); ok {
			permits, _ = strconv.ParseInt(n, 10, 64)
		}
		if n, ok := strings.CutPrefix(o, "weight="); ok {
			weight, _ = strconv.ParseInt(n, 10, 64)
		}
		if d, ok := strings.CutPrefix(o, "waiterTTL="); ok {
			v, _ := time.ParseDuration(d)
			opts = append(opts, fairlock.WithWaiterTTL(v))
		}
		if d, ok := strings.CutPrefix(o, "lease="); ok {
			v, _ := time.ParseDuration(d)
			opts = append(opts, fairlock.WithLease(v))
		}
	}
	c, err := fairlock.New(rdb, opts...)
	if err != nil {
		return 2
	}
	name := os.Getenv("FAIRLOCK_NAME")
	var lock func(context.Context) (context.Context, error)
	switch os.Getenv(helperEnv) {
	case "wait", "hold":
		lock = c.Mutex(name).Lock
	case "acquire":
		lock = permitsOf{c.Semaphore(name, permits), weight}.Lock
	case "rlock":
		lock = c.RWMutex(name).RLock
	case "wlock":
		lock = c.RWMutex(name).Lock
	default:
		return 4
	}
	if _, err := lock(context.Background()); err != nil {
		return 3
	}
	os.Stdout.WriteString("granted\n")
	select {} // hold until killed
}

func redisZ(member string, at time.Time) redis.Z {
	return redis.Z{Member: member, Score: float64(at.UnixMilli())}
}

// replicated waits until a replica has every write its primary took
// (WAIT), so that a kill after it loses none.
func replicated(t *testing.T, primary redis.UniversalClient) {
	t.Helper()
	n, err := primary.Do(context.Background(), "WAIT", 1, 5000).Int()
	require.NoError(t, err)
	require.Equal(t, 1, n, "a replica acknowledged every write")
}

// sentinelEnv is an env on a Sentinel set, through failover clients.
func sentinelEnv(t *testing.T, set *redistest.SentinelSet) *env {
	return &env{t: t, rdb: set.Client(t), prefix: redistest.Prefix(t),
		dial: func(t testing.TB) redis.UniversalClient { return set.Client(t) }}
}

// clusterEnv is an env on a Redis Cluster, through cluster clients.
func clusterEnv(t *testing.T, cluster *redistest.Cluster) *env {
	return &env{t: t, rdb: cluster.Client(t), prefix: redistest.Prefix(t),
		dial: func(t testing.TB) redis.UniversalClient { return cluster.Client(t) }}
}

// clusterNames returns one lock name per master of the cluster, made
// from base, and the master of each.
func clusterNames(t *testing.T, cluster *redistest.Cluster, base string) ([]string, map[string]string) {
	t.Helper()
	ctx := context.Background()
	masters, err := cluster.Masters(ctx)
	require.NoError(t, err)
	masterOf := map[string]string{}
	taken := map[string]bool{}
	var names []string
	for i := 0; len(names) < len(masters); i++ {
		require.Less(t, i, 1000, "no names on every master")
		name := fmt.Sprintf("%s-%d", base, i)
		m, err := cluster.MasterOf(ctx, "{"+name+"}")
		require.NoError(t, err)
		if !taken[m] {
			taken[m] = true
			masterOf[name] = m
			names = append(names, name)
		}
	}
	return names, masterOf
}
