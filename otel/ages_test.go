package otel_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/fairlock/fairlock/otel"
)

// clock is a clock that moves only when told to.
type clock struct {
	mu  sync.Mutex
	now time.Time // guarded by mu
}

// newClock returns a clock at an arbitrary instant, set on o.
func newClock(o *otel.Observer) *clock {
	c := &clock{now: time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)}
	otel.SetClock(o, c.read)
	return c
}

func (c *clock) read() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) set(at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = at
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// ages returns the age gauges' data points of values.
func ages(values map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range values {
		if name := k[:min(len(k), len(holdAge))]; name == holdAge || name == waitAge {
			out[k] = v
		}
	}
	return out
}

const (
	holdAge = "fairlock.lock.hold.age"
	waitAge = "fairlock.lock.wait.age"
)

// onPath has a Client deliver each event on the step's goroutine, before
// the call returns: the age tests step the Observer's clock between
// calls, and read the gauges right after them.
var onPath = fairlock.WithObserverQueue(0)

// named names the data point of an age gauge of a lock.
func named(gauge, lock string) string {
	return gauge + "{fairlock.lock.name=" + lock + "}"
}

func TestAgeGaugesShowTheOldestHoldAndWaitOfEachLock(t *testing.T) {
	t.Parallel()
	r := newRig(t, redistest.SharedAddr(), otel.WithAgeGauges())
	clk := newClock(r.obs)
	ctx := context.Background()
	holder, waiter := r.client(onPath).Mutex("a"), r.client(onPath).Mutex("a")
	other := r.client(onPath).Mutex("b")
	hctx, err := holder.Lock(ctx)
	require.NoError(t, err)
	values, _ := r.collect()
	require.Equal(t, map[string]float64{named(holdAge, "a"): 0}, ages(values))

	clk.advance(time.Minute)
	w := lockAsync(ctx, waiter)
	r.awaitQueued()
	clk.advance(time.Minute)
	octx, err := other.Lock(ctx)
	require.NoError(t, err)
	clk.advance(30 * time.Second)
	values, _ = r.collect()
	require.Equal(t, map[string]float64{
		named(holdAge, "a"): 150,
		named(waitAge, "a"): 90,
		named(holdAge, "b"): 30,
	}, ages(values))

	require.NoError(t, holder.Unlock(hctx))
	res := await(t, w)
	require.NoError(t, res.err)
	values, _ = r.collect()
	require.Equal(t, map[string]float64{
		named(holdAge, "a"): 0, // the waiter's hold, granted now
		named(holdAge, "b"): 30,
	}, ages(values), "the wait ended with its grant")

	require.NoError(t, waiter.Unlock(res.ctx))
	require.NoError(t, other.Unlock(octx))
	values, _ = r.collect()
	require.Empty(t, ages(values), "no data point for a lock neither held nor waited for")
}

func TestAgeGaugesForgetACallThatGaveUp(t *testing.T) {
	t.Parallel()
	r := newRig(t, redistest.SharedAddr(), otel.WithAgeGauges())
	clk := newClock(r.obs)
	ctx := context.Background()
	holder := r.plain(onPath).Mutex("given-up")
	hctx, err := holder.Lock(ctx)
	require.NoError(t, err)
	wctx, cancel := context.WithCancel(ctx)
	w := lockAsync(wctx, r.client(onPath).Mutex("given-up"))
	r.awaitQueued()
	clk.advance(time.Minute)
	values, _ := r.collect()
	require.Equal(t, map[string]float64{named(waitAge, "given-up"): 60}, ages(values), "a plain Client's hold is not this Observer's")
	cancel()
	require.ErrorIs(t, await(t, w).err, context.Canceled)
	values, _ = r.collect()
	require.Empty(t, ages(values))
	require.NoError(t, holder.Unlock(hctx))
}

func TestAMultiLockIsAHoldAndAWaitOfEachOfItsLocks(t *testing.T) {
	t.Parallel()
	r := newRig(t, redistest.SharedAddr(), otel.WithAgeGauges())
	clk := newClock(r.obs)
	ctx := context.Background()
	names := []string{"m1", "m2"}
	first, second := r.client(onPath).MultiLock(names), r.client(onPath).MultiLock(names)
	hctx, err := first.Lock(ctx)
	require.NoError(t, err)
	values, _ := r.collect()
	require.Equal(t, 2.0, values[holding], "one hold of each lock")
	clk.advance(time.Minute)
	w := lockAsync(ctx, second)
	r.awaitQueued()
	clk.advance(time.Minute)
	values, _ = r.collect()
	require.Equal(t, map[string]float64{
		named(holdAge, "m1"): 120,
		named(holdAge, "m2"): 120,
		named(waitAge, "m1"): 60,
		named(waitAge, "m2"): 60,
	}, ages(values))

	require.NoError(t, first.Unlock(hctx))
	res := await(t, w)
	require.NoError(t, res.err)
	require.NoError(t, second.Unlock(res.ctx))
	values, _ = r.collect()
	require.Empty(t, ages(values))
	require.Equal(t, 0.0, values[holding], "each hold ended")
	require.Equal(t, 0.0, values[waiting])
}

// TestAHoldThatEndsBeforeItsGrantIsReportedLeavesNoAge gives the Observer
// the events of a hold that Close ended before the Lock call reported its
// grant.
func TestAHoldThatEndsBeforeItsGrantIsReportedLeavesNoAge(t *testing.T) {
	t.Parallel()
	r := newRig(t, redistest.SharedAddr(), otel.WithAgeGauges())
	ctx := context.Background()
	r.obs.Observe(ctx, fairlock.Event{Kind: fairlock.EventWaitStarted, Lock: "raced", Call: "c1", Wait: true})
	r.obs.Observe(ctx, fairlock.Event{Kind: fairlock.EventHoldEnded, Lock: "raced", Call: "c1", End: fairlock.EndClosed, Err: fairlock.ErrClosed})
	r.obs.Observe(ctx, fairlock.Event{Kind: fairlock.EventGranted, Lock: "raced", Call: "c1", Wait: true, Grant: fairlock.GrantFresh})
	values, _ := r.collect()
	require.Empty(t, ages(values))
	require.Equal(t, 0.0, values[holding])
	require.Equal(t, 0.0, values[waiting])
}

func TestWithoutAgeGaugesNoLockNameIsRecorded(t *testing.T) {
	t.Parallel()
	r := newRig(t, redistest.SharedAddr())
	m := r.client(onPath).Mutex("unnamed")
	hctx, err := m.Lock(context.Background())
	require.NoError(t, err)
	values, _ := r.collect()
	require.Empty(t, ages(values))
	for k := range values {
		require.NotContains(t, k, string(otel.LockNameKey))
	}
	require.NoError(t, m.Unlock(hctx))
}
