package otel

import (
	global "go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// An Option configures NewObserver.
type Option interface {
	apply(*config)
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// config is what the options set.
type config struct {
	meters  metric.MeterProvider
	tracers trace.TracerProvider
	lock    func(name string) (attribute.KeyValue, bool)
	ages    bool
}

// defaults returns the configuration without options: the global
// providers, and no attribute for the lock's name.
func defaults() config {
	return config{meters: global.GetMeterProvider(), tracers: global.GetTracerProvider()}
}

// WithMeterProvider sets the MeterProvider the instruments are created
// with. Default (and for a nil one): the global MeterProvider
// (go.opentelemetry.io/otel.GetMeterProvider) at NewObserver.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return optionFunc(func(c *config) {
		if mp != nil {
			c.meters = mp
		}
	})
}

// WithTracerProvider sets the TracerProvider the spans of Lock calls are
// started with. Default (and for a nil one): the global TracerProvider
// (go.opentelemetry.io/otel.GetTracerProvider) at NewObserver.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return optionFunc(func(c *config) {
		if tp != nil {
			c.tracers = tp
		}
	})
}

// WithLockAttribute sets how a lock's name becomes an attribute of the
// metrics and spans: f returns the attribute for a name, or false to
// record none for it. Lock names are often unbounded (one per invoice,
// per user), and every distinct attribute value is one more time series,
// so f should map names onto a small set, such as the part before a ':'.
// Default (and for a nil f): no attribute for the lock.
func WithLockAttribute(f func(name string) (attribute.KeyValue, bool)) Option {
	return optionFunc(func(c *config) { c.lock = f })
}

// WithAgeGauges adds two gauges, each with the lock's name as an attribute
// (LockNameKey): fairlock.lock.hold.age, the time since the grant of the
// oldest hold of the lock that this process has, and fairlock.lock.wait.age,
// the time since the oldest Lock call of this process that waits for it
// began (a TryLock does not wait). A lock has a data point while this
// process holds it or waits for it, and none otherwise. A holder that
// never releases shows in them while the waiters behind it pile up, which
// no histogram records until a hand-over ends a wait. Each lock's name is
// a time series of each gauge while it is held or waited for, whatever
// WithLockAttribute says, so they suit processes whose locks in use at
// once are a few thousand at most. Default: no age gauges.
func WithAgeGauges() Option {
	return optionFunc(func(c *config) { c.ages = true })
}
