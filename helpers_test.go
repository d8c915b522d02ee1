package fairlock_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/internal/faultproxy"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/fairlock/fairlock/queue"
)

// Every test: TestMain, the env (a redis-server, a key prefix, Clients),
// Lock calls in the background, and the helper process, the test binary
// re-executed to hold or wait as a process that can be killed.

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		os.Exit(helperMain())
	}
	redistest.QuickLoop(10)
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
	// nodes are the addresses of every server of the deployment, and
	// dialAs returns a new redis client of it that logs in as user.
	nodes  []string
	dialAs func(t testing.TB, user, password string) redis.UniversalClient
}

func newEnv(t testing.TB) *env {
	return serverEnv(t, redistest.Shared(t))
}

func serverEnv(t testing.TB, srv *redistest.Server) *env {
	dial := func(t testing.TB) redis.UniversalClient { return srv.Client(t) }
	dialAs := func(t testing.TB, user, password string) redis.UniversalClient {
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: user, Password: password})
		t.Cleanup(func() { _ = rdb.Close() })
		return rdb
	}
	return &env{t: t, srv: srv, rdb: srv.Client(t), prefix: redistest.Prefix(t), dial: dial, nodes: []string{srv.Addr}, dialAs: dialAs}
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
// take a RWMutex's read and write lock, and "campaign" leads an Election
// with the value "helper".
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
	case "campaign":
		lock = func(ctx context.Context) (context.Context, error) { return c.Election(name).Campaign(ctx, "helper") }
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

// Deployments: a replica in sync, and envs and lock names on Sentinel
// and on a Redis Cluster.

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

// Faults of one server: a Client behind a fault proxy, what Redis keeps
// of an owner in a lock, and the script calls a server ran (MONITOR).

// proxied returns a Client whose redis traffic goes through a fault proxy
// to the env's server, the proxy, and the redis client under the Client.
// They are closed when the test ends, the Client first.
func (e *env) proxied(ropts *redis.Options, opts ...fairlock.Option) (*fairlock.Client, *faultproxy.Proxy) {
	e.t.Helper()
	p := faultproxy.New(e.t, e.srv.Addr)
	o := *ropts
	o.Addr = p.Addr()
	rdb := redis.NewClient(&o)
	e.t.Cleanup(func() { _ = rdb.Close() })
	c, err := fairlock.New(rdb, append([]fairlock.Option{fairlock.WithPrefix(e.prefix)}, opts...)...)
	require.NoError(e.t, err)
	e.t.Cleanup(func() { _ = c.Close() })
	return c, p
}

// traceOf describes what Redis keeps of owner in the lock's keys: a queue
// entry, a waiter deadline, or the hold; empty when nothing. It reports a
// failed read as a trace rather than failing the test, so that it can run
// inside require.Eventually.
func (e *env) traceOf(name, owner string) string {
	ctx := context.Background()
	k := e.keys(name)
	var trace []string
	queued, err := e.rdb.LRange(ctx, k.Queue, 0, -1).Result()
	if err != nil {
		return "queue unread: " + err.Error()
	}
	deadlines, err := e.rdb.ZRange(ctx, k.Deadline, 0, -1).Result()
	if err != nil {
		return "deadlines unread: " + err.Error()
	}
	for _, q := range queued {
		if strings.HasSuffix(q, ":"+owner) {
			trace = append(trace, "queued "+q)
		}
	}
	for _, d := range deadlines {
		if strings.HasSuffix(d, ":"+owner) {
			trace = append(trace, "deadline of "+d)
		}
	}
	holder, err := e.rdb.HGet(ctx, k.Lock, "owner").Result()
	switch {
	case errors.Is(err, redis.Nil):
	case err != nil:
		return "hold unread: " + err.Error()
	case holder == owner:
		trace = append(trace, "holds the lock")
	}
	return strings.Join(trace, ", ")
}

// callMonitor watches every command the server runs (MONITOR) and counts
// how many times each call id of the lock's scripts was sent.
type callMonitor struct {
	mu    sync.Mutex
	calls map[string]int // guarded by mu; call id -> times sent
}

