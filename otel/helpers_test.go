package otel_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/otel"
)

// rig is one test's Observer, with an in-memory metric reader and span
// recorder, and the Clients it made on one Redis under a prefix of the
// test's own.
type rig struct {
	t      *testing.T
	reader *sdkmetric.ManualReader
	spans  *tracetest.SpanRecorder
	tp     *sdktrace.TracerProvider
	obs    *otel.Observer
	// registry is a Prometheus registry the metrics are exported to too.
	registry *prometheus.Registry
	rdb      *redis.Client
	prefix   string
	clients  []*fairlock.Client // the Clients the rig made
}

var prefixes atomic.Int64

// newRig returns a rig on the Redis at addr, its Observer made with opts.
func newRig(t *testing.T, addr string, opts ...otel.Option) *rig {
	t.Helper()
	r := &rig{
		t:      t,
		reader: sdkmetric.NewManualReader(),
		spans:  tracetest.NewSpanRecorder(),
		rdb:    redis.NewClient(&redis.Options{Addr: addr}),
		prefix: fmt.Sprintf("otel-test-%d", prefixes.Add(1)),
	}
	t.Cleanup(func() { _ = r.rdb.Close() })
	r.registry = prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(r.registry))
	require.NoError(t, err)
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r.reader), sdkmetric.WithReader(exporter))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	r.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(r.spans))
	t.Cleanup(func() { _ = r.tp.Shutdown(context.Background()) })
	r.obs, err = otel.NewObserver(append([]otel.Option{otel.WithMeterProvider(mp), otel.WithTracerProvider(r.tp)}, opts...)...)
	require.NoError(t, err)
	return r
}

// client returns a Client that reports to the rig's Observer.
func (r *rig) client(opts ...fairlock.Option) *fairlock.Client {
	return r.plain(append([]fairlock.Option{fairlock.WithObserver(r.obs)}, opts...)...)
}

// plain returns a Client without an Observer.
func (r *rig) plain(opts ...fairlock.Option) *fairlock.Client {
	r.t.Helper()
	c, err := fairlock.New(r.rdb, append([]fairlock.Option{fairlock.WithPrefix(r.prefix)}, opts...)...)
	require.NoError(r.t, err)
	r.t.Cleanup(func() { _ = c.Close() })
	r.clients = append(r.clients, c)
	return c
}

// flush closes every Client the rig made: each delivers the events it
// still queues to the Observer before Close returns.
func (r *rig) flush() {
	r.t.Helper()
	for _, c := range r.clients {
		require.NoError(r.t, c.Close())
		require.Zero(r.t, c.DroppedEvents(), "no event dropped")
	}
}

// units are the units of the instruments.
var units = map[string]string{
	"fairlock.lock.wait.duration":     "s",
	"fairlock.lock.hold.duration":     "s",
	"fairlock.lock.handover.duration": "s",
	"fairlock.lock.waiting":           "{call}",
	"fairlock.lock.holding":           "{hold}",
	"fairlock.lock.grants":            "{grant}",
	"fairlock.lock.give_ups":          "{call}",
	"fairlock.lock.leases_lost":       "{hold}",
	"fairlock.lock.renewal_failures":  "{renewal}",
	"fairlock.lock.hold.age":          "s",
	"fairlock.lock.wait.age":          "s",
}

// started returns values with the data points that every counter starts
// with added (see zeros), for no lock attribute, and for each attribute
// named in attrs ("key=value").
func started(values map[string]float64, attrs ...string) map[string]float64 {
	out := zeros("")
	for _, attr := range attrs {
		maps.Copy(out, zeros(attr))
	}
	maps.Copy(out, values)
	return out
}

// zeros returns the data points that the counters of a lock attribute
// (attr: "key=value", or "" for none) start with: 0 for every outcome.
func zeros(attr string) map[string]float64 {
	name := func(instrument string, kvs ...string) string {
		if attr != "" {
			kvs = append(kvs, attr)
		}
		slices.Sort(kvs)
		return instrument + "{" + strings.Join(kvs, ",") + "}"
	}
	out := map[string]float64{
		name("fairlock.lock.renewal_failures"): 0,
		name("fairlock.lock.waiting"):          0,
		name("fairlock.lock.holding"):          0,
	}
	for instrument, outcomes := range map[string][]string{
		"fairlock.lock.grants":      {otel.OutcomeFresh, otel.OutcomeHandOver, otel.OutcomeReentry},
		"fairlock.lock.give_ups":    {otel.OutcomeGaveUp, otel.OutcomeUnavailable, otel.OutcomeClosed, otel.OutcomeLocked, otel.OutcomeError},
		"fairlock.lock.leases_lost": {otel.OutcomeLeaseLost, otel.OutcomeLeaseRanOut},
	} {
		for _, outcome := range outcomes {
			out[name(instrument, string(otel.OutcomeKey)+"="+outcome)] = 0
		}
	}
	return out
}

