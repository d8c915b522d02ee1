package otel_test

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/fairlock/fairlock/otel"
)

// The names of the data points the tests expect.
const (
	waitDuration    = "fairlock.lock.wait.duration"
	holdDuration    = "fairlock.lock.hold.duration"
	handOver        = "fairlock.lock.handover.duration{}"
	waiting         = "fairlock.lock.waiting{}"
	holding         = "fairlock.lock.holding{}"
	grants          = "fairlock.lock.grants"
	giveUps         = "fairlock.lock.give_ups"
	leasesLost      = "fairlock.lock.leases_lost"
	renewalFailures = "fairlock.lock.renewal_failures{}"
)

// with names the data point of an instrument with one outcome.
func with(name, outcome string) string {
	return name + "{fairlock.lock.outcome=" + outcome + "}"
}

func TestAnUncontendedLockRecordsAFreshGrantAndAnUnlockedHold(t *testing.T) {
	t.Parallel()
	r := newRig(t, redistest.SharedAddr())
	m := r.client().Mutex("free")
	tracer := r.tp.Tracer("caller")
	ctx, parent := tracer.Start(context.Background(), "request")
	hctx, err := m.Lock(ctx)
	require.NoError(t, err)
	token, err := m.Token(hctx)
	require.NoError(t, err)
	r.awaitValue(holding, 1)
	require.NoError(t, m.Unlock(hctx))
	parent.End()
	r.flush()

	values, sums := r.collect()
	require.Equal(t, started(map[string]float64{
		with(waitDuration, otel.OutcomeFresh):    1,
		with(grants, otel.OutcomeFresh):          1,
		waiting:                                  0,
		holding:                                  0,
		with(holdDuration, otel.OutcomeUnlocked): 1,
	}), values)
	require.Positive(t, sums[with(waitDuration, otel.OutcomeFresh)])
	require.Equal(t, []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300},
		r.bounds(waitDuration), "buckets from a millisecond to five minutes")
	require.Equal(t, r.bounds(waitDuration), r.bounds(holdDuration))
	require.Positive(t, sums[with(holdDuration, otel.OutcomeUnlocked)])

	spans := r.lockSpans()
	require.Len(t, spans, 1)
	s := spans[0]
	require.Equal(t, parent.SpanContext().SpanID(), s.Parent().SpanID(), "a child of the caller's span")
	require.Equal(t, parent.SpanContext().TraceID(), s.SpanContext().TraceID())
	require.Equal(t, []string{"granted"}, eventNames(s))
	require.Contains(t, s.Events()[0].Attributes, attribute.Int64("fairlock.lock.token", token))
	require.Contains(t, s.Attributes(), otel.OutcomeKey.String(otel.OutcomeFresh))
	require.Equal(t, codes.Unset, s.Status().Code)
	require.Len(t, s.Attributes(), 1, "no attribute for the lock's name by default")
	require.Zero(t, otel.Waiting(r.obs), "no call left in the map")
}

func TestAHandOverBetweenTwoClientsIsOneWaitInLine(t *testing.T) {
	t.Parallel()
	r := newRig(t, redistest.SharedAddr())
	holder := r.client().Mutex("line")
	waiter := r.client().Mutex("line")
	ctx := context.Background()
	hctx, err := holder.Lock(ctx)
	require.NoError(t, err)

	w := lockAsync(ctx, waiter)
	r.awaitQueued()
	r.awaitValue(holding, 1) // the holder's Client reports on a goroutine of its own
	values, _ := r.collect()
	require.Equal(t, 1.0, values[waiting])
	require.Equal(t, 1, otel.Waiting(r.obs))
	require.NoError(t, holder.Unlock(hctx))
	res := await(t, w)
	require.NoError(t, res.err)
	require.NoError(t, waiter.Unlock(res.ctx))
	r.flush()

	values, _ = r.collect()
	require.Equal(t, started(map[string]float64{
		with(waitDuration, otel.OutcomeFresh):    1,
		with(waitDuration, otel.OutcomeHandOver): 1,
		with(grants, otel.OutcomeFresh):          1,
		with(grants, otel.OutcomeHandOver):       1,
		handOver:                                 1, // pushed, with its time
		waiting:                                  0,
		holding:                                  0,
		with(holdDuration, otel.OutcomeUnlocked): 2,
	}), values)

	spans := r.lockSpans()
	require.Len(t, spans, 2)
	s := spans[1] // the waiter's ended last
	require.Contains(t, s.Attributes(), otel.OutcomeKey.String(otel.OutcomeHandOver))
	require.Equal(t, []string{"queued", "granted"}, eventNames(s))
	var latency []attribute.KeyValue
	for _, a := range s.Events()[1].Attributes {
		if a.Key == "fairlock.lock.handover.duration" {
			latency = append(latency, a)
		}
	}
	require.Len(t, latency, 1, "the granted event says how long the push took")
	require.Positive(t, latency[0].Value.AsFloat64())
	require.Equal(t, []float64{0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1},
		r.bounds("fairlock.lock.handover.duration"), "buckets from 50µs to a second")
	require.Contains(t, r.promNames(), "fairlock_lock_handover_duration_seconds")
	require.Equal(t, codes.Unset, s.Status().Code)
	require.Zero(t, otel.Waiting(r.obs))
}

