package main

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock/internal/faultproxy"
	"github.com/fairlock/fairlock/internal/redistest"
)

// syncBuffer is a buffer that a watch writes while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer // guarded by mu
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startWatch runs the command in the background and returns its output
// and a channel that yields its exit status.
func startWatch(ctx context.Context, args ...string) (out, errs *syncBuffer, code <-chan int) {
	out, errs = &syncBuffer{}, &syncBuffer{}
	c := make(chan int, 1)
	go func() { c <- run(ctx, args, out, errs) }()
	return out, errs, c
}

// waitOutput waits until the output contains want.
func waitOutput(t *testing.T, out *syncBuffer, want string, within time.Duration) {
	t.Helper()
	require.Eventually(t, func() bool { return strings.Contains(out.String(), want) }, within, 5*time.Millisecond,
		"no %q in the output:\n%s", want, out)
}

// A hand-over is drawn at once, without waiting for the timer (-every 1m).
func TestWatchShowsTheNewHolderAfterAHandOver(t *testing.T) {
	r := sharedRig(t)
	l := r.lineUp("orders", 1)

	out, errs, code := startWatch(t.Context(), append(append([]string{"watch"}, r.flags...), "-for", "2s", "-every", "1m", "orders")...)
	waitOutput(t, out, "held by owner boss", 2*time.Second)
	require.NoError(t, l.holder.Mutex("orders").Unlock(l.held))
	waitOutput(t, out, "(hand-over)\n"+`lock "orders"`, time.Second)
	select {
	case c := <-code:
		assert.Equal(t, exitOK, c, errs.String())
	case <-time.After(5 * time.Second):
		t.Fatal("watch did not end after -for 2s")
	}
	views := strings.Split(out.String(), "fairlock watch ")
	last := views[len(views)-1]
	assert.Contains(t, last, "held by owner w1")
	assert.Regexp(t, `client +`+l.waiters[0].ID(), last)
	assert.NotContains(t, out.String(), clearScreen, "not a terminal: appended views")
}

// Redis goes away (its connections closed, new ones refused) and comes
// back restarted, empty; the watch says both and goes on.
func TestWatchSaysWhenRedisGoesAndComesBack(t *testing.T) {
	redistest.Slow(t)
	s, err := redistest.Start()
	require.NoError(t, err)
	defer s.Stop()
	p := faultproxy.New(t, s.Addr)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	out, errs, code := startWatch(ctx, "watch", "-redis", "redis://"+p.Addr()+"/0", "-every", "50ms", "-timeout", "500ms", "-json", "-idle", "x")
	waitOutput(t, out, `"why":"start"`, 2*time.Second)
	p.Reject()
	waitOutput(t, out, `"error":`, 5*time.Second)
	require.NoError(t, s.Restart())
	p.Heal()
	waitOutput(t, out, `"why":"reconnected"`, 5*time.Second)
	cancel() // as an interrupt does
	select {
	case c := <-code:
		assert.Equal(t, exitOK, c, errs.String())
	case <-time.After(5 * time.Second):
		t.Fatal("watch did not end when interrupted")
	}

	// The same in text.
	ctx, cancel = context.WithCancel(t.Context())
	defer cancel()
	out, _, code = startWatch(ctx, "watch", "-redis", "redis://"+p.Addr()+"/0", "-every", "50ms", "-timeout", "500ms", "-idle", "x")
	waitOutput(t, out, "not held\nno waiters", 2*time.Second)
	p.Reject()
	waitOutput(t, out, "Redis not answering since", 5*time.Second)
	p.Heal()
	waitOutput(t, out, "reconnected at", 5*time.Second)
	cancel()
	assert.Equal(t, exitOK, <-code)
}

// A lock that nobody holds or waits for is not found, as inspect says,
// unless -idle asks to watch it all the same.
func TestWatchOfALockNobodyUsesIsNotFoundUnlessIdle(t *testing.T) {
	r := sharedRig(t)
	code, out, errs := runCmd(t, append(append([]string{"watch"}, r.flags...), "-for", "1s", "nobody-uses-this")...)
	assert.Equal(t, exitNotFound, code)
	assert.Empty(t, out)
	assert.Contains(t, errs, `lock "nobody-uses-this" not found`)

	code, out, errs = runCmd(t, append(append([]string{"watch"}, r.flags...), "-for", "200ms", "-idle", "nobody-uses-this")...)
	assert.Equal(t, exitOK, code, errs)
	assert.Contains(t, out, "not held\nno waiters")
}