// monitorCalls starts a MONITOR connection to the env's server that counts
// the call ids of the lock name; it is closed when the test ends.
func (e *env) monitorCalls(name string) *callMonitor {
	e.t.Helper()
	conn, err := net.Dial("tcp", e.srv.Addr)
	require.NoError(e.t, err)
	r := bufio.NewReader(conn)
	_, err = conn.Write([]byte("MONITOR\r\n"))
	require.NoError(e.t, err)
	ok, err := r.ReadString('\n')
	require.NoError(e.t, err)
	require.Equal(e.t, "+OK\r\n", ok)

	// Commands sent by clients, not those their scripts ran ("[0 lua]").
	call := regexp.MustCompile(`\[\d+ [\d.:]+\] "(?i:evalsha|eval|fcall)" .*:\{` +
		regexp.QuoteMeta(name) + `\}:call:([0-9a-f]{16})"`)
	m := &callMonitor{calls: make(map[string]int)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			if id := call.FindStringSubmatch(line); id != nil {
				m.mu.Lock()
				m.calls[id[1]]++
				m.mu.Unlock()
			}
		}
	}()
	e.t.Cleanup(func() {
		_ = conn.Close()
		<-done
	})
	return m
}

// resent returns the call ids sent more than once.
func (m *callMonitor) resent() map[string]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]int)
	for id, n := range m.calls {
		if n > 1 {
			out[id] = n
		}
	}
	return out
}

// MultiLock faults. A failover or a restart of Redis in the middle of a
// MultiLock's Lock, or while it holds, leaves no partial hold: the call
// is granted every name or holds none, what Redis keeps of a hold that
// ended expires within its lease and is never renewed again, and
// afterwards anyone can take every name. The helpers of this section
// check that; the tests are in multilock_failover_test.go (one server,
// and Sentinel) and multilock_cluster_fault_test.go.

const (
	// multiLease is the lease of the MultiLocks under test: shorter than
	// any failover, so a hold the watchdog cannot renew through one is
	// lost, and what Redis keeps of it expires before the failover ends.
	multiLease     = time.Second
	multiWaiterTTL = 3 * time.Second
	// multiBound bounds a Lock through a failover or a restart: it
	// catches a hang, not a slow call.
	multiBound = 45 * time.Second
	// settleBound bounds the reads of the locks' state after a failover
	// or a loss: they may fail until the Client has a fresh map of the
	// deployment.
	settleBound = 15 * time.Second
)

// multiFault is a MultiLock under test, on a Client of its own, and a
// Client that reads what Redis keeps of it.
type multiFault struct {
	t     *testing.T
	e     *env
	probe *fairlock.Client
	c     *fairlock.Client // the MultiLock's
	lease time.Duration    // of c's holds
	ml    *fairlock.MultiLock
	names []string // ml.Names(): the order Lock takes them in
}

func newMultiFault(t *testing.T, e *env, names []string, lease time.Duration) *multiFault {
	return newObservedMultiFault(t, e, names, lease, nil)
}

func newObservedMultiFault(t *testing.T, e *env, names []string, lease time.Duration, o fairlock.Observer) *multiFault {
	f := &multiFault{t: t, e: e, probe: e.client(), lease: lease}
	opts := []fairlock.Option{fairlock.WithLease(lease), fairlock.WithWaiterTTL(multiWaiterTTL)}
	if o != nil {
		opts = append(opts, fairlock.WithObserver(o))
	}
	f.c = e.client(opts...)
	f.ml = f.c.MultiLock(names)
	f.names = f.ml.Names()
	return f
}

// trace is what Redis keeps of the MultiLock's Client in one lock.
type trace struct {
	held    bool
	expires time.Time // of the hold, on the server's clock
	token   int64
	waits   bool // a live entry in line
}

