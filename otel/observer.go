package otel

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/fairlock/fairlock"
)

// ScopeName is the instrumentation scope of the meter and the tracer.
const ScopeName = "github.com/fairlock/fairlock/otel"

// OutcomeKey is the attribute that says how a wait or a hold ended.
const OutcomeKey = attribute.Key("fairlock.lock.outcome")

// The values of OutcomeKey for a wait (fairlock.lock.wait.duration,
// fairlock.lock.grants, fairlock.lock.give_ups).
const (
	OutcomeFresh    = "fresh"     // granted without waiting in line
	OutcomeHandOver = "hand_over" // granted after waiting in line
	OutcomeReentry  = "reentry"   // one more level of a hold
	OutcomeGaveUp   = "gave_up"   // the caller's context ended first, while Redis answered
	// OutcomeUnavailable: the caller's context ended while Redis was not
	// serving the call (fairlock.ErrUnavailable): an outage, not a line
	// too long to wait in.
	OutcomeUnavailable = "unavailable"
	OutcomeClosed      = "closed" // the Client was closed (ErrClosed)
	OutcomeLocked      = "locked" // a TryLock found the lock taken (ErrLocked)
	OutcomeError       = "error"  // any other error
)

// The values of OutcomeKey for a hold (fairlock.lock.hold.duration,
// fairlock.lock.leases_lost); OutcomeClosed too.
const (
	OutcomeUnlocked    = "unlocked"      // its last level was unlocked
	OutcomeLeaseLost   = "lease_lost"    // renewals failed or found it gone
	OutcomeLeaseRanOut = "lease_ran_out" // a fixed lease ran out before Unlock
)

// outcomeOther is the outcome of a kind this package does not know.
const outcomeOther = "other"

// durationBuckets are the advised bucket bounds of the duration
// histograms, in seconds: from a millisecond to five minutes.
var durationBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300}

// handOverBuckets are the advised bucket bounds of the hand-over latency
// histogram, in seconds: from 50µs to a second.
var handOverBuckets = []float64{0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1}

// Observer is a fairlock.Observer that records a Client's events as
// OpenTelemetry metrics and spans. It is safe for concurrent use, and one
// Observer may serve several Clients.
type Observer struct {
	tracer trace.Tracer
	lock   func(name string) (attribute.KeyValue, bool)
	now    func() time.Time // the clock of the age gauges

	waitDuration    metric.Float64Histogram
	holdDuration    metric.Float64Histogram
	handOver        metric.Float64Histogram
	waiting         metric.Int64UpDownCounter
	holding         metric.Int64UpDownCounter
	grants          metric.Int64Counter
	giveUps         metric.Int64Counter
	leasesLost      metric.Int64Counter
	renewalFailures metric.Int64Counter
	holdAge         metric.Float64ObservableGauge // nil without WithAgeGauges
	waitAge         metric.Float64ObservableGauge // nil without WithAgeGauges

	// zeroed holds the lock attributes (see lockAttr) whose counters have
	// been set to 0 for every outcome.
	zeroed sync.Map // of lockKey to struct{}

	mu sync.Mutex
	// calls holds each Lock call that is waiting, by Event.Call: added
	// at its EventWaitStarted, removed at its EventGranted or EventWaitEnded (fairlock
	// sends exactly one of them per EventWaitStarted). The waiting counter
	// counts its entries. Guarded by mu.
	calls map[string]waiter
	// holds holds the time of the grant of each hold, by its call and
	// lock, while it lasts; nil without WithAgeGauges. Guarded by mu.
	holds map[holdKey]time.Time
	// ended holds the holds that ended before their grant was reported
	// (a Close or a lost lease racing with the EventGranted event), until it
	// is; nil without WithAgeGauges. Guarded by mu.
	ended map[holdKey]struct{}
}

// waiter is a Lock call that waits: its span, when it began, and the
// locks it waits for.
type waiter struct {
	span  trace.Span
	since time.Time
	locks []string
}

var _ fairlock.Observer = (*Observer)(nil)

