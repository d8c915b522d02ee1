package main

import (
	"context"
	"encoding/json"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/internal/redistest"
)

func TestMain(m *testing.M) {
	redistest.QuickLoop(6)
	goleak.VerifyTestMain(redistest.Runner(m))
}

// runCmd runs the command in this process and returns its exit status,
// stdout and stderr.
func runCmd(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb syncBuffer
	code := run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

// rig is a prefix of its own on a Redis, or on a quorum's masters, with
// the flags that name them.
type rig struct {
	t       *testing.T
	rdb     redis.UniversalClient   // nil for a quorum
	masters []redis.UniversalClient // a quorum's; nil otherwise
	prefix  string
	flags   []string // -redis, -cluster, -sentinel or -masters, and -prefix
}

// sharedRig is a rig on the package's shared server.
func sharedRig(t *testing.T) *rig {
	s := redistest.Shared(t)
	p := redistest.Prefix(t)
	return &rig{t: t, rdb: s.Client(t), prefix: p, flags: []string{"-redis", "redis://" + s.Addr + "/0", "-prefix", p}}
}

// quorumRig is a rig on a quorum of servers.
func quorumRig(t *testing.T, servers []*redistest.Server) *rig {
	p := redistest.Prefix(t)
	r := &rig{t: t, prefix: p}
	var addrs []string
	for _, s := range servers {
		r.masters = append(r.masters, s.Client(t))
		addrs = append(addrs, s.Addr)
	}
	r.flags = []string{"-masters", strings.Join(addrs, ","), "-prefix", p}
	return r
}

// client returns a fairlock Client of the rig, closed when the test ends.
func (r *rig) client(opts ...fairlock.Option) *fairlock.Client {
	opts = append([]fairlock.Option{fairlock.WithPrefix(r.prefix), fairlock.WithWaiterTTL(30 * time.Second), fairlock.WithLease(30 * time.Second)}, opts...)
	var (
		c   *fairlock.Client
		err error
	)
	if r.masters != nil {
		c, err = fairlock.NewQuorum(context.Background(), r.masters, opts...)
	} else {
		c, err = fairlock.New(r.rdb, opts...)
	}
	require.NoError(r.t, err)
	r.t.Cleanup(func() { c.Close() })
	return c
}

// cmd runs the command: sub, then the rig's flags, then args.
func (r *rig) cmd(sub string, args ...string) (int, string, string) {
	r.t.Helper()
	return runCmd(r.t, r.args(sub, args...)...)
}

// args is the command line of sub with the rig's flags and args.
func (r *rig) args(sub string, args ...string) []string {
	return append(append([]string{sub}, r.flags...), args...)
}

// async runs take on a goroutine, with a context that ends with the
// test, and sends its hold when granted.
func (r *rig) async(take func(ctx context.Context) (context.Context, error)) <-chan context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	g := make(chan context.Context, 1)
	done := make(chan struct{})
	r.t.Cleanup(func() {
		cancel()
		<-done
	})
	go func() {
		defer close(done)
		if h, err := take(ctx); err == nil {
			g <- h
		}
	}()
	return g
}

// granted waits for the hold of an async call.
func granted(t *testing.T, g <-chan context.Context, what string) context.Context {
	t.Helper()
	select {
	case h := <-g:
		return h
	case <-time.After(10 * time.Second):
		t.Fatalf("%s was not granted", what)
		return nil
	}
}

// waitLine waits until the lock of kind called name has n waiters.
func (r *rig) waitLine(c *fairlock.Client, name string, kind fairlock.Kind, n int) {
	r.t.Helper()
	require.Eventually(r.t, func() bool {
		sts, err := c.InspectAll(context.Background(), name)
		if err != nil {
			return false
		}
		for _, st := range sts {
			if st.Kind == kind {
				return len(st.Waiters) == n
			}
		}
		return n == 0
	}, 10*time.Second, 5*time.Millisecond, "the line of %s %q never had %d waiters", kind, name, n)
}

// line is a lock held by one Client with Lock calls of others in line.
type line struct {
	holder  *fairlock.Client
	held    context.Context // the holder's held context
	waiters []*fairlock.Client
	granted []<-chan context.Context // a waiter's held context, when granted
}

// lineUp has owner "boss" take the Mutex name, then owners "w1".."wN"
// line up, each on a Client of its own, and waits until Redis shows them
// all in line. The waiters give up when the test ends.
func (r *rig) lineUp(name string, n int) *line {
	r.t.Helper()
	ctx := context.Background()
	l := &line{holder: r.client()}
	var err error
	l.held, err = l.holder.Mutex(name).Lock(fairlock.ContextWithOwner(ctx, "boss"))
	require.NoError(r.t, err)
	for i := range n {
		c := r.client()
		owner := "w" + string(rune('1'+i))
		l.waiters = append(l.waiters, c)
		l.granted = append(l.granted, r.async(func(ctx context.Context) (context.Context, error) {
			return c.Mutex(name).Lock(fairlock.ContextWithOwner(ctx, owner))
		}))
		r.waitLine(l.holder, name, fairlock.KindMutex, i+1)
	}
	return l
}

// decode decodes one JSON object of the output.
func decode[T any](t *testing.T, out string) T {
	t.Helper()
	var v T
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&v), out)
	return v
}