// fairlock hands the Observer its events after the steps they report,
// on a goroutine of the Client: here each reaches it 100ms late. The span
// of a Lock call still runs from the call to its grant.
func TestASpanIsTimedByItsEventsNotByTheirDelivery(t *testing.T) {
	t.Parallel()
	r := newRig(t, redistest.SharedAddr())
	late := fairlock.ObserverFunc(func(ctx context.Context, e fairlock.Event) {
		time.Sleep(100 * time.Millisecond)
		r.obs.Observe(ctx, e)
	})
	ctx := context.Background()
	holder := r.plain().Mutex("late")
	hctx, err := holder.Lock(ctx)
	require.NoError(t, err)
	waiter := r.plain(fairlock.WithObserver(late)).Mutex("late")
	called := time.Now()
	w := lockAsync(ctx, waiter)
	r.awaitQueued()
	require.NoError(t, holder.Unlock(hctx))
	res := await(t, w)
	returned := time.Now()
	require.NoError(t, res.err)
	require.NoError(t, waiter.Unlock(res.ctx))
	r.flush()

	spans := r.lockSpans()
	require.Len(t, spans, 1)
	s := spans[0]
	require.False(t, s.StartTime().Before(called), "the span starts with the call")
	require.False(t, s.EndTime().After(returned), "the span ends at the grant, before Lock returned")
	require.Equal(t, []string{"queued", "granted"}, eventNames(s))
	require.False(t, s.Events()[1].Time.After(returned), "granted at the grant")
}

func TestAFailedTryLockIsAGiveUpThatNeverWaited(t *testing.T) {
	t.Parallel()
	r := newRig(t, redistest.SharedAddr())
	ctx := context.Background()
	holder := r.plain().Mutex("busy")
	hctx, err := holder.Lock(ctx)
	require.NoError(t, err)
	_, err = r.client().Mutex("busy").TryLock(ctx)
	require.ErrorIs(t, err, fairlock.ErrLocked)
	require.NoError(t, holder.Unlock(hctx))
	r.flush()

	values, _ := r.collect()
	require.Equal(t, started(map[string]float64{
		with(waitDuration, otel.OutcomeLocked): 1,
		with(giveUps, otel.OutcomeLocked):      1,
	}), values, "no waiting call counted, no hold")
	require.Empty(t, r.lockSpans(), "a TryLock has no span")
	require.Contains(t, r.promNames(), "fairlock_lock_give_ups_total")
}