// NewObserver returns an Observer that creates its instruments with the
// MeterProvider and its spans with the TracerProvider of the options. It
// fails when an instrument cannot be created.
func NewObserver(opts ...Option) (*Observer, error) {
	c := defaults()
	for _, opt := range opts {
		opt.apply(&c)
	}
	meter := c.meters.Meter(ScopeName)
	o := &Observer{
		tracer: c.tracers.Tracer(ScopeName),
		lock:   c.lock,
		now:    time.Now,
		calls:  make(map[string]waiter),
	}
	var errs, err error
	o.waitDuration, err = meter.Float64Histogram("fairlock.lock.wait.duration", metric.WithUnit("s"),
		metric.WithDescription("Time from a Lock, TryLock or re-entry call to its grant or its end without one."),
		metric.WithExplicitBucketBoundaries(durationBuckets...))
	errs = errors.Join(errs, err)
	o.holdDuration, err = meter.Float64Histogram("fairlock.lock.hold.duration", metric.WithUnit("s"),
		metric.WithDescription("Time from a grant to the end of its hold."),
		metric.WithExplicitBucketBoundaries(durationBuckets...))
	errs = errors.Join(errs, err)
	o.handOver, err = meter.Float64Histogram("fairlock.lock.handover.duration", metric.WithUnit("s"),
		metric.WithDescription("Time from a hand-over in Redis to its push reaching the new holder's Client (estimated; pushed hand-overs only)."),
		metric.WithExplicitBucketBoundaries(handOverBuckets...))
	errs = errors.Join(errs, err)
	o.waiting, err = meter.Int64UpDownCounter("fairlock.lock.waiting", metric.WithUnit("{call}"),
		metric.WithDescription("Lock calls waiting for a grant."))
	errs = errors.Join(errs, err)
	o.holding, err = meter.Int64UpDownCounter("fairlock.lock.holding", metric.WithUnit("{hold}"),
		metric.WithDescription("Holds granted and not yet ended."))
	errs = errors.Join(errs, err)
	o.grants, err = meter.Int64Counter("fairlock.lock.grants", metric.WithUnit("{grant}"),
		metric.WithDescription("Calls granted the lock, fresh, by hand-over or by re-entry."))
	errs = errors.Join(errs, err)
	o.giveUps, err = meter.Int64Counter("fairlock.lock.give_ups", metric.WithUnit("{call}"),
		metric.WithDescription("Calls that ended without the lock."))
	errs = errors.Join(errs, err)
	o.leasesLost, err = meter.Int64Counter("fairlock.lock.leases_lost", metric.WithUnit("{hold}"),
		metric.WithDescription("Holds whose lease was lost or ran out before Unlock."))
	errs = errors.Join(errs, err)
	o.renewalFailures, err = meter.Int64Counter("fairlock.lock.renewal_failures", metric.WithUnit("{renewal}"),
		metric.WithDescription("Renewals of a hold that failed."))
	errs = errors.Join(errs, err)
	if c.ages {
		errs = errors.Join(errs, o.ageGauges(meter))
	}
	if errs != nil {
		return nil, errs
	}
	if o.lock == nil {
		// Every lock has the same attributes, none: its counters start
		// at 0 now.
		o.zero(context.Background(), "")
	}
	return o, nil
}

// Observe records e. Kinds other than those of a wait or a hold
// (EventPolled, EventPrimaryMoved, and kinds added later) are ignored.
func (o *Observer) Observe(ctx context.Context, e fairlock.Event) {
	switch e.Kind {
	case fairlock.EventWaitStarted:
		o.zero(ctx, e.Lock, e.Locks...)
		o.waitStarted(ctx, e)
	case fairlock.EventQueued:
		if span := o.span(e.Call); span != nil {
			span.AddEvent("queued", trace.WithTimestamp(e.Answered))
		}
	case fairlock.EventGranted, fairlock.EventWaitEnded:
		o.waitDone(ctx, e)
	case fairlock.EventHoldEnded:
		o.holdEnded(ctx, e)
	case fairlock.EventRenewalFailed:
		o.renewalFailures.Add(ctx, 1, o.attrs(e.Lock))
	}
}

// waits says whether e belongs to a call that waits in line: a Lock call,
// not a TryLock nor a re-entry.
func waits(e fairlock.Event) bool { return e.Wait && e.Call != "" }

// waitStarted starts the span of a waiting Lock call and counts it.
func (o *Observer) waitStarted(ctx context.Context, e fairlock.Event) {
	if !waits(e) {
		return
	}
	var attrs []attribute.KeyValue
	if kv, ok := o.lockAttr(e.Lock); ok {
		attrs = append(attrs, kv)
	}
	// The span starts when the call did, not when the event reached the
	// Observer, which is later (fairlock delivers events off the lock
	// path); it ends at the event that ended the wait.
	_, span := o.tracer.Start(ctx, "fairlock.Lock", trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(attrs...), trace.WithTimestamp(e.At))
	o.mu.Lock()
	_, dup := o.calls[e.Call]
	if !dup {
		o.calls[e.Call] = waiter{span: span, since: o.now(), locks: names(e)}
	}
	o.mu.Unlock()
	if dup { // never sent twice by fairlock; counted once all the same
		span.End()
		return
	}
	o.waiting.Add(ctx, 1, o.attrs(e.Lock))
}

// names returns the names of the locks of e: its Locks, or its Lock.
func names(e fairlock.Event) []string {
	if len(e.Locks) > 0 {
		return e.Locks
	}
	return []string{e.Lock}
}

