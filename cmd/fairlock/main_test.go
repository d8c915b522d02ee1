package main

import (
	"bytes"
	"context"
	"net"
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
	goleak.VerifyTestMain(redistest.Runner(m))
}

// runCmd runs the command in this process and returns its exit status,
// stdout and stderr.
func runCmd(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

// rig is a prefix of its own on a Redis, with the flags that name them.
type rig struct {
	t      *testing.T
	rdb    redis.UniversalClient
	prefix string
	flags  []string // -redis or -cluster, and -prefix
}

// sharedRig is a rig on the package's shared server.
func sharedRig(t *testing.T) *rig {
	s := redistest.Shared(t)
	p := redistest.Prefix(t)
	return &rig{t: t, rdb: s.Client(t), prefix: p, flags: []string{"-redis", "redis://" + s.Addr + "/0", "-prefix", p}}
}

// client returns a fairlock Client of the rig, closed when the test ends.
func (r *rig) client() *fairlock.Client {
	c, err := fairlock.New(r.rdb, fairlock.WithPrefix(r.prefix), fairlock.WithWaiterTTL(30*time.Second), fairlock.WithLease(30*time.Second))
	require.NoError(r.t, err)
	r.t.Cleanup(func() { c.Close() })
	return c
}

// cmd runs the command: sub, then the rig's flags, then args.
func (r *rig) cmd(sub string, args ...string) (int, string, string) {
	r.t.Helper()
	return runCmd(r.t, append(append([]string{sub}, r.flags...), args...)...)
}

// line is a lock held by one Client with Lock calls of others in line.
type line struct {
	holder     *fairlock.Client
	held       context.Context // the holder's held context
	waiters    []*fairlock.Client
	granted    []chan context.Context // a waiter's held context, when granted
	cancelWait context.CancelFunc
}

// lineUp has owner "boss" take name, then owners "w1".."wN" line up, each
// on a Client of its own, and waits until Redis shows them all in line.
// The waiters give up when the test ends.
func (r *rig) lineUp(name string, n int) *line {
	r.t.Helper()
	ctx := context.Background()
	l := &line{holder: r.client()}
	var err error
	l.held, err = l.holder.Mutex(name).Lock(fairlock.ContextWithOwner(ctx, "boss"))
	require.NoError(r.t, err)
	wctx, cancel := context.WithCancel(ctx)
	l.cancelWait = cancel
	done := make(chan struct{}, n)
	r.t.Cleanup(func() {
		cancel()
		for range n {
			<-done
		}
	})
	for i := range n {
		c := r.client()
		g := make(chan context.Context, 1)
		l.waiters, l.granted = append(l.waiters, c), append(l.granted, g)
		owner := "w" + string(rune('1'+i))
		go func() {
			defer func() { done <- struct{}{} }()
			if h, err := c.Mutex(name).Lock(fairlock.ContextWithOwner(wctx, owner)); err == nil {
				g <- h
			}
		}()
		require.Eventually(r.t, func() bool {
			st, err := l.holder.Inspect(ctx, name)
			return err == nil && len(st.Waiters) == i+1
		}, 5*time.Second, 5*time.Millisecond, "waiter %s never joined the line", owner)
	}
	return l
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
		{[]string{"list", "a", "b"}, "want at most one PATTERN, got 2"},
		{[]string{"unlock", "a"}, "needs --force"},
		{[]string{"unlock", "--force"}, "want one lock NAME, got 0"},
		{[]string{"watch"}, "want one lock NAME, got 0"},
		{[]string{"watch", "-every", "0", "a"}, "-every 0s"},
		{[]string{"watch", "-for", "-1s", "a"}, "-for -1s"},
	}
	for _, tt := range tests {
		code, out, errs := runCmd(t, tt.args...)
		assert.Equal(t, exitError, code, "%q", tt.args)
		assert.Contains(t, errs, tt.want, "%q", tt.args)
		assert.Empty(t, out, "%q", tt.args)
	}
	for _, sub := range []string{"inspect", "list", "watch", "unlock"} {
		code, _, errs := runCmd(t, sub, "-h")
		assert.Equal(t, exitOK, code, sub)
		assert.Contains(t, errs, "Usage: fairlock "+sub, sub)
		assert.Contains(t, errs, "-sentinel addresses", sub)
	}
}

// A Redis that cannot be reached is exit status 2, within the -timeout
// and well before go-redis's default dial timeout.
func TestUnreachableRedisExitsWithStatus2(t *testing.T) {
	redistest.Slow(t)
	addr := unreachable(t)
	for _, args := range [][]string{
		{"inspect", "x"},
		{"list"},
		{"unlock", "--force", "--yes", "x"},
		{"watch", "-for", "5s", "x"},
	} {
		start := time.Now()
		code, out, errs := runCmd(t, append(args, "-redis", "redis://"+addr+"/0", "-timeout", "1s")...)
		assert.Equal(t, exitError, code, "%q: stderr %s", args, errs)
		assert.Contains(t, errs, addr, "%q", args)
		assert.Empty(t, out, "%q", args)
		assert.Less(t, time.Since(start), 3*time.Second, "%q", args)
	}
}