func TestALockThatGivesUpAtItsDeadlineLeavesNoWaiter(t *testing.T) {
	t.Parallel()
	r := newRig(t, redistest.SharedAddr())
	ctx := context.Background()
	holder := r.plain().Mutex("deadline")
	hctx, err := holder.Lock(ctx)
	require.NoError(t, err)
	dctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	_, err = r.client().Mutex("deadline").Lock(dctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.NoError(t, holder.Unlock(hctx))
	r.flush()

	values, sums := r.collect()
	require.Equal(t, started(map[string]float64{
		with(waitDuration, otel.OutcomeGaveUp): 1,
		with(giveUps, otel.OutcomeGaveUp):      1,
		waiting:                                0,
	}), values)
	require.GreaterOrEqual(t, sums[with(waitDuration, otel.OutcomeGaveUp)], 0.2)

	spans := r.lockSpans()
	require.Len(t, spans, 1)
	s := spans[0]
	require.Contains(t, s.Attributes(), otel.OutcomeKey.String(otel.OutcomeGaveUp))
	require.Equal(t, []string{"queued"}, eventNames(s))
	require.Equal(t, codes.Unset, s.Status().Code, "giving up is not an error of the lock")
	require.Zero(t, otel.Waiting(r.obs))
}

func TestAReentryIsAGrantButNotAnotherHold(t *testing.T) {
	t.Parallel()
	r := newRig(t, redistest.SharedAddr())
	m := r.client().Mutex("again")
	hctx, err := m.Lock(context.Background())
	require.NoError(t, err)
	inner, err := m.Lock(hctx)
	require.NoError(t, err)
	r.awaitValue(with(grants, otel.OutcomeReentry), 1)
	values, _ := r.collect()
	require.Equal(t, 1.0, values[holding], "one hold of two levels")
	require.Equal(t, 0.0, values[waiting])
	require.NoError(t, m.Unlock(inner))
	require.NoError(t, m.Unlock(hctx))
	r.flush()

	values, _ = r.collect()
	require.Equal(t, started(map[string]float64{
		with(waitDuration, otel.OutcomeFresh):    1,
		with(waitDuration, otel.OutcomeReentry):  1,
		with(grants, otel.OutcomeFresh):          1,
		with(grants, otel.OutcomeReentry):        1,
		waiting:                                  0,
		holding:                                  0,
		with(holdDuration, otel.OutcomeUnlocked): 1,
	}), values)
	require.Len(t, r.lockSpans(), 1, "a re-entry has no span")
}

func TestALeaseLostToForceUnlockIsCounted(t *testing.T) {
	t.Parallel()
	r := newRig(t, redistest.SharedAddr())
	ctx := context.Background()
	_, err := r.client(fairlock.WithLease(300 * time.Millisecond)).Mutex("lost").Lock(ctx)
	require.NoError(t, err)
	_, err = r.plain().Mutex("lost").ForceUnlock(ctx)
	require.NoError(t, err)
	r.awaitValue(with(leasesLost, otel.OutcomeLeaseLost), 1)

	values, _ := r.collect()
	require.Equal(t, started(map[string]float64{
		with(waitDuration, otel.OutcomeFresh): 1,
		with(grants, otel.OutcomeFresh):       1,
		waiting:                               0,
		holding:                               0,
		with(holdDuration, otel.OutcomeLeaseLost): 1,
		with(leasesLost, otel.OutcomeLeaseLost):   1,
	}), values)
	require.Contains(t, r.promNames(), "fairlock_lock_leases_lost_total")
}

func TestAFixedLeaseThatRanOutIsCounted(t *testing.T) {
	t.Parallel()
	r := newRig(t, redistest.SharedAddr())
	_, err := r.client().Mutex("fixed", fairlock.WithFixedLease(100*time.Millisecond)).Lock(context.Background())
	require.NoError(t, err)
	r.awaitValue(with(leasesLost, otel.OutcomeLeaseRanOut), 1)

	values, sums := r.collect()
	require.Equal(t, started(map[string]float64{
		with(waitDuration, otel.OutcomeFresh): 1,
		with(grants, otel.OutcomeFresh):       1,
		waiting:                               0,
		holding:                               0,
		with(holdDuration, otel.OutcomeLeaseRanOut): 1,
		with(leasesLost, otel.OutcomeLeaseRanOut):   1,
	}), values)
	require.GreaterOrEqual(t, sums[with(holdDuration, otel.OutcomeLeaseRanOut)], 0.05)
}

// TestRenewalsFailingUntilTheLeaseIsLostAreCounted stops a server of the
// test's own while a hold is renewed on it.
func TestRenewalsFailingUntilTheLeaseIsLostAreCounted(t *testing.T) {
	t.Parallel()
	srv, err := redistest.Start()
	require.NoError(t, err)
	t.Cleanup(srv.Stop)
	r := newRig(t, srv.Addr)
	_, err = r.client(fairlock.WithLease(300 * time.Millisecond)).Mutex("stopped").Lock(context.Background())
	require.NoError(t, err)
	resume := redistest.Pause(t, srv.Client(t))
	r.awaitValue(with(leasesLost, otel.OutcomeLeaseLost), 1)
	resume()

	values, _ := r.collect()
	failures := values[renewalFailures]
	require.GreaterOrEqual(t, failures, 1.0)
	require.Equal(t, started(map[string]float64{
		with(waitDuration, otel.OutcomeFresh): 1,
		with(grants, otel.OutcomeFresh):       1,
		waiting:                               0,
		holding:                               0,
		with(holdDuration, otel.OutcomeLeaseLost): 1,
		with(leasesLost, otel.OutcomeLeaseLost):   1,
		renewalFailures:                           failures,
	}), values)
	require.Contains(t, r.promNames(), "fairlock_lock_renewal_failures_total")
}

func TestCloseEndsHoldsAndWaitsAndTheCountersReturnToZero(t *testing.T) {
	t.Parallel()
	r := newRig(t, redistest.SharedAddr())
	ctx := context.Background()
	c := r.client()
	other := r.plain().Mutex("waited")
	oh, err := other.Lock(ctx)
	require.NoError(t, err)
	_, err = c.Mutex("held").Lock(ctx)
	require.NoError(t, err)
	w := lockAsync(ctx, c.Mutex("waited"))
	r.awaitQueued()
	require.NoError(t, c.Close())
	require.ErrorIs(t, await(t, w).err, fairlock.ErrClosed)
	require.NoError(t, other.Unlock(oh))

	values, _ := r.collect()
	require.Equal(t, started(map[string]float64{
		with(waitDuration, otel.OutcomeFresh):  1,
		with(waitDuration, otel.OutcomeClosed): 1,
		with(grants, otel.OutcomeFresh):        1,
		with(giveUps, otel.OutcomeClosed):      1,
		waiting:                                0,
		holding:                                0,
		with(holdDuration, otel.OutcomeClosed): 1,
	}), values)

	var closed sdktrace.ReadOnlySpan
	for _, s := range r.lockSpans() {
		if s.Status().Code == codes.Error {
			closed = s
		}
	}
	require.NotNil(t, closed, "the wait that Close ended is an error")
	require.Contains(t, closed.Attributes(), otel.OutcomeKey.String(otel.OutcomeClosed))
	require.Contains(t, eventNames(closed), "exception", "the error is recorded")
	require.Zero(t, otel.Waiting(r.obs))
}

// group is a WithLockAttribute mapping: the part of the name before a
// ':', none for a name without one.
func group(name string) (attribute.KeyValue, bool) {
	prefix, _, ok := strings.Cut(name, ":")
	return attribute.String("fairlock.lock.group", prefix), ok
}

func TestWithLockAttributeLabelsMetricsAndSpansOnlyWhereItSays(t *testing.T) {
	t.Parallel()
	r := newRig(t, redistest.SharedAddr(), otel.WithLockAttribute(group))
	c := r.client()
	ctx := context.Background()
	for _, name := range []string{"invoice:1", "invoice:2", "plain"} {
		hctx, err := c.Mutex(name).Lock(ctx)
		require.NoError(t, err)
		require.NoError(t, c.Mutex(name).Unlock(hctx))
	}
	r.flush()

	values, _ := r.collect()
	require.Equal(t, started(map[string]float64{
		waitDuration + "{fairlock.lock.group=invoice,fairlock.lock.outcome=fresh}":    2,
		grants + "{fairlock.lock.group=invoice,fairlock.lock.outcome=fresh}":          2,
		"fairlock.lock.waiting{fairlock.lock.group=invoice}":                          0,
		"fairlock.lock.holding{fairlock.lock.group=invoice}":                          0,
		holdDuration + "{fairlock.lock.group=invoice,fairlock.lock.outcome=unlocked}": 2,
		with(waitDuration, otel.OutcomeFresh):                                         1,
		with(grants, otel.OutcomeFresh):                                               1,
		waiting:                                                                       0,
		holding:                                                                       0,
		with(holdDuration, otel.OutcomeUnlocked):                                      1,
	}, "fairlock.lock.group=invoice"), values)
	var grouped int
	for _, s := range r.lockSpans() {
		if slices.Contains(s.Attributes(), attribute.String("fairlock.lock.group", "invoice")) {
			grouped++
		}
	}
	require.Equal(t, 2, grouped)
}

// TestTheCountersReturnToZeroAfterAChurn has goroutines on two Clients
// lock, re-enter, try and give up on one lock at once: when all have
// returned, nothing is counted as waiting or holding, every grant but a
// re-entry has its hold, and the Observer keeps no span.
func TestTheCountersReturnToZeroAfterAChurn(t *testing.T) {
	t.Parallel()
	r := newRig(t, redistest.SharedAddr())
	mutexes := []*fairlock.Mutex{r.client().Mutex("churn"), r.client().Mutex("churn")}
	var wg sync.WaitGroup
	for g := range 8 {
		m := mutexes[g%2]
		wg.Go(func() {
			for i := range 10 {
				// A third of the calls are TryLocks, a third wait up to
				// 30ms, a third give up after 1ms unless granted sooner.
				wait := 30 * time.Millisecond
				if i%3 == 1 {
					wait = time.Millisecond
				}
				ctx, cancel := context.WithTimeout(context.Background(), wait)
				var hctx context.Context
				var err error
				if i%3 == 0 {
					hctx, err = m.TryLock(ctx)
				} else {
					hctx, err = m.Lock(ctx)
				}
				cancel()
				if err != nil {
					continue
				}
				if inner, err := m.Lock(hctx); err == nil {
					assert.NoError(t, m.Unlock(inner))
				}
				assert.NoError(t, m.Unlock(hctx))
			}
		})
	}
	wg.Wait()
	r.flush()

	values, _ := r.collect()
	require.Equal(t, 0.0, values[waiting])
	require.Equal(t, 0.0, values[holding])
	require.Zero(t, otel.Waiting(r.obs))
	var calls, ended, granted, held float64
	for k, v := range values {
		switch {
		case strings.HasPrefix(k, waitDuration):
			calls += v
		case strings.HasPrefix(k, giveUps):
			ended += v
		case strings.HasPrefix(k, grants) && k != with(grants, otel.OutcomeReentry):
			granted += v
		case strings.HasPrefix(k, holdDuration):
			held += v
		}
	}
	require.Positive(t, granted)
	require.Equal(t, granted, held, "every hold granted ended: %v", values)
	require.Equal(t, calls, granted+values[with(grants, otel.OutcomeReentry)]+ended, "every call ended once: %v", values)
}

// TestTheLibraryDoesNotDependOnOpenTelemetry reads fairlock's go.mod:
// only this module brings OpenTelemetry in.
func TestTheLibraryDoesNotDependOnOpenTelemetry(t *testing.T) {
	t.Parallel()
	mod, err := os.ReadFile(filepath.Join("..", "go.mod"))
	require.NoError(t, err)
	require.Contains(t, string(mod), "module github.com/fairlock/fairlock\n")
	require.NotContains(t, string(mod), "opentelemetry")
}

func TestEveryCounterStartsAtZeroBeforeItsFirstEvent(t *testing.T) {
	t.Parallel()
	t.Run("no lock attribute: at NewObserver", func(t *testing.T) {
		t.Parallel()
		r := newRig(t, redistest.SharedAddr())
		values, _ := r.collect()
		require.Equal(t, started(nil), values, "every counter, every outcome, before any call")
	})
	t.Run("a lock attribute: at the first call of a lock that has it", func(t *testing.T) {
		t.Parallel()
		r := newRig(t, redistest.SharedAddr(), otel.WithLockAttribute(group))
		values, _ := r.collect()
		require.Empty(t, values, "no attribute is known before a call")
		ctx := context.Background()
		holder := r.plain().Mutex("invoice:1")
		hctx, err := holder.Lock(ctx)
		require.NoError(t, err)
		_, err = r.client().Mutex("invoice:1").TryLock(ctx)
		require.ErrorIs(t, err, fairlock.ErrLocked)
		require.NoError(t, holder.Unlock(hctx))
		r.flush()

		values, _ = r.collect()
		want := zeros("fairlock.lock.group=invoice") // no lock without it was used
		maps.Copy(want, map[string]float64{
			waitDuration + "{fairlock.lock.group=invoice,fairlock.lock.outcome=locked}": 1,
			giveUps + "{fairlock.lock.group=invoice,fairlock.lock.outcome=locked}":      1,
		})
		require.Equal(t, want, values)
	})
}

// TestALockThatGivesUpWhileRedisIsPausedIsUnavailableNotAGiveUp pauses a
// server of the test's own while a Lock call waits in line on it, and
// the caller gives up.
func TestALockThatGivesUpWhileRedisIsPausedIsUnavailableNotAGiveUp(t *testing.T) {
	t.Parallel()
	srv, err := redistest.Start()
	require.NoError(t, err)
	t.Cleanup(srv.Stop)
	r := newRig(t, srv.Addr)
	ctx := context.Background()
	holder := r.plain().Mutex("paused")
	hctx, err := holder.Lock(ctx)
	require.NoError(t, err)
	lctx, giveUp := context.WithCancel(ctx)
	defer giveUp()
	w := lockAsync(lctx, r.client().Mutex("paused"))
	r.awaitQueued()
	resume := redistest.Pause(t, srv.Client(t))
	giveUp() // as a deadline would
	err = await(t, w).err
	resume()
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorIs(t, err, fairlock.ErrUnavailable)
	require.NoError(t, holder.Unlock(hctx))

	values, _ := r.collect()
	require.Equal(t, started(map[string]float64{
		with(waitDuration, otel.OutcomeUnavailable): 1,
		with(giveUps, otel.OutcomeUnavailable):      1,
	}), values, "not a give-up")
	spans := r.lockSpans()
	require.Len(t, spans, 1)
	require.Contains(t, spans[0].Attributes(), otel.OutcomeKey.String(otel.OutcomeUnavailable))
	require.Equal(t, codes.Error, spans[0].Status().Code, "an outage is an error of the lock")
}
