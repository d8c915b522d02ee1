package otel

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
)

// Prometheus' increase() and rate(), which alerting rules are written
// with, see no rise in a time series whose first sample is its first
// event: a counter that appears at 1 looks unchanged. So each counter is
// set to 0, for every outcome it may have, when the Observer first sees
// a lock with a given attribute (with no WithLockAttribute, at
// NewObserver, since every lock has the same, none): its first event
// then shows as a rise from 0 once the 0 was scraped.

// The outcomes each counter starts at 0 for.
var (
	grantOutcomes  = []string{OutcomeFresh, OutcomeHandOver, OutcomeReentry}
	giveUpOutcomes = []string{OutcomeGaveUp, OutcomeUnavailable, OutcomeClosed, OutcomeLocked, OutcomeError}
	lostOutcomes   = []string{OutcomeLeaseLost, OutcomeLeaseRanOut}
)

// lockKey is the lock attribute of a lock (see lockAttr): kv, or none
// when !ok.
type lockKey struct {
	kv attribute.KeyValue
	ok bool
}

// zero sets the counters of each lock named (lock, and more) to 0 for
// every outcome, the first time a lock with its attribute is seen.
func (o *Observer) zero(ctx context.Context, lock string, more ...string) {
	o.zeroOne(ctx, lock)
	for _, name := range more {
		o.zeroOne(ctx, name)
	}
}

// zeroOne is zero for one lock.
func (o *Observer) zeroOne(ctx context.Context, name string) {
	key := lockKey{}
	if kv, ok := o.lockAttr(name); ok {
		key = lockKey{kv: kv, ok: true}
	}
	if _, done := o.zeroed.Load(key); done {
		return
	}
	if _, done := o.zeroed.LoadOrStore(key, struct{}{}); done {
		return
	}
	for _, outcome := range grantOutcomes {
		o.grants.Add(ctx, 0, o.attrs(name, OutcomeKey.String(outcome)))
	}
	for _, outcome := range giveUpOutcomes {
		o.giveUps.Add(ctx, 0, o.attrs(name, OutcomeKey.String(outcome)))
	}
	for _, outcome := range lostOutcomes {
		o.leasesLost.Add(ctx, 0, o.attrs(name, OutcomeKey.String(outcome)))
	}
	o.renewalFailures.Add(ctx, 0, o.attrs(name))
	o.waiting.Add(ctx, 0, o.attrs(name))
	o.holding.Add(ctx, 0, o.attrs(name))
}
