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

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/internal/faultproxy"
	"github.com/fairlock/fairlock/internal/redistest"
)

// syncBuffer is a buffer that a command writes while the test reads it,
// which keeps the time of each write.
type syncBuffer struct {
	mu     sync.Mutex
	b      bytes.Buffer // guarded by mu
	writes []written    // guarded by mu
}

// written is one write: watch writes each view with one.
type written struct {
	at   time.Time
	text string
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.writes = append(s.writes, written{time.Now(), string(p)})
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// views returns the writes so far.
func (s *syncBuffer) views() []written {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]written(nil), s.writes...)
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

// watching is a watch -json of the rig running in the background,
// stopped when the test ends.
type watching struct {
	t         *testing.T
	out, errs *syncBuffer
	code      <-chan int
	seen      int // the views looked at by next
}

// watch starts watch -json with args, and waits for its first view.
func (r *rig) watch(args ...string) *watching {
	r.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out, errs, code := startWatch(ctx, r.args("watch", append([]string{"-json"}, args...)...)...)
	w := &watching{t: r.t, out: out, errs: errs, code: code}
	r.t.Cleanup(func() {
		cancel()
		select {
		case c := <-code:
			assert.Equal(r.t, exitOK, c, errs.String())
		case <-time.After(10 * time.Second):
			r.t.Error("watch did not end when interrupted")
		}
	})
	v, _ := w.next(func(v watchJSON) bool { return true }, 10*time.Second)
	require.Equal(r.t, "start", v.Why)
	return w
}

// next waits for the next view that ok accepts, and returns it with the
// time it was written.
func (w *watching) next(ok func(watchJSON) bool, within time.Duration) (watchJSON, time.Time) {
	w.t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		views := w.out.views()
		for ; w.seen < len(views); w.seen++ {
			v := decode[watchJSON](w.t, views[w.seen].text)
			require.Equal(w.t, schemaVersion, v.Schema)
			if ok(v) {
				w.seen++
				return v, views[w.seen-1].at
			}
		}
		time.Sleep(time.Millisecond)
	}
	w.t.Fatalf("no such view within %v; the output:\n%s\nstderr:\n%s", within, w.out, w.errs)
	return watchJSON{}, time.Time{}
}

// handOverBound bounds the time from a release to the view that shows
// the next holder. The watches run with -every 1m: only a hand-over
// heard on a wake channel redraws them in time. It is generous for a
// loaded machine; the tests log the figure measured.
const handOverBound = 2 * time.Second

// showsHolder returns a test of a view: the lock of kind has a holder
// of owner.
func showsHolder(kind fairlock.Kind, owner string) func(watchJSON) bool {
	return func(v watchJSON) bool {
		for _, l := range v.Locks {
			if l.Kind == string(kind) {
				for _, h := range l.Holders {
					if h.Owner == owner {
						return true
					}
				}
			}
		}
		return false
	}
}

// handedOver checks a view drawn on a hand-over, within handOverBound of
// release, and logs the time.
func handedOver(t *testing.T, what string, release time.Time, v watchJSON, at time.Time) {
	t.Helper()
	took := at.Sub(release)
	t.Logf("%s: the watch showed the new holder %v after the release began", what, took)
	assert.Equal(t, "hand-over", v.Why, "drawn on a hand-over, not on the timer")
	assert.Less(t, took, handOverBound)
	require.NotNil(t, v.At)
}

// A Mutex's hand-over is drawn at once, without waiting for the timer.
func TestWatchShowsAMutexHandOverAtOnce(t *testing.T) {
	t.Parallel()
	r := sharedRig(t)
	l := r.lineUp("orders", 1)
	w := r.watch("-every", "1m", "orders")
	start := time.Now()
	require.NoError(t, l.holder.Mutex("orders").Unlock(l.held))
	v, at := w.next(showsHolder(fairlock.KindMutex, "w1"), 10*time.Second)
	handedOver(t, "mutex", start, v, at)
	require.Len(t, v.Locks, 1)
	assert.Equal(t, l.waiters[0].ID(), v.Locks[0].Holders[0].Client)
	assert.Empty(t, v.Locks[0].Waiters)
}

