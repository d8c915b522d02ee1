package otel

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/fairlock/fairlock"
)

// LockNameKey is the attribute of the age gauges (WithAgeGauges) that
// names the lock.
const LockNameKey = attribute.Key("fairlock.lock.name")

// The age gauges say, per lock, how long this process has held it and how
// long its oldest call has waited for it. A holder that never releases
// shows in them while it holds: no hand-over ends a wait, so the wait
// histogram records nothing.

// holdKey names one hold: the call that took it, and its lock.
type holdKey struct{ call, lock string }

// ageGauges creates the age gauges and the callback that reads them.
func (o *Observer) ageGauges(meter metric.Meter) error {
	var errs, err error
	o.holdAge, err = meter.Float64ObservableGauge("fairlock.lock.hold.age", metric.WithUnit("s"),
		metric.WithDescription("Time since the grant of the oldest hold of the lock that this process has."))
	errs = errors.Join(errs, err)
	o.waitAge, err = meter.Float64ObservableGauge("fairlock.lock.wait.age", metric.WithUnit("s"),
		metric.WithDescription("Time since the oldest Lock call of this process that waits for the lock began."))
	errs = errors.Join(errs, err)
	if errs != nil {
		return errs
	}
	o.holds, o.ended = make(map[holdKey]time.Time), make(map[holdKey]struct{})
	_, err = meter.RegisterCallback(o.observeAges, o.holdAge, o.waitAge)
	return err
}

// held records the grant of the holds of e, an EventGranted event of a fresh
// grant or a hand-over, when the age gauges are on.
func (o *Observer) held(e fairlock.Event) {
	if e.Call == "" {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.holds == nil {
		return
	}
	now := o.now()
	for _, name := range names(e) {
		k := holdKey{call: e.Call, lock: name}
		if _, gone := o.ended[k]; gone {
			delete(o.ended, k)
			continue
		}
		o.holds[k] = now
	}
}

// unheld records the end of the hold of e, an EventHoldEnded event, when the
// age gauges are on. A hold that ends before its grant was reported is
// remembered until it is.
func (o *Observer) unheld(e fairlock.Event) {
	if e.Call == "" {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.holds == nil {
		return
	}
	k := holdKey{call: e.Call, lock: e.Lock}
	if _, ok := o.holds[k]; ok {
		delete(o.holds, k)
		return
	}
	o.ended[k] = struct{}{}
}

// observeAges reports the age gauges: for each lock held or waited for,
// the age of its oldest hold and of its oldest waiting call.
func (o *Observer) observeAges(_ context.Context, obs metric.Observer) error {
	holds, waits := map[string]time.Time{}, map[string]time.Time{}
	o.mu.Lock()
	now := o.now()
	for k, at := range o.holds {
		oldest(holds, k.lock, at)
	}
	for _, w := range o.calls {
		for _, name := range w.locks {
			oldest(waits, name, w.since)
		}
	}
	o.mu.Unlock()
	for name, at := range holds {
		obs.ObserveFloat64(o.holdAge, max(now.Sub(at), 0).Seconds(), o.named(name))
	}
	for name, at := range waits {
		obs.ObserveFloat64(o.waitAge, max(now.Sub(at), 0).Seconds(), o.named(name))
	}
	return nil
}

// oldest sets m[name] to at, unless it holds an earlier time.
func oldest(m map[string]time.Time, name string, at time.Time) {
	if prev, ok := m[name]; !ok || at.Before(prev) {
		m[name] = at
	}
}

// named returns the attributes of an age gauge of a lock: its name, and
// its lock attribute if any.
func (o *Observer) named(name string) metric.MeasurementOption {
	return o.attrs(name, LockNameKey.String(name))
}