// collect reads every instrument: for each data point, its instrument's
// name and attributes ("name{k=v,...}", attributes sorted) mapped to its
// value (a histogram's: its count), and the histograms' sums.
func (r *rig) collect() (values map[string]float64, sums map[string]float64) {
	r.t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(r.t, r.reader.Collect(context.Background(), &rm))
	values, sums = map[string]float64{}, map[string]float64{}
	for _, sm := range rm.ScopeMetrics {
		require.Equal(r.t, otel.ScopeName, sm.Scope.Name)
		for _, m := range sm.Metrics {
			require.Equal(r.t, units[m.Name], m.Unit, m.Name)
			require.NotEmpty(r.t, m.Description, m.Name)
			switch data := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range data.DataPoints {
					values[key(m.Name, p.Attributes)] = float64(p.Value)
				}
			case metricdata.Histogram[float64]:
				for _, p := range data.DataPoints {
					values[key(m.Name, p.Attributes)] = float64(p.Count)
					sums[key(m.Name, p.Attributes)] = p.Sum
				}
			case metricdata.Gauge[float64]:
				for _, p := range data.DataPoints {
					values[key(m.Name, p.Attributes)] = p.Value
				}
			default:
				r.t.Fatalf("%s: unexpected data %T", m.Name, m.Data)
			}
		}
	}
	return values, sums
}

// promNames returns the names of the Prometheus metric families the
// exporter makes of the rig's metrics.
func (r *rig) promNames() []string {
	r.t.Helper()
	families, err := r.registry.Gather()
	require.NoError(r.t, err)
	var out []string
	for _, f := range families {
		out = append(out, f.GetName())
	}
	return out
}

// bounds returns the bucket bounds of a histogram's first data point.
func (r *rig) bounds(name string) []float64 {
	r.t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(r.t, r.reader.Collect(context.Background(), &rm))
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if h, ok := m.Data.(metricdata.Histogram[float64]); ok && m.Name == name && len(h.DataPoints) > 0 {
				return h.DataPoints[0].Bounds
			}
		}
	}
	r.t.Fatalf("no data point of %s", name)
	return nil
}

// key names a data point: its instrument's name and its attributes,
// sorted by key.
func key(name string, attrs attribute.Set) string {
	var parts []string
	for _, kv := range attrs.ToSlice() {
		parts = append(parts, string(kv.Key)+"="+kv.Value.String())
	}
	return name + "{" + strings.Join(parts, ",") + "}"
}

// awaitValue waits until the data point named k has the value want.
func (r *rig) awaitValue(k string, want float64) {
	r.t.Helper()
	var got map[string]float64
	require.Eventually(r.t, func() bool {
		got, _ = r.collect()
		v, ok := got[k]
		return ok && v == want
	}, 10*time.Second, 5*time.Millisecond, "%s never reached %v; metrics: %v", k, want, got)
}

// awaitPoint waits until the data point named k exists.
func (r *rig) awaitPoint(k string) {
	r.t.Helper()
	var got map[string]float64
	require.Eventually(r.t, func() bool {
		got, _ = r.collect()
		_, ok := got[k]
		return ok
	}, 10*time.Second, 5*time.Millisecond, "no data point %s; metrics: %v", k, got)
}

// awaitQueued waits until a Lock call's span has its "queued" event.
func (r *rig) awaitQueued() {
	r.t.Helper()
	require.Eventually(r.t, func() bool {
		for _, s := range r.spans.Started() {
			if s.Name() == "fairlock.Lock" && slices.Contains(eventNames(s), "queued") {
				return true
			}
		}
		return false
	}, 10*time.Second, 5*time.Millisecond, "no Lock call joined the line")
}

// lockSpans returns the ended spans named "fairlock.Lock".
func (r *rig) lockSpans() []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range r.spans.Ended() {
		if s.Name() == "fairlock.Lock" {
			out = append(out, s)
		}
	}
	return out
}

// eventNames returns the names of a span's events.
func eventNames(s sdktrace.ReadOnlySpan) []string {
	var out []string
	for _, e := range s.Events() {
		out = append(out, e.Name)
	}
	return out
}

// result is what a Lock call returned.
type result struct {
	ctx context.Context
	err error
}

// locker is what lockAsync calls: a Mutex or a MultiLock.
type locker interface {
	Lock(ctx context.Context) (context.Context, error)
}

// lockAsync calls m.Lock(ctx) on a goroutine of its own.
func lockAsync(ctx context.Context, m locker) <-chan result {
	ch := make(chan result, 1)
	go func() {
		hctx, err := m.Lock(ctx)
		ch <- result{hctx, err}
	}()
	return ch
}

// await returns the result of a lockAsync, failing after 10 s.
func await(t *testing.T, ch <-chan result) result {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("Lock did not return within 10s")
		return result{}
	}
}