// A Semaphore's grant is published under its own keys' base
// (P:{N}:sem:wake), which watch follows too.
func TestWatchShowsASemaphoreHandOverAtOnce(t *testing.T) {
	t.Parallel()
	r := sharedRig(t)
	p := r.semaphoreLine("pool")
	w := r.watch("-every", "1m", "pool")
	start := time.Now()
	require.NoError(t, p.clients[0].Semaphore("pool", 3).Release(p.holds[0]))
	v, at := w.next(showsHolder(fairlock.KindSemaphore, p.waiting[0]), 10*time.Second)
	handedOver(t, "semaphore", start, v, at)
	require.Len(t, v.Locks, 1)
	l := v.Locks[0]
	assert.Equal(t, []string{p.owners[1], p.waiting[0]}, owners(l.Holders))
	assert.Equal(t, int64(3), *l.Used)
	require.Len(t, l.Waiters, 1)
	assert.Equal(t, p.waiting[1], l.Waiters[0].Owner)
}

// A RWMutex's grant is published under P:{N}:rw:wake.
func TestWatchShowsARWMutexHandOverAtOnce(t *testing.T) {
	t.Parallel()
	r := sharedRig(t)
	p := r.rwLine("doc")
	w := r.watch("-every", "1m", "doc")
	require.NoError(t, p.clients[0].RWMutex("doc").RUnlock(p.holds[0]))
	start := time.Now()
	require.NoError(t, p.clients[1].RWMutex("doc").RUnlock(p.holds[1]))
	v, at := w.next(showsHolder(fairlock.KindRWMutex, p.waiting[0]), 10*time.Second)
	handedOver(t, "rwmutex", start, v, at)
	l := v.Locks[0]
	assert.True(t, *l.Writer)
	assert.Zero(t, *l.Readers)
	require.Len(t, l.Holders, 1)
	assert.True(t, l.Holders[0].Write)
	require.Len(t, l.Waiters, 1)
	assert.Equal(t, "read", l.Waiters[0].Kind)
}

// A MultiLock ticket's grant is published on the wake channel of its
// first lock only, in key order: a watch of another of its locks follows
// that channel while the ticket waits (a "follow" view once it does),
// and draws the grant at once, as a watch of the first lock does.
func TestWatchShowsATicketsGrantOnEachOfItsLocks(t *testing.T) {
	t.Parallel()
	r := sharedRig(t)
	tk := r.ticketLine()
	first := r.watch("-every", "1m", "a")
	second := r.watch("-every", "1m", "b")
	second.next(func(v watchJSON) bool { return v.Why == "follow" }, 10*time.Second)
	third := r.watch("-every", "1m", "c")
	third.next(func(v watchJSON) bool { return v.Why == "follow" }, 10*time.Second)
	start := time.Now()
	require.NoError(t, tk.holder.Mutex("b").Unlock(tk.held))
	for name, w := range map[string]*watching{"a": first, "b": second, "c": third} {
		v, at := w.next(showsHolder(fairlock.KindMutex, "batch"), 10*time.Second)
		handedOver(t, "multilock ticket, lock "+name, start, v, at)
		assert.Empty(t, v.Locks[0].Waiters)
	}
	assert.NotContains(t, first.out.String(), `"why":"follow"`, "the first lock's own channel has the grant")
}

// A hand-over on a quorum is published by every master; the watch
// follows each, and draws the majority's new holder at once.
func TestWatchShowsAQuorumHandOverAtOnce(t *testing.T) {
	t.Parallel()
	r := quorumRig(t, redistest.Masters(t, 3))
	l := r.lineUp("q", 1)
	w := r.watch("-every", "1m", "q")
	start := time.Now()
	require.NoError(t, l.holder.Mutex("q").Unlock(l.held))
	v, at := w.next(showsHolder(fairlock.KindMutex, "w1"), 10*time.Second)
	handedOver(t, "quorum mutex", start, v, at)
	require.Len(t, v.Locks[0].Masters, 3)
}