func (tr trace) String() string {
	s := []string{}
	if tr.held {
		s = append(s, fmt.Sprintf("held under token %d until %v", tr.token, tr.expires.Format("15:04:05.000")))
	}
	if tr.waits {
		s = append(s, "in line")
	}
	return strings.Join(s, ", ")
}

// inspect reads the state of the lock name, again while reads fail (the
// probe's map of a Cluster may be stale after a failover), at most
// settleBound.
func (f *multiFault) inspect(name string) (fairlock.LockState, error) {
	deadline := time.Now().Add(settleBound)
	for {
		st, err := f.probe.Inspect(context.Background(), name)
		if err == nil || time.Now().After(deadline) {
			return st, err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// traceOf returns what Redis keeps of the MultiLock's Client in the lock
// name.
func (f *multiFault) traceOf(name string) (trace, error) {
	st, err := f.inspect(name)
	if err != nil {
		return trace{}, err
	}
	var tr trace
	if st.Held && st.Client == f.c.ID() {
		tr.held, tr.expires, tr.token = true, st.At.Add(st.LeaseLeft), st.Token
	}
	tr.waits = waitsIn(st, f.c.ID())
	return tr, nil
}

// traces returns what Redis keeps of the MultiLock's Client, per name
// that keeps anything.
func (f *multiFault) traces() (map[string]trace, error) {
	out := map[string]trace{}
	for _, name := range f.names {
		tr, err := f.traceOf(name)
		if err != nil {
			return nil, err
		}
		if tr.held || tr.waits {
			out[name] = tr
		}
	}
	return out, nil
}

// waitsIn reports whether a live entry of the Client id is in the line st
// shows.
func waitsIn(st fairlock.LockState, id string) bool {
	for _, w := range st.Waiters {
		if w.Client == id && w.TimeLeft > 0 {
			return true
		}
	}
	return false
}

// requireGone asserts that what Redis keeps of the MultiLock after its
// holds ended, its call failed or it let go at ended goes: no hold of it
// may last past ended plus its lease (it would have been renewed or taken
// after ended), and within bound none is left, nor any entry in line.
// requireNoneBut asserts that Redis keeps nothing of the MultiLock in any
// of its names but but (a name on a dead master, which cannot be read).
func (f *multiFault) requireNoneBut(but, what string) {
	f.t.Helper()
	for _, name := range f.names {
		if name != but {
			now, err := f.traceOf(name)
			require.NoError(f.t, err)
			require.Equal(f.t, trace{}, now, "%s %q", what, name)
		}
	}
}

func (f *multiFault) requireGone(ended time.Time, bound time.Duration) {
	f.t.Helper()
	limit := ended.Add(f.lease + 250*time.Millisecond) // the servers' and our clocks are one machine's
	deadline := time.Now().Add(bound)
	for {
		tr, err := f.traces()
		for name, one := range tr {
			require.False(f.t, one.held && one.expires.After(limit),
				"%q is held by the MultiLock past its lease from %v: %v", name, ended.Format("15:04:05.000"), one)
		}
		if err == nil && len(tr) == 0 {
			return
		}
		if time.Now().After(deadline) {
			require.NoError(f.t, err)
			require.Empty(f.t, tr, "what Redis keeps of the MultiLock %v after it ended", bound)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// requireWhole asserts that mctx carries a hold of every name, and that
// Redis agrees: each name held by the MultiLock's Client, once, under the
// token mctx carries, all for one owner. It returns the tokens.
func (f *multiFault) requireWhole(mctx context.Context) map[string]int64 {
	f.t.Helper()
	require.NoError(f.t, mctx.Err(), "the MultiLock's context is live")
	tokens := map[string]int64{}
	owner := ""
	for _, name := range f.names {
		tok, err := f.ml.Token(mctx, name)
		require.NoError(f.t, err, name)
		require.Positive(f.t, tok, name)
		st, err := f.inspect(name)
		require.NoError(f.t, err)
		require.True(f.t, st.Held, "%q is held", name)
		require.Equal(f.t, f.c.ID(), st.Client, "%q is held by the MultiLock's Client", name)
		require.Equal(f.t, 1, st.Count, "%q is held once", name)
		require.Equal(f.t, tok, st.Token, "%q is held under the token the context carries", name)
		if owner == "" {
			owner = st.Owner
		}
		require.Equal(f.t, owner, st.Owner, "every name is held by one owner")
		tokens[name] = tok
	}
	return tokens
}

// tokensIn returns the token of each name that mctx carries, without
// asking Redis.
func (f *multiFault) tokensIn(mctx context.Context) map[string]int64 {
	f.t.Helper()
	tokens := map[string]int64{}
	for _, name := range f.names {
		tok, err := f.ml.Token(mctx, name)
		require.NoError(f.t, err, name)
		tokens[name] = tok
	}
	return tokens
}

// unlockWhole releases a whole grant and returns when it let go.
func (f *multiFault) unlockWhole(mctx context.Context) time.Time {
	f.t.Helper()
	require.NoError(f.t, f.ml.Unlock(mctx))
	released := time.Now()
	requireDone(f.t, mctx, time.Second)
	return released
}

// requireLost asserts that the MultiLock's context ended because a lease
// was lost, and that Unlock says so. It returns when the context ended.
func (f *multiFault) requireLost(mctx context.Context, within time.Duration) time.Time {
	f.t.Helper()
	requireDone(f.t, mctx, within)
	ended := time.Now()
	require.ErrorIs(f.t, context.Cause(mctx), fairlock.ErrLeaseLost)
	err := f.ml.Unlock(mctx)
	require.ErrorIs(f.t, err, fairlock.ErrLeaseLost)
	f.t.Logf("context ended: %v; Unlock: %v", context.Cause(mctx), err)
	return ended
}

// requireFreeForOthers takes every name through a new Client, one Lock
// each, and gives it back: nothing is left that blocks them.
func (f *multiFault) requireFreeForOthers() {
	f.t.Helper()
	other := f.e.client(fairlock.WithWaiterTTL(multiWaiterTTL))
	for _, name := range f.names {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		m := other.Mutex(name)
		hctx, err := m.Lock(ctx)
		cancel()
		require.NoError(f.t, err, "another caller takes %q", name)
		require.NoError(f.t, m.Unlock(hctx))
	}
}

// Quorum faults: short leases, quorum Clients through fault proxies, a
// checker of mutual exclusion and token order, contention over quorum
// Mutexes, and grants in the background.

// The quorum fault tests use short leases, so that a hold on a master
// that went away runs out within seconds.
const (
	quorumFaultLease = 2 * time.Second
	quorumFaultTTL   = 2 * time.Second
)

// quorumFaultOpts are the options of every Client of the quorum fault tests.
func quorumFaultOpts(more ...fairlock.Option) []fairlock.Option {
	return append([]fairlock.Option{
		fairlock.WithLease(quorumFaultLease),
		fairlock.WithWaiterTTL(quorumFaultTTL),
		fairlock.WithCallTimeout(time.Second),
	}, more...)
}

// quorumVia is quorumOf over the masters at addrs: each a server's own
// address or that of a fault proxy in front of it. The Client and its
// redis clients are closed when t ends.
func quorumVia(t *testing.T, addrs []string, opts ...fairlock.Option) *fairlock.Client {
	t.Helper()
	masters := make([]redis.UniversalClient, len(addrs))
	for i, addr := range addrs {
		rdb := redis.NewClient(&redis.Options{Addr: addr})
		t.Cleanup(func() { _ = rdb.Close() })
		masters[i] = rdb
	}
	prefix, _ := quorumPrefixes.LoadOrStore(t.Name(), redistest.Prefix(t))
	c, err := fairlock.NewQuorum(context.Background(), masters, append([]fairlock.Option{fairlock.WithPrefix(prefix.(string))}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// quorumKeys returns the keys of the quorum lock name on each master, with
// the test's key prefix.
func quorumKeys(t *testing.T, name string) queue.Keys {
	t.Helper()
	prefix, _ := quorumPrefixes.LoadOrStore(t.Name(), redistest.Prefix(t))
	k, err := queue.Quorum(prefix.(string), name)
	require.NoError(t, err)
	return k
}

// qexclusion is what the holders of one lock see from inside their
// critical sections: two live holds inside at once (an overlap), and
// fencing tokens that do not increase from one grant to the next. A hold
// whose context has ended (its lease was lost) is no holder any more: it
// is neither in an overlap nor a token to order, as its owner must stop
// when its context ends.
type qexclusion struct {
	mu       sync.Mutex
	next     int                     // guarded by mu: the id of the next hold to enter
	inside   map[int]context.Context // guarded by mu: holds in their section
	grants   int                     // guarded by mu: sections entered by a live hold
	overlaps []string                // guarded by mu
	backward []string                // guarded by mu: tokens at or below the one before
	last     int64                   // guarded by mu: the last token seen
	lost     int                     // guarded by mu: holds that lost their lease inside
}

// enter records that held enters its section, and returns its id; ok is
// false when the hold had already ended, and does not enter.
func (x *qexclusion) enter(held context.Context) (id int, ok bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if held.Err() != nil {
		x.lost++
		return 0, false
	}
	for other, ctx := range x.inside {
		if ctx.Err() == nil {
			x.overlaps = append(x.overlaps, fmt.Sprintf("grant %d entered while grant %d still held", x.next, other))
		}
	}
	if x.inside == nil {
		x.inside = map[int]context.Context{}
	}
	id = x.next
	x.next++
	x.inside[id] = held
	x.grants++
	return id, true
}

// token records the token of a live hold.
func (x *qexclusion) token(held context.Context, tok int64) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if held.Err() != nil {
		return // lost since: a later holder may have recorded a larger token
	}
	if tok <= x.last {
		x.backward = append(x.backward, fmt.Sprintf("token %d after %d", tok, x.last))
	}
	x.last = tok
}

// leave records that the hold with id left its section; lost says it
// lost its lease inside.
func (x *qexclusion) leave(id int, lost bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	delete(x.inside, id)
	if lost {
		x.lost++
	}
}

// count returns how many sections live holds have entered.
func (x *qexclusion) count() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.grants
}

// check fails t on an overlap or a token out of order.
func (x *qexclusion) check(t *testing.T) {
	t.Helper()
	x.mu.Lock()
	defer x.mu.Unlock()
	require.Empty(t, x.overlaps, "two live holds at once")
	require.Empty(t, x.backward, "tokens out of grant order")
	t.Logf("%d grants, %d holds lost their lease", x.grants, x.lost)
}

// qcontention is goroutines that loop Lock, Token, a short critical
// section and Unlock on one lock, until halted.
type qcontention struct {
	x      qexclusion
	stop   atomic.Bool
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// qcontend starts perMutex goroutines on each of ms (handles of one lock
// on different Clients). They are halted when t ends, at the latest.
func qcontend(t *testing.T, ms []*fairlock.Mutex, perMutex int) *qcontention {
	ctx, cancel := context.WithCancel(context.Background())
	c := &qcontention{ctx: ctx, cancel: cancel}
	for _, m := range ms {
		for range perMutex {
			c.wg.Go(func() { c.loop(t, m) })
		}
	}
	t.Cleanup(func() { c.halt(t) })
	return c
}

// loop is one goroutine of the contention on m.
func (c *qcontention) loop(t *testing.T, m *fairlock.Mutex) {
	for !c.stop.Load() {
		held, err := m.Lock(c.ctx)
		if err != nil {
			if c.ctx.Err() == nil {
				t.Errorf("Lock: %v", err)
			}
			return
		}
		if id, ok := c.x.enter(held); ok {
			tok, err := m.Token(held)
			switch {
			case err == nil:
				c.x.token(held, tok)
			case errors.Is(err, fairlock.ErrLeaseLost):
			default:
				t.Errorf("Token: %v", err)
			}
			time.Sleep(time.Millisecond)
			c.x.leave(id, err != nil)
		}
		if err := m.Unlock(held); err != nil && !errors.Is(err, fairlock.ErrLeaseLost) {
			t.Errorf("Unlock: %v", err)
		}
	}
}

// await waits until live holds have entered n sections in all.
func (c *qcontention) await(t *testing.T, n int, when string) {
	t.Helper()
	require.Eventually(t, func() bool { return c.x.count() >= n }, 20*time.Second, 5*time.Millisecond,
		"%d grants %s", n, when)
}

// halt stops the goroutines after their current Lock call, and waits for
// them; a goroutine stuck in Lock past a generous bound is cancelled and
// fails t. It is idempotent.
func (c *qcontention) halt(t *testing.T) {
	c.stop.Store(true)
	done := make(chan struct{})
	go func() {
		c.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		c.cancel()
		<-done
		t.Error("a Lock call did not return within 20s of the halt")
	}
	c.cancel()
}

// qgrant is what a Lock call in the background ended with: its hold, when
// it returned, and whether the hold it had to wait for had ended by then.
type qgrant struct {
	held       context.Context
	err        error
	at         time.Time
	firstEnded bool
}

// lockAfter calls m.Lock in the background; first is the hold it waits
// for.
func lockAfter(ctx context.Context, m *fairlock.Mutex, first context.Context) <-chan qgrant {
	ch := make(chan qgrant, 1)
	go func() {
		held, err := m.Lock(ctx)
		ch <- qgrant{held: held, err: err, at: time.Now(), firstEnded: first.Err() != nil}
	}()
	return ch
}

// awaitGrant returns the result of lockAfter, failing t when there is
// none within a generous bound.
func awaitGrant(t *testing.T, ch <-chan qgrant, within time.Duration) qgrant {
	t.Helper()
	select {
	case g := <-ch:
		require.NoError(t, g.err)
		return g
	case <-time.After(within):
		t.Fatalf("no grant within %v", within)
		return qgrant{}
	}
}

// queuedOn waits until n waiters are in the lock's line on the server.
func queuedOn(t *testing.T, rdb *redis.Client, k queue.Keys, n int64) {
	t.Helper()
	require.Eventually(t, func() bool { return rdb.ZCard(context.Background(), k.Queue).Val() == n },
		10*time.Second, 5*time.Millisecond, "%d waiters in line on %s", n, rdb.Options().Addr)
}

// Semaphore and RWMutex: helpers of the tests that run a Semaphore and a
// RWMutex on every client kind and through faults (weighted_*_test.go),
// as the Mutex's tests do.

// permitsOf is a Semaphore's Acquire of n permits as a locker, so that
// lockAsync and await serve it as they serve a Mutex.
type permitsOf struct {
	s *fairlock.Semaphore
	n int64
}

func (p permitsOf) Lock(ctx context.Context) (context.Context, error) { return p.s.Acquire(ctx, p.n) }

// readerOf is a RWMutex's RLock as a locker; the RWMutex itself is the
// writer's.
type readerOf struct{ rw *fairlock.RWMutex }

func (r readerOf) Lock(ctx context.Context) (context.Context, error) { return r.rw.RLock(ctx) }

// requireWaiting asserts that the call that reports on ch has not
// returned: it waits in line.
func requireWaiting(t testing.TB, ch <-chan result, what string) {
	t.Helper()
	select {
	case r := <-ch:
		t.Fatalf("%s returned out of turn: %v", what, r.err)
	case <-time.After(50 * time.Millisecond):
	}
}

// weightedHolder is one holder's record of a weighted lock, as Redis
// keeps it: "<weight> <shared levels> <exclusive levels> <token> <since> <entry>".
type weightedHolder struct {
	weight, shared, excl, token int64
}

// weightedState is what Redis keeps of a weighted lock: its holders by
// owner id, the weight held and the stored capacity (0: none).
type weightedState struct {
	holders        map[string]weightedHolder
	used, capacity int64
}

// writers counts the holders with a write level.
func (s weightedState) writers() int {
	n := 0
	for _, h := range s.holders {
		if h.excl > 0 {
			n++
		}
	}
	return n
}

// weightedStateOf reads what Redis keeps of the weighted lock name of
// kind through e.rdb.
func (e *env) weightedStateOf(name, kind string) (weightedState, error) {
	return weightedStateIn(e.rdb, e.weightedKeys(name, kind))
}

// weightedStateIn reads what Redis keeps of the weighted lock of keys k
// through rdb.
func weightedStateIn(rdb redis.UniversalClient, k queue.Keys) (weightedState, error) {
	fields, err := rdb.HGetAll(context.Background(), k.Lock).Result()
	if err != nil {
		return weightedState{}, err
	}
	st := weightedState{holders: map[string]weightedHolder{}}
	for f, v := range fields {
		switch {
		case f == "used":
			st.used, _ = strconv.ParseInt(v, 10, 64)
		case f == "permits":
			st.capacity, _ = strconv.ParseInt(v, 10, 64)
		case strings.HasPrefix(f, "o:"):
			r, err := queue.ParseHolder(v)
			if err != nil {
				return weightedState{}, err
			}
			st.holders[strings.TrimPrefix(f, "o:")] = weightedHolder{weight: r.Weight, shared: int64(r.Shared), excl: int64(r.Excl), token: r.Token}
		}
	}
	return st, nil
}

// requireWeightedState asserts what Redis keeps of the weighted lock: how
// many holders and how much weight they hold.
func (e *env) requireWeightedState(name, kind string, holders int, used int64) weightedState {
	e.t.Helper()
	st, err := e.weightedStateOf(name, kind)
	require.NoError(e.t, err)
	require.Len(e.t, st.holders, holders, "holders of %s: %v", name, st.holders)
	require.Equal(e.t, used, st.used, "weight held of %s", name)
	return st
}

// weightedQueued returns the length of the weighted lock's line.
func (e *env) weightedQueued(name, kind string) int64 {
	return e.rdb.LLen(context.Background(), e.weightedKeys(name, kind).Queue).Val()
}

// crowd checks the holds of one weighted lock as the callers that hold
// them see them: never more permits (a Semaphore) than its capacity,
// never a writer beside anyone (a RWMutex), and every token fresh. Each
// caller reports its hold with enter and its end with leave.
type crowd struct {
	capacity int64 // a Semaphore's; 0 for a RWMutex

	mu      sync.Mutex
	used    int64          // permits held; guarded by mu
	readers int            // guarded by mu
	writers int            // guarded by mu
	most    int64          // the most permits held at once; guarded by mu
	tokens  map[int64]bool // every token seen; guarded by mu
	broken  []string       // what went wrong; guarded by mu
	holds   atomic.Int64   // holds entered
}

func newCrowd(capacity int64) *crowd { return &crowd{capacity: capacity, tokens: map[int64]bool{}} }

// enter records a hold of weight n (a Semaphore's) or a read or write hold
// (a RWMutex's), under token.
func (c *crowd) enter(n int64, write bool, token int64) {
	c.holds.Add(1)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.tokens[token] {
		c.broken = append(c.broken, "token "+strconv.FormatInt(token, 10)+" granted twice")
	}
	c.tokens[token] = true
	switch {
	case c.capacity > 0:
		c.used += n
		c.most = max(c.most, c.used)
		if c.used > c.capacity {
			c.broken = append(c.broken, strconv.FormatInt(c.used, 10)+" permits held at once")
		}
	case write:
		c.writers++
		if c.writers > 1 || c.readers > 0 {
			c.broken = append(c.broken, "a writer beside another holder")
		}
	default:
		c.readers++
		if c.writers > 0 {
			c.broken = append(c.broken, "a reader beside a writer")
		}
	}
}

func (c *crowd) leave(n int64, write bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.capacity > 0:
		c.used -= n
	case write:
		c.writers--
	default:
		c.readers--
	}
}

// check fails t when a hold broke the lock's promise.
func (c *crowd) check(t testing.TB) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	require.Empty(t, c.broken)
}

// weightedKindOf returns the kind of keys of a Semaphore (sem true) or a
// RWMutex.
func weightedKindOf(sem bool) string {
	if sem {
		return queue.KindSemaphore
	}
	return queue.KindRWMutex
}

// weightedCall is one caller of a weighted lock: how it takes the lock
// (a locker, for lockAsync), gives it back and reads its token.
type weightedCall struct {
	locker
	unlock func(context.Context) error
	token  func(context.Context) (int64, error)
	write  bool  // a RWMutex's writer
	weight int64 // a Semaphore's permits
}

func acquireCall(s *fairlock.Semaphore, n int64) weightedCall {
	return weightedCall{locker: permitsOf{s, n}, unlock: s.Release, token: s.Token, weight: n}
}

func readCall(rw *fairlock.RWMutex) weightedCall {
	return weightedCall{locker: readerOf{rw}, unlock: rw.RUnlock, token: rw.Token}
}

func writeCall(rw *fairlock.RWMutex) weightedCall {
	return weightedCall{locker: rw, unlock: rw.Unlock, token: rw.Token, write: true}
}

// clientPrimitive is one primitive of a Client, taken and let go under
// the context of its hold.
type clientPrimitive struct {
	name         string
	lock, unlock func(c *fairlock.Client, ctx context.Context) (context.Context, error)
}

// clientPrimitives returns every primitive of a Client, each under names
// that start with tag: a Mutex, a MultiLock of two names, a Semaphore of
// one permit, a RWMutex's write lock and an Election.
func clientPrimitives(tag string) []clientPrimitive {
	return []clientPrimitive{
		{"mutex", func(c *fairlock.Client, ctx context.Context) (context.Context, error) {
			return c.Mutex(tag + "-m").Lock(ctx)
		}, func(c *fairlock.Client, ctx context.Context) (context.Context, error) {
			return nil, c.Mutex(tag + "-m").Unlock(ctx)
		}},
		{"multilock", func(c *fairlock.Client, ctx context.Context) (context.Context, error) {
			return c.MultiLock([]string{tag + "-x", tag + "-y"}).Lock(ctx)
		}, func(c *fairlock.Client, ctx context.Context) (context.Context, error) {
			return nil, c.MultiLock([]string{tag + "-x", tag + "-y"}).Unlock(ctx)
		}},
		{"semaphore", func(c *fairlock.Client, ctx context.Context) (context.Context, error) {
			return c.Semaphore(tag+"-s", 1).Acquire(ctx, 1)
		}, func(c *fairlock.Client, ctx context.Context) (context.Context, error) {
			return nil, c.Semaphore(tag+"-s", 1).Release(ctx)
		}},
		{"rwmutex", func(c *fairlock.Client, ctx context.Context) (context.Context, error) {
			return c.RWMutex(tag + "-rw").Lock(ctx)
		}, func(c *fairlock.Client, ctx context.Context) (context.Context, error) {
			return nil, c.RWMutex(tag + "-rw").Unlock(ctx)
		}},
		{"election", func(c *fairlock.Client, ctx context.Context) (context.Context, error) {
			return c.Election(tag+"-e").Campaign(ctx, c.ID())
		}, func(c *fairlock.Client, ctx context.Context) (context.Context, error) {
			return nil, c.Election(tag + "-e").Resign(ctx)
		}},
	}
}

// handsOver requires that while a holds p (held), a call of b waits
// behind it, and is granted p when a lets go.
func (p clientPrimitive) handsOver(t *testing.T, ctx context.Context, a, b *fairlock.Client, held context.Context) {
	t.Helper()
	waiter := make(chan error, 1)
	go func() {
		h, err := p.lock(b, ctx)
		if err == nil {
			_, err = p.unlock(b, h)
		}
		waiter <- err
	}()
	time.Sleep(20 * time.Millisecond)
	_, err := p.unlock(a, held)
	require.NoError(t, err, p.name)
	require.NoError(t, <-waiter, "%s: handed to the other Client", p.name)
}