// unreachable returns a loopback address where nothing listens.
func unreachable(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

func TestBadUsageExitsWithStatus2(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args []string
		want string // in stderr
	}{
		{nil, "Usage: fairlock COMMAND"},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"inspect"}, "want one lock NAME, got 0"},
		{[]string{"inspect", "a", "b"}, "want one lock NAME, got 2"},
		{[]string{"inspect", "-nosuchflag", "a"}, "flag provided but not defined: -nosuchflag"},
		{[]string{"inspect", "-redis", "http://x", "a"}, "-redis"},
		{[]string{"inspect", "-redis", "redis://a:1", "-cluster", "b:2", "a"}, "-redis and -cluster exclude each other"},
		{[]string{"inspect", "-sentinel", "a:1", "a"}, "-sentinel needs -master NAME"},
		{[]string{"inspect", "-cluster", "a:1,b", "a"}, `-cluster "b"`},
		{[]string{"inspect", "-timeout", "0", "a"}, "-timeout 0s"},
		{[]string{"list", "-prefix", "a{b"}, `-prefix: fairlock: invalid key prefix: "a{b" contains a brace`},
		{[]string{"inspect", "-masters", "a:1,b:2", "-redis", "redis://c:3", "a"}, "-masters and -redis exclude each other"},
		{[]string{"inspect", "-masters", "a:1,b", "a"}, `-masters "b"`},
		{[]string{"inspect", "-masters", ",", "a"}, "no address"},
		{[]string{"inspect", "-masters", "redis://u:secret@a:1/x", "a"}, "-masters"},
		{[]string{"list", "a", "b"}, "want at most one PATTERN, got 2"},
		{[]string{"unlock", "a"}, "needs --force"},
		{[]string{"unlock", "--force"}, "want one lock NAME, got 0"},
		{[]string{"unlock", "--force", "-kind", "queue", "a"}, `-kind "queue": want mutex, semaphore, rwmutex or election`},
		{[]string{"unlock", "--force", "-masters", "a:1", "-kind", "semaphore", "a"}, "a quorum's locks are Mutexes"},
		{[]string{"watch"}, "want one lock NAME, got 0"},
		{[]string{"watch", "-every", "0", "a"}, "-every 0s"},
		{[]string{"watch", "-for", "-1s", "a"}, "-for -1s"},
		{[]string{"watch", "a}b"}, "invalid lock name"},
		{[]string{"leader"}, "want one election NAME, got 0"},
		{[]string{"leader", "a", "b"}, "want one election NAME, got 2"},
		{[]string{"leader", "a}b"}, "invalid lock name"},
		{[]string{"leader", "-for", "1s", "a"}, "-for goes with -watch"},
		{[]string{"leader", "-watch", "-for", "-1s", "a"}, "-for -1s"},
		{[]string{"leader", "-masters", "a:1,b:2,c:3", "a"}, "a quorum Client (NewQuorum) offers no Election"},
	}
	for _, tt := range tests {
		code, out, errs := runCmd(t, tt.args...)
		assert.Equal(t, exitError, code, "%q", tt.args)
		assert.Contains(t, errs, tt.want, "%q", tt.args)
		assert.NotContains(t, errs, "secret", "%q: no password in messages", tt.args)
		assert.Empty(t, out, "%q", tt.args)
	}
	for _, sub := range []string{"inspect", "list", "watch", "unlock", "leader"} {
		code, _, errs := runCmd(t, sub, "-h")
		assert.Equal(t, exitOK, code, sub)
		assert.Contains(t, errs, "Usage: fairlock "+sub, sub)
		assert.Contains(t, errs, "-sentinel addresses", sub)
		assert.Contains(t, errs, "-masters addresses", sub)
	}
}

// A Redis that cannot be reached is exit status 2, within the -timeout
// and well before go-redis's default dial timeout, with one line on
// stderr: the command's own. go-redis's log lines of its failed dials
// are shown with -v only.
func TestUnreachableRedisExitsWithStatus2AndOneLine(t *testing.T) {
	redistest.Slow(t)
	addr := unreachable(t)
	single := []string{"-redis", "redis://" + addr + "/0", "-timeout", "1s"}
	quorum := []string{"-masters", addr + "," + unreachable(t) + "," + unreachable(t), "-timeout", "1s"}
	for _, args := range [][]string{
		append([]string{"inspect", "x"}, single...),
		append([]string{"list"}, single...),
		append([]string{"unlock", "--force", "--yes", "x"}, single...),
		append([]string{"watch", "-for", "5s", "x"}, single...),
		append([]string{"leader", "x"}, single...),
		append([]string{"leader", "-watch", "-for", "5s", "x"}, single...),
		append([]string{"inspect", "x"}, quorum...),
		append([]string{"watch", "-for", "5s", "x"}, quorum...),
	} {
		start := time.Now()
		code, out, errs := runCmd(t, args...)
		assert.Equal(t, exitError, code, "%q: stderr %s", args, errs)
		assert.Contains(t, errs, addr, "%q", args)
		assert.Equal(t, 1, strings.Count(errs, "\n"), "%q: one line on stderr:\n%s", args, errs)
		assert.NotContains(t, errs, "redis: ", "%q: no go-redis log lines", args)
		assert.Empty(t, out, "%q", args)
		assert.Less(t, time.Since(start), 5*time.Second, "%q", args)
	}
	code, _, errs := runCmd(t, append([]string{"inspect", "-v", "x"}, single...)...)
	assert.Equal(t, exitError, code)
	assert.Contains(t, errs, "redis: ", "-v shows go-redis's log lines")
	assert.Greater(t, strings.Count(errs, "\n"), 1, errs)
}