// span returns the span of a waiting call, nil for none.
func (o *Observer) span(call string) trace.Span {
	if call == "" {
		return nil
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.calls[call].span
}

// take removes the span of a waiting call and returns it, nil for none.
func (o *Observer) take(call string) trace.Span {
	if call == "" {
		return nil
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	w, ok := o.calls[call]
	if ok {
		delete(o.calls, call)
	}
	return w.span
}

// waitDone records the end of a call's wait: a grant or an end without
// one.
func (o *Observer) waitDone(ctx context.Context, e fairlock.Event) {
	outcome := waitOutcome(ctx, e)
	attrs, lockOnly := o.attrs(e.Lock, OutcomeKey.String(outcome)), o.attrs(e.Lock)
	o.waitDuration.Record(ctx, e.Waited.Seconds(), attrs)
	if e.Kind == fairlock.EventGranted {
		o.grants.Add(ctx, 1, attrs)
		if e.HandOver > 0 {
			o.handOver.Record(ctx, e.HandOver.Seconds(), lockOnly)
		}
		if e.Grant != fairlock.GrantReentry {
			// One hold of each lock; each ends with an EventHoldEnded of its own.
			for _, name := range names(e) {
				o.holding.Add(ctx, 1, o.attrs(name))
			}
			o.held(e)
		}
	} else {
		o.giveUps.Add(ctx, 1, attrs)
	}
	span := o.take(e.Call)
	if span == nil {
		return
	}
	o.waiting.Add(ctx, -1, lockOnly)
	span.SetAttributes(OutcomeKey.String(outcome))
	if e.Kind == fairlock.EventGranted {
		granted := []attribute.KeyValue{attribute.Int64("fairlock.lock.token", e.Token)}
		if e.HandOver > 0 {
			granted = append(granted, attribute.Float64("fairlock.lock.handover.duration", e.HandOver.Seconds()))
		}
		span.AddEvent("granted", trace.WithAttributes(granted...), trace.WithTimestamp(e.At))
	} else if outcome != OutcomeGaveUp && e.Err != nil {
		span.RecordError(e.Err, trace.WithTimestamp(e.At))
		span.SetStatus(codes.Error, e.Err.Error())
	}
	span.End(trace.WithTimestamp(e.At))
}

// waitOutcome returns the outcome of an EventGranted or EventWaitEnded event of a
// call made with ctx. A context error counts as giving up only when ctx
// itself ended: fairlock's ctx says whether it had when the call ended.
func waitOutcome(ctx context.Context, e fairlock.Event) string {
	if e.Kind == fairlock.EventGranted {
		switch e.Grant {
		case fairlock.GrantFresh:
			return OutcomeFresh
		case fairlock.GrantHandOver:
			return OutcomeHandOver
		case fairlock.GrantReentry:
			return OutcomeReentry
		}
		return outcomeOther
	}
	switch err := e.Err; {
	case errors.Is(err, fairlock.ErrClosed):
		return OutcomeClosed
	case errors.Is(err, fairlock.ErrLocked):
		return OutcomeLocked
	case ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)):
		if errors.Is(err, fairlock.ErrUnavailable) {
			return OutcomeUnavailable
		}
		return OutcomeGaveUp
	}
	return OutcomeError
}

// holdEnded records the end of a hold.
func (o *Observer) holdEnded(ctx context.Context, e fairlock.Event) {
	outcome := outcomeOther
	switch e.End {
	case fairlock.EndUnlocked:
		outcome = OutcomeUnlocked
	case fairlock.EndLeaseLost:
		outcome = OutcomeLeaseLost
	case fairlock.EndLeaseRanOut:
		outcome = OutcomeLeaseRanOut
	case fairlock.EndClosed:
		outcome = OutcomeClosed
	}
	attrs := o.attrs(e.Lock, OutcomeKey.String(outcome))
	o.holdDuration.Record(ctx, e.Held.Seconds(), attrs)
	o.holding.Add(ctx, -1, o.attrs(e.Lock))
	o.unheld(e)
	if e.End == fairlock.EndLeaseLost || e.End == fairlock.EndLeaseRanOut {
		o.leasesLost.Add(ctx, 1, attrs)
	}
}

// lockAttr returns the attribute of a lock's name, if any.
func (o *Observer) lockAttr(name string) (attribute.KeyValue, bool) {
	if o.lock == nil {
		return attribute.KeyValue{}, false
	}
	return o.lock(name)
}

// attrs returns the attributes of a measurement of lock: its lock
// attribute, if any, and extra.
func (o *Observer) attrs(lock string, extra ...attribute.KeyValue) metric.MeasurementOption {
	if kv, ok := o.lockAttr(lock); ok {
		extra = append(extra, kv)
	}
	return metric.WithAttributes(extra...)
}
