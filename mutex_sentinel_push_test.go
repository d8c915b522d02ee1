package fairlock_test

import (
	"context"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/internal/redistest"
)

// waitingFor is a Lock call running in a goroutine.
type waitingFor struct {
	done chan struct{} // closed when Lock returned
	hold context.Context
	err  error
	at   time.Time // when Lock returned
}

func lockInBackground(ctx context.Context, m *fairlock.Mutex) *waitingFor {
	w := &waitingFor{done: make(chan struct{})}
	go func() {
		defer close(w.done)
		w.hold, w.err = m.Lock(ctx)
		w.at = time.Now()
	}()
	return w
}

// After a graceful Sentinel failover, a Client made before it hears
// hand-overs by push from the first one on, long before Sentinel demotes
// the old primary (which until then stays a master with the Client's
// subscription): the notify hub sees the failover client dial the new
// primary and moves its subscription there. Polls are 10s apart (waiter
// TTL 30s), so a pushed hand-over is one granted within a second.
func TestSentinelGracefulFailoverKeepsHandOversPushed(t *testing.T) {
	redistest.Slow(t)
	t.Parallel()
	set := redistest.SentinelFor(t, 1, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	prefix := redistest.Prefix(t)
	rdb := set.Client(t)
	rec := &recorder{}
	c, err := fairlock.New(rdb, fairlock.WithPrefix(prefix), fairlock.WithWaiterTTL(30*time.Second), fairlock.WithObserver(rec))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	probe := set.Client(t)
	const pushed = time.Second

	queued := func(name string) func() bool {
		return func() bool { return probe.LLen(ctx, prefix+":{"+name+"}:queue").Val() == 1 }
	}
	// handOver hands m, held by hold, to a new waiter and returns how long
	// the waiter took to be granted after the Unlock, and its hold.
	handOver := func(m *fairlock.Mutex, hold context.Context) (time.Duration, context.Context) {
		w := lockInBackground(ctx, m)
		require.Eventually(t, queued(m.Name()), 30*time.Second, 5*time.Millisecond)
		time.Sleep(100 * time.Millisecond) // the waiter's first poll is answered
		unlocked := time.Now()
		require.NoError(t, m.Unlock(hold))
		<-w.done
		require.NoError(t, w.err)
		return w.at.Sub(unlocked), w.hold
	}

	m := c.Mutex("chain")
	hold, err := m.Lock(ctx)
	require.NoError(t, err)
	var before time.Duration
	for range 3 {
		var took time.Duration
		took, hold = handOver(m, hold)
		before = max(before, took)
	}
	require.Less(t, before, pushed, "hand-overs are pushed before the failover")

	// Two locks held, each with a waiter in line whose polls come at
	// joined, joined+10s, ...
	names := []string{"a", "b"}
	holds := make([]context.Context, len(names))
	waiters := make([]*waitingFor, len(names))
	for i, name := range names {
		holds[i], err = c.Mutex(name).Lock(ctx)
		require.NoError(t, err)
		waiters[i] = lockInBackground(ctx, c.Mutex(name))
	}
	for _, name := range names {
		require.Eventually(t, queued(name), 30*time.Second, 5*time.Millisecond)
	}
	joined := time.Now()

	// The failover, timed to end a few seconds before those polls.
	time.Sleep(5 * time.Second)
	started := time.Now()
	old, err := set.Failover(ctx)
	require.NoError(t, err)
	primary, err := set.WaitFailover(old, 30*time.Second)
	require.NoError(t, err)
	switched := time.Now()
	t.Logf("switched in %v, %v after the waiters joined", switched.Sub(started), switched.Sub(joined))

	var demoted atomic.Int64 // unix nanoseconds when the old primary was seen as a replica
	oldRDB := set.Server(old).Client(t)
	watchCtx, stopWatch := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for watchCtx.Err() == nil {
			if role, err := oldRDB.Do(watchCtx, "ROLE").Slice(); err == nil && len(role) > 0 && role[0] != "master" {
				demoted.Store(time.Now().UnixNano())
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	defer func() { stopWatch(); <-watched }()

	// The Client's failover client has heard the switch: its commands
	// reach the new primary.
	newPort := func() bool {
		info, err := rdb.Info(ctx, "server").Result()
		return err == nil && strings.Contains(info, "tcp_port:"+portOf(primary)+"\r\n")
	}
	require.Eventually(t, newPort, 10*time.Second, 5*time.Millisecond)

	// The first hand-overs after the switch are pushed.
	unlocked := time.Now()
	for i, name := range names {
		require.NoError(t, c.Mutex(name).Unlock(holds[i]))
	}
	var after time.Duration
	for i, w := range waiters {
		<-w.done
		require.NoError(t, w.err)
		holds[i] = w.hold
		after = max(after, w.at.Sub(unlocked))
		t.Logf("hand-over of %q after the switch: granted %v after the Unlock", names[i], w.at.Sub(unlocked))
	}
	m = c.Mutex(names[0])
	hold = holds[0]
	for range 3 {
		var took time.Duration
		took, hold = handOver(m, hold)
		after = max(after, took)
	}
	resumed := time.Now()
	require.NoError(t, m.Unlock(hold))
	require.NoError(t, c.Mutex(names[1]).Unlock(holds[1]))
	t.Logf("push latency: at most %v before the failover, %v after it (pushes resumed %v after the switch)",
		before, after, resumed.Sub(switched))
	require.Less(t, after, pushed, "hand-overs are pushed after the switch")
	rec.awaitEvent(t, "", func(e fairlock.Event) bool { return e.Kind == fairlock.EventPrimaryMoved })
	if at := demoted.Load(); at != 0 {
		require.True(t, resumed.Before(time.Unix(0, at)),
			"pushes resumed only after Sentinel demoted the old primary (%v after the switch)", time.Unix(0, at).Sub(switched))
	}
}

// portOf returns the port of a host:port address.
func portOf(addr string) string {
	_, port, _ := net.SplitHostPort(addr)
	return port
}
