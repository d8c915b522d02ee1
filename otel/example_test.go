package otel_test

import (
	"context"
	"fmt"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/fairlock/fairlock/otel"
)

// redisAddr is the address of the Redis the example uses; in your code,
// the address of yours.
func redisAddr() string { return redistest.SharedAddr() }

// Example exports a Client's metrics to Prometheus, labelled by the part
// of each lock's name before the ':'.
func Example() {
	ctx := context.Background()
	registry := prometheus.NewRegistry() // serve it with promhttp.HandlerFor(registry, ...)
	exporter, err := otelprom.New(otelprom.WithRegisterer(registry))
	if err != nil {
		panic(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	defer mp.Shutdown(ctx)

	observer, err := otel.NewObserver(
		otel.WithMeterProvider(mp),
		otel.WithLockAttribute(func(name string) (attribute.KeyValue, bool) {
			kind, _, ok := strings.Cut(name, ":") // "invoice:2026-11" -> "invoice"
			return attribute.String("fairlock.lock.kind", kind), ok
		}),
	)
	if err != nil {
		panic(err)
	}

	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()
	locks, err := fairlock.New(rdb, fairlock.WithPrefix("example-otel"), fairlock.WithObserver(observer))
	if err != nil {
		panic(err)
	}
	defer locks.Close()

	m := locks.Mutex("invoice:2026-11")
	hctx, err := m.Lock(ctx)
	if err != nil {
		panic(err)
	}
	if err := m.Unlock(hctx); err != nil {
		panic(err)
	}
	// The Observer hears of the calls on a goroutine of the Client, after
	// them: Close delivers the events it has not seen yet.
	if err := locks.Close(); err != nil {
		panic(err)
	}

	families, err := registry.Gather()
	if err != nil {
		panic(err)
	}
	for _, f := range families {
		if !strings.HasPrefix(f.GetName(), "fairlock_") {
			continue
		}
		for _, metric := range f.GetMetric() {
			var labels []string
			for _, l := range metric.GetLabel() {
				if strings.HasPrefix(l.GetName(), "fairlock_") {
					labels = append(labels, l.GetName()+"="+l.GetValue())
				}
			}
			// A counter's or gauge's value, a histogram's count.
			value := metric.GetCounter().GetValue() + metric.GetGauge().GetValue() + float64(metric.GetHistogram().GetSampleCount())
			fmt.Println(f.GetName(), labels, value)
		}
	}
	// Output:
	// fairlock_lock_give_ups_total [fairlock_lock_kind=invoice fairlock_lock_outcome=closed] 0
	// fairlock_lock_give_ups_total [fairlock_lock_kind=invoice fairlock_lock_outcome=error] 0
	// fairlock_lock_give_ups_total [fairlock_lock_kind=invoice fairlock_lock_outcome=gave_up] 0
	// fairlock_lock_give_ups_total [fairlock_lock_kind=invoice fairlock_lock_outcome=locked] 0
	// fairlock_lock_give_ups_total [fairlock_lock_kind=invoice fairlock_lock_outcome=unavailable] 0
	// fairlock_lock_grants_total [fairlock_lock_kind=invoice fairlock_lock_outcome=fresh] 1
	// fairlock_lock_grants_total [fairlock_lock_kind=invoice fairlock_lock_outcome=hand_over] 0
	// fairlock_lock_grants_total [fairlock_lock_kind=invoice fairlock_lock_outcome=reentry] 0
	// fairlock_lock_hold_duration_seconds [fairlock_lock_kind=invoice fairlock_lock_outcome=unlocked] 1
	// fairlock_lock_holding [fairlock_lock_kind=invoice] 0
	// fairlock_lock_leases_lost_total [fairlock_lock_kind=invoice fairlock_lock_outcome=lease_lost] 0
	// fairlock_lock_leases_lost_total [fairlock_lock_kind=invoice fairlock_lock_outcome=lease_ran_out] 0
	// fairlock_lock_renewal_failures_total [fairlock_lock_kind=invoice] 0
	// fairlock_lock_wait_duration_seconds [fairlock_lock_kind=invoice fairlock_lock_outcome=fresh] 1
	// fairlock_lock_waiting [fairlock_lock_kind=invoice] 0
}

// ExampleWithAgeGauges shows, while a lock is held, how long this process
// has held it, by the lock's name.
func ExampleWithAgeGauges() {
	ctx := context.Background()
	registry := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(registry))
	if err != nil {
		panic(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	defer mp.Shutdown(ctx)
	observer, err := otel.NewObserver(otel.WithMeterProvider(mp), otel.WithAgeGauges())
	if err != nil {
		panic(err)
	}

	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()
	// WithObserverQueue(0) delivers each event before the call returns,
	// so that the gauge below shows the hold at once; by default events
	// reach the Observer a moment later, off the lock path.
	locks, err := fairlock.New(rdb, fairlock.WithPrefix("example-otel-ages"), fairlock.WithObserver(observer),
		fairlock.WithObserverQueue(0))
	if err != nil {
		panic(err)
	}
	defer locks.Close()

	m := locks.Mutex("report:daily")
	hctx, err := m.Lock(ctx)
	if err != nil {
		panic(err)
	}
	defer m.Unlock(hctx)

	families, err := registry.Gather()
	if err != nil {
		panic(err)
	}
	for _, f := range families {
		if !strings.HasSuffix(f.GetName(), "_age_seconds") {
			continue
		}
		for _, metric := range f.GetMetric() {
			for _, l := range metric.GetLabel() {
				if l.GetName() == "fairlock_lock_name" {
					// The value is the seconds since the grant.
					fmt.Println(f.GetName(), l.GetValue(), metric.GetGauge().GetValue() >= 0)
				}
			}
		}
	}
	// Output:
	// fairlock_lock_hold_age_seconds report:daily true
}