// A text watch: views appended one after the other, each with its
// header and the reason it was drawn.
func TestWatchInTextShowsTheNewHolderAfterAHandOver(t *testing.T) {
	t.Parallel()
	r := sharedRig(t)
	l := r.lineUp("orders", 1)

	out, errs, code := startWatch(t.Context(), r.args("watch", "-for", "2s", "-every", "1m", "orders")...)
	waitOutput(t, out, "owner boss", 5*time.Second)
	require.NoError(t, l.holder.Mutex("orders").Unlock(l.held))
	waitOutput(t, out, "(hand-over)\n"+`lock "orders" (mutex)`, 5*time.Second)
	select {
	case c := <-code:
		assert.Equal(t, exitOK, c, errs.String())
	case <-time.After(5 * time.Second):
		t.Fatal("watch did not end after -for 2s")
	}
	views := strings.Split(out.String(), "fairlock watch ")
	assert.Contains(t, views[1], "(start)")
	last := views[len(views)-1]
	assert.Regexp(t, `^"orders" on redis://[^ ]+, prefix "[^"]+": \d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} UTC \(hand-over\)`, last)
	assert.Regexp(t, `1\. owner w1  client `+l.waiters[0].ID(), last)
	assert.Contains(t, last, "no waiters")
	assert.NotContains(t, out.String(), clearScreen, "not a terminal: appended views")
}

// Redis goes away (its connections closed, new ones refused) and comes
// back restarted, empty; the watch says both and goes on, in one shape
// and with the server's clock only.
func TestWatchSaysWhenRedisGoesAndComesBack(t *testing.T) {
	redistest.Slow(t)
	s, err := redistest.Start()
	require.NoError(t, err)
	defer s.Stop()
	p := faultproxy.New(t, s.Addr)
	r := &rig{t: t, flags: []string{"-redis", "redis://" + p.Addr() + "/0"}}
	w := r.watch("-every", "50ms", "-timeout", "500ms", "-idle", "x")
	first, _ := w.next(func(watchJSON) bool { return true }, 5*time.Second) // a timer view
	require.NotNil(t, first.At)
	p.Reject()
	down, _ := w.next(func(v watchJSON) bool { return v.Why == "error" }, 5*time.Second)
	assert.Nil(t, down.At, "no server, no clock")
	require.NotNil(t, down.Error)
	require.NotNil(t, down.DownSince)
	assert.False(t, down.DownSince.Before(*first.At), "the last answer's server time")
	assert.Empty(t, down.Locks)
	require.NoError(t, s.Restart())
	p.Heal()
	back, _ := w.next(func(v watchJSON) bool { return v.Why == "reconnected" }, 5*time.Second)
	require.NotNil(t, back.At)
	assert.Nil(t, back.Error)
	require.NotNil(t, back.DownSince)
	assert.Equal(t, *down.DownSince, *back.DownSince)
	assert.Positive(t, back.DownForMS)

	// The same in text.
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	out, _, code := startWatch(ctx, "watch", "-redis", "redis://"+p.Addr()+"/0", "-every", "50ms", "-timeout", "500ms", "-idle", "x")
	waitOutput(t, out, "not held, no waiters", 2*time.Second)
	p.Reject()
	waitOutput(t, out, "Redis not answering since", 5*time.Second)
	assert.Contains(t, out.String(), "(server clock, its last answer)")
	p.Heal()
	waitOutput(t, out, "reconnected at", 5*time.Second)
	cancel()
	assert.Equal(t, exitOK, <-code)
}

// A lock that nobody holds or waits for is not found, as inspect says,
// unless -idle asks to watch it all the same.
func TestWatchOfALockNobodyUsesIsNotFoundUnlessIdle(t *testing.T) {
	t.Parallel()
	r := sharedRig(t)
	code, out, errs := r.cmd("watch", "-for", "1s", "nobody-uses-this")
	assert.Equal(t, exitNotFound, code)
	assert.Empty(t, out)
	assert.Contains(t, errs, `lock "nobody-uses-this" not found`)

	code, out, errs = r.cmd("watch", "-for", "200ms", "-idle", "nobody-uses-this")
	assert.Equal(t, exitOK, code, errs)
	assert.Contains(t, out, "not held, no waiters")
}
