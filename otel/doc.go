// Package otel records the events of a fairlock Client as OpenTelemetry
// metrics and spans: an Observer to set with fairlock.WithObserver.
//
//	obs, err := otel.NewObserver(otel.WithMeterProvider(mp), otel.WithTracerProvider(tp))
//	...
//	locks, err := fairlock.New(rdb, fairlock.WithObserver(obs))
//
// It is a module of its own (github.com/fairlock/fairlock/otel), so that
// fairlock itself does not depend on OpenTelemetry.
//
// Metrics (instrumentation scope ScopeName):
//
//   - fairlock.lock.wait.duration (histogram, s): the time from a Lock,
//     TryLock or re-entry call to its grant or its end without one, with
//     OutcomeKey: OutcomeFresh, OutcomeHandOver, OutcomeReentry,
//     OutcomeGaveUp (the caller's context ended while Redis answered),
//     OutcomeUnavailable (it ended while Redis did not serve the call:
//     fairlock.ErrUnavailable), OutcomeClosed, OutcomeLocked (a TryLock
//     found the lock taken) or OutcomeError.
//   - fairlock.lock.hold.duration (histogram, s): the time from a grant to
//     the end of its hold, with OutcomeKey: OutcomeUnlocked,
//     OutcomeLeaseLost, OutcomeLeaseRanOut or OutcomeClosed.
//   - fairlock.lock.waiting (up-down counter, {call}): Lock calls waiting
//     for a grant. A TryLock and a re-entry do not wait in line and are
//     not counted.
//   - fairlock.lock.holding (up-down counter, {hold}): holds granted and
//     not yet ended (a re-entry is a level of a hold, not a hold; a
//     MultiLock's grant is a hold of each of its locks).
//   - fairlock.lock.grants (counter, {grant}): grants, with the OutcomeKey
//     of the wait.
//   - fairlock.lock.give_ups (counter, {call}): calls that ended without
//     the lock, with the OutcomeKey of the wait.
//   - fairlock.lock.leases_lost (counter, {hold}): holds that lost the
//     lock before Unlock, with OutcomeLeaseLost or OutcomeLeaseRanOut.
//   - fairlock.lock.renewal_failures (counter, {renewal}): renewals that
//     failed; the watchdog tries again until the lease is lost.
//
// With WithAgeGauges, two gauges more, with the lock's name (LockNameKey)
// as an attribute, and a data point for each lock while this process holds
// it or waits for it:
//
//   - fairlock.lock.hold.age (gauge, s): the time since the grant of the
//     oldest hold of the lock that this process has.
//   - fairlock.lock.wait.age (gauge, s): the time since the oldest Lock
//     call of this process that waits for the lock began.
//
// When every call has returned and every hold has ended, both up-down
// counters are back at 0. The duration histograms advise buckets from a
// millisecond to five minutes; a View may change them.
//
// Every counter starts at 0, for every outcome, before its first event:
// at NewObserver, or with WithLockAttribute at the first call of a lock
// with a given attribute. Prometheus' increase() and rate() see no rise
// in a time series that appears with its first event, and the alerting
// rules of alerts.yml, next to this package, are written for both.
//
// Spans: each Lock call that waits in line (not a TryLock, which makes
// one attempt, nor a re-entry) is a span named "fairlock.Lock", a child
// of the span in the Lock call's context, from the call to its grant or
// its end without one. It has an event "queued" for each fairlock.EventQueued
// (the call joined the line), an event "granted" with the hold's fencing
// token, and the OutcomeKey attribute. Its status is Error, with the
// error recorded, when the call ended with an error other than the end
// of the caller's context (ErrClosed and OutcomeUnavailable included); a
// caller that gave up leaves the status unset.
//
// By default no metric or span has an attribute for the lock's name:
// names are often unbounded, and each value of an attribute is one more
// time series. WithLockAttribute maps names to an attribute, for
// example the part of the name before a ':'. Only the age gauges, which
// are off by default, name each lock.
//
// Observe only updates instruments and spans, and keeps the span of each
// waiting call in a map until the call's grant or end, which fairlock
// reports exactly once per call (with WithAgeGauges, the grant time of
// each hold too, until the hold ends). It never blocks (its mutex guards
// that state alone), but a span processor runs in it: use a batch span
// processor (sdktrace.WithBatcher), not a synchronous one, or each span's
// export makes the Client's event queue fill and drop events
// (fairlock.Client.DroppedEvents). fairlock delivers events after the
// steps they report, so spans and span events are timed by each event's
// At, not by when Observe runs. When its queue is full, fairlock drops a
// call's events whole (see fairlock.WithObserverQueue), so the up-down
// counters return to 0 even then. The Observer is safe for concurrent
// use, and one may serve several Clients.
package otel
