package otel_test

import (
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/fairlock/fairlock/otel"
	"github.com/fairlock/fairlock/queue"
)

// TestAlertRulesPassTheirUnitTests checks alerts.yml and runs
// alerts_test.yml, its promtool unit tests.
func TestAlertRulesPassTheirUnitTests(t *testing.T) {
	t.Parallel()
	require.Contains(t, runPromtool(t, "check", "rules", "alerts.yml"), "SUCCESS: 5 rules found")
	require.Contains(t, runPromtool(t, "test", "rules", "alerts_test.yml"), "SUCCESS")
}

// kind is the lock attribute of the processes of
// TestAlertRulesFireOnWhatTheObserverExports, as in the package example:
// the part of the name before a ':'.
func kind(name string) (attribute.KeyValue, bool) {
	k, _, ok := strings.Cut(name, ":")
	return attribute.String("fairlock.lock.kind", k), ok
}

// TestAlertRulesFireOnWhatTheObserverExports runs three processes (each an
// Observer with the age gauges and the package example's lock attribute,
// exporting to a Prometheus registry of its own) that contend for a lock
// all along, scrapes them once a minute of their clock (the age gauges'
// clock is moved a minute between scrapes; everything else runs as it
// does), and has promtool evaluate alerts.yml on the series scraped: each
// rule fires at the first scrape after its first event, and not before.
//
//   - minute 1: process a takes lease:1 (the first lock of its kind);
//     minute 2: its hold loses its lease to a ForceUnlock.
//   - minute 3: process b's first Lock of bad:1 fails: its key holds a
//     string (WRONGTYPE), an error from Redis.
//   - minute 1: process c, on a server of its own, takes and releases
//     down:1; minute 4: a Lock of it waits in line, and its caller gives
//     up while the server is paused.
//   - minute 5: process a takes stuck:report and never releases it, and
//     process b waits for it: the stuck-lock rule fires once both the
//     hold and the wait are more than 5 minutes old, at minute 11.
func TestAlertRulesFireOnWhatTheObserverExports(t *testing.T) {
	t.Parallel()
	promtool(t)
	rules, err := filepath.Abs("alerts.yml")
	require.NoError(t, err)
	ctx := context.Background()
	srv, err := redistest.Start()
	require.NoError(t, err)
	t.Cleanup(srv.Stop)

	s := newScrapes(t)
	opts := []otel.Option{otel.WithAgeGauges(), otel.WithLockAttribute(kind)}
	a, b := newRig(t, redistest.SharedAddr(), opts...), newRig(t, redistest.SharedAddr(), opts...)
	b.prefix = a.prefix // one deployment: the processes share their locks
	c := newRig(t, srv.Addr, opts...)
	start := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	clocks := map[string]*clock{}
	for name, r := range map[string]*rig{"a": a, "b": b, "c": c} {
		s.add(name, r.registry)
		clocks[name] = newClock(r.obs)
		clocks[name].set(start)
	}
	// minute moves every process's clock to minute m of the run.
	minute := func(m int) {
		for _, clk := range clocks {
			clk.set(start.Add(time.Duration(m) * time.Minute))
		}
	}

	// Contention: goroutines of a and b take turns on work:1 until the
	// run ends; each scrape comes after grants since the last.
	ca, cb := a.client(), b.client()
	work := contend(t, []*fairlock.Mutex{ca.Mutex("work:1"), cb.Mutex("work:1"), ca.Mutex("work:1"), cb.Mutex("work:1")})
	afterGrants := func() {
		t.Helper()
		n := work.count()
		require.Eventually(t, func() bool { return work.count() >= n+4 }, 10*time.Second, time.Millisecond, "no grants of work:1")
	}

	afterGrants()
	require.Equal(t, 0, s.scrape())

	// Minute 1: first uses of the kinds lease (a) and down (c).
	minute(1)
	lease := a.client(fairlock.WithLease(time.Second)).Mutex("lease:1")
	_, err = lease.Lock(ctx)
	require.NoError(t, err)
	cc := c.client()
	hctx, err := cc.Mutex("down:1").Lock(ctx)
	require.NoError(t, err)
	require.NoError(t, cc.Mutex("down:1").Unlock(hctx))
	afterGrants()
	require.Equal(t, 1, s.scrape())

	// Minute 2: a's hold of lease:1 is lost.
	minute(2)
	_, err = a.plain().Mutex("lease:1").ForceUnlock(ctx)
	require.NoError(t, err)
	a.awaitValue("fairlock.lock.leases_lost{fairlock.lock.kind=lease,fairlock.lock.outcome=lease_lost}", 1)
	afterGrants()
	require.Equal(t, 2, s.scrape())

	// Minute 3: b's first call of the kind bad fails with an error from
	// Redis.
	minute(3)
	keys, err := queue.For(b.prefix, "bad:1")
	require.NoError(t, err)
	require.NoError(t, b.rdb.Set(ctx, keys.Lock, "not a lock", 0).Err())
	bctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	_, err = cb.Mutex("bad:1").Lock(bctx)
	cancel()
	require.ErrorContains(t, err, "WRONGTYPE")
	require.NotErrorIs(t, err, context.DeadlineExceeded)
	afterGrants()
	require.Equal(t, 3, s.scrape())

	// Minute 4: c's server stops answering while a Lock of c waits.
	minute(4)
	holder := c.plain().Mutex("down:1")
	hctx, err = holder.Lock(ctx)
	require.NoError(t, err)
	dctx, giveUp := context.WithCancel(ctx)
	down := lockAsync(dctx, cc.Mutex("down:1"))
	c.awaitQueued()
	resume := redistest.Pause(t, srv.Client(t))
	giveUp() // as a deadline would
	err = await(t, down).err
	resume()
	require.ErrorIs(t, err, fairlock.ErrUnavailable)
	require.NoError(t, holder.Unlock(hctx))
	afterGrants()
	require.Equal(t, 4, s.scrape())

	// Minute 5: a takes stuck:report for good, and b waits for it.
	minute(5)
	_, err = ca.Mutex("stuck:report").Lock(ctx)
	require.NoError(t, err)
	wctx, stopWaiting := context.WithCancel(ctx)
	stuck := lockAsync(wctx, cb.Mutex("stuck:report"))
	b.awaitPoint(waitAge + "{fairlock.lock.kind=stuck,fairlock.lock.name=stuck:report}")
	afterGrants()
	require.Equal(t, 5, s.scrape())
	for m := 6; m <= 12; m++ {
		minute(m)
		afterGrants()
		require.Equal(t, m, s.scrape())
	}
	stopWaiting()
	require.ErrorIs(t, await(t, stuck).err, context.Canceled)
	work.stop()

	none := func(alert string, step int) firing { return firing{alert: alert, step: step} }
	checks := []firing{
		none("FairlockLeaseLost", 1),
		{alert: "FairlockLeaseLost", step: 2, alerts: []map[string]string{
			{"instance": "a", "fairlock_lock_kind": "lease", "fairlock_lock_outcome": "lease_lost"}}},
		none("FairlockRedisErrors", 2),
		{alert: "FairlockRedisErrors", step: 3, alerts: []map[string]string{
			{"instance": "b", "fairlock_lock_kind": "bad", "fairlock_lock_outcome": "error"}}},
		none("FairlockRedisUnavailable", 3),
		{alert: "FairlockRedisUnavailable", step: 4, alerts: []map[string]string{
			{"instance": "c", "fairlock_lock_kind": "down", "fairlock_lock_outcome": "unavailable"}}},
		none("FairlockLockStuck", 10),
		{alert: "FairlockLockStuck", step: 11, alerts: []map[string]string{
			{"instance": "a", "fairlock_lock_name": "stuck:report"}}},
		{alert: "FairlockLockStuck", step: 12, alerts: []map[string]string{
			{"instance": "a", "fairlock_lock_name": "stuck:report"}}},
	}
	for step := range s.steps {
		// The busy lock never starves, and nothing fires before a's
		// lease is lost.
		checks = append(checks, none("FairlockLockStarving", step))
		if step < 2 {
			for _, alert := range []string{"FairlockLeaseLost", "FairlockRedisErrors", "FairlockRedisUnavailable", "FairlockLockStuck"} {
				checks = append(checks, none(alert, step))
			}
		}
	}
	runPromtool(t, "test", "rules", s.write(rules, checks))
}

// contention is goroutines that take turns on a lock until stopped,
// counting the grants.
type contention struct {
	mu     sync.Mutex
	grants int // guarded by mu
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// contend starts a goroutine on each of mutexes (handles of one lock)
// that locks and unlocks it until stop, and stops them when t ends.
func contend(t *testing.T, mutexes []*fairlock.Mutex) *contention {
	ctx, cancel := context.WithCancel(context.Background())
	c := &contention{cancel: cancel}
	for _, m := range mutexes {
		c.wg.Go(func() {
			for ctx.Err() == nil {
				hctx, err := m.Lock(ctx)
				if err != nil {
					assert.ErrorIs(t, err, context.Canceled)
					return
				}
				c.mu.Lock()
				c.grants++
				c.mu.Unlock()
				time.Sleep(time.Millisecond) // the work under the lock
				assert.NoError(t, m.Unlock(hctx))
			}
		})
	}
	t.Cleanup(c.stop)
	return c
}

func (c *contention) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.grants
}

// stop stops the goroutines and waits for them.
func (c *contention) stop() {
	c.cancel()
	c.wg.Wait()
}
