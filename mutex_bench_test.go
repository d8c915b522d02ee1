package fairlock_test

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock"
)

// BenchmarkUncontendedLockUnlock: one goroutine takes and releases a lock
// nobody else wants: the fast path, one round trip each way.
func BenchmarkUncontendedLockUnlock(b *testing.B) {
	benchUncontended(b)
}

// BenchmarkUncontendedLockUnlockObserved is BenchmarkUncontendedLockUnlock
// with an Observer that does nothing: what building and delivering the
// events costs. Compare its allocs/op with the plain one's, which has no
// Observer and so builds no event.
func BenchmarkUncontendedLockUnlockObserved(b *testing.B) {
	benchUncontended(b, fairlock.WithObserver(fairlock.ObserverFunc(func(context.Context, fairlock.Event) {})))
}

// BenchmarkUncontendedLockUnlockDeadline is BenchmarkUncontendedLockUnlock
// with a context that has a deadline, as most callers pass: a context that
// can end, which Lock and Unlock must honour even if Redis stalls.
func BenchmarkUncontendedLockUnlockDeadline(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	benchUncontendedWith(b, ctx)
}

// BenchmarkUncontendedLockUnlockDeadlineInline is the same on a go-redis
// client with ContextTimeoutEnabled, which bounds each call by its
// context's deadline: Lock then runs its call on the caller's goroutine
// (see docs/algorithm.md, "What honouring the context costs").
func BenchmarkUncontendedLockUnlockDeadlineInline(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	e := newEnv(b)
	rdb := redis.NewClient(&redis.Options{Addr: e.srv.Addr, ContextTimeoutEnabled: true})
	b.Cleanup(func() { _ = rdb.Close() })
	c, err := fairlock.New(rdb, fairlock.WithPrefix(e.prefix))
	require.NoError(b, err)
	b.Cleanup(func() { _ = c.Close() })
	benchUncontendedOn(b, ctx, c.Mutex("uncontended"))
}

func benchUncontended(b *testing.B, opts ...fairlock.Option) {
	benchUncontendedWith(b, context.Background(), opts...)
}

func benchUncontendedWith(b *testing.B, ctx context.Context, opts ...fairlock.Option) {
	benchUncontendedOn(b, ctx, newEnv(b).client(opts...).Mutex("uncontended"))
}

func benchUncontendedOn(b *testing.B, ctx context.Context, m *fairlock.Mutex) {
	b.ReportAllocs()
	var locking, unlocking time.Duration
	for b.Loop() {
		start := time.Now()
		lctx, err := m.Lock(ctx)
		if err != nil {
			b.Fatal(err)
		}
		locked := time.Now()
		if err := m.Unlock(lctx); err != nil {
			b.Fatal(err)
		}
		locking += locked.Sub(start)
		unlocking += time.Since(locked)
	}
	// Where the time of an op goes: the Lock, and the Unlock (which gets
	// the held context, whose cancellation is the hold's and which has no
	// deadline, so its release runs on the caller's goroutine).
	b.ReportMetric(float64(locking.Nanoseconds())/float64(b.N)/1e3, "µs/lock")
	b.ReportMetric(float64(unlocking.Nanoseconds())/float64(b.N)/1e3, "µs/unlock")
}

// BenchmarkHandOverContended: 16 goroutines over 4 Clients take turns on one
// lock, so nearly every grant is a hand-over from the releasing holder to
// the head of the line. Reports grants per second and the mean time from a
// release to the next holder starting.
func BenchmarkHandOverContended(b *testing.B) {
	benchHandOver(b, 4, 4)
}

// BenchmarkHandOverOneClient is BenchmarkHandOverContended with the 16
// goroutines on one Client: every hand-over is a local hand-off, which
// the Client makes itself from the release's reply.
func BenchmarkHandOverOneClient(b *testing.B) {
	benchHandOver(b, 1, 16)
}

// BenchmarkHandOverObserved is BenchmarkHandOverContended with an
// Observer on each Client: none, one that does nothing, and one that
// sleeps 50ms at each event while the benchmark runs, with its events
// queued (the default) or delivered on the lock path
// (WithObserverQueue(0)). Events are delivered off the lock path, so
// neither queued Observer should slow the hand-overs; the slow one makes
// its queue overflow, and dropped/op is how many events each grant lost.
func BenchmarkHandOverObserved(b *testing.B) {
	noop := fairlock.ObserverFunc(func(context.Context, fairlock.Event) {})
	var slowing atomic.Bool // the slow Observer sleeps only while the benchmark runs, not while Close drains its queue
	slow := fairlock.ObserverFunc(func(context.Context, fairlock.Event) {
		if slowing.Load() {
			time.Sleep(50 * time.Millisecond)
		}
	})
	cases := []struct {
		name string
		opts []fairlock.Option
	}{
		{"none", nil},
		{"noop", []fairlock.Option{fairlock.WithObserver(noop)}},
		{"slow", []fairlock.Option{fairlock.WithObserver(slow)}},
		{"slow-inline", []fairlock.Option{fairlock.WithObserver(slow), fairlock.WithObserverQueue(0)}},
	}
	for _, bc := range cases {
		b.Run(bc.name, func(b *testing.B) {
			slowing.Store(true)
			defer slowing.Store(false)
			clients := benchHandOver(b, 4, 4, bc.opts...)
			var dropped uint64
			for _, c := range clients {
				dropped += c.DroppedEvents()
			}
			b.ReportMetric(float64(dropped)/float64(b.N), "dropped/op")
		})
	}
}

// BenchmarkHandOverSlowObserverCost measures what an Observer that sleeps
// 50ms at each event costs the hand-overs of BenchmarkHandOverContended,
// on a machine whose load changes under the benchmark: two such sets of
// 4 Clients, one without an Observer and one with the slow Observer, take
// turns on two locks in slices of 256 grants (which set goes first
// alternates), and each pair of slices gives the ratio of the slow set's
// grants per second to the plain one's. It reports each set's grants/s
// over the whole run and the median ratio (1: no cost).
func BenchmarkHandOverSlowObserverCost(b *testing.B) {
	var slowing atomic.Bool
	slowing.Store(true)
	defer slowing.Store(false) // Close drains the queues at once
	slow := fairlock.ObserverFunc(func(context.Context, fairlock.Event) {
		if slowing.Load() {
			time.Sleep(50 * time.Millisecond)
		}
	})
	e := newEnv(b)
	sets := [2][]*fairlock.Mutex{
		handOverSet(e, "plain", 4, 4),
		handOverSet(e, "slowed", 4, 4, fairlock.WithObserver(slow)),
	}
	const slice = 256
	var (
		took   [2]time.Duration
		grants [2]int
		ratios []float64
	)
	b.ResetTimer()
	for left, pair := b.N, 0; left > 0; pair++ {
		var rate [2]float64
		for k := range 2 {
			set := (pair + k) % 2
			n := min(slice, left)
			left -= n
			d := runHandOvers(b, sets[set], n)
			took[set] += d
			grants[set] += n
			rate[set] = float64(n) / d.Seconds()
		}
		if rate[0] > 0 && rate[1] > 0 {
			ratios = append(ratios, rate[1]/rate[0])
		}
	}
	b.StopTimer()
	if len(ratios) == 0 {
		return
	}
	slices.Sort(ratios)
	b.ReportMetric(float64(grants[0])/took[0].Seconds(), "plain-grants/s")
	b.ReportMetric(float64(grants[1])/took[1].Seconds(), "slowed-grants/s")
	b.ReportMetric(ratios[len(ratios)/2], "slowed/plain")
}

// handOverSet returns the handles of the lock name for perClient
// goroutines on each of clients Clients made with opts.
func handOverSet(e *env, name string, clients, perClient int, opts ...fairlock.Option) []*fairlock.Mutex {
	var mutexes []*fairlock.Mutex
	for range clients {
		c := e.client(opts...)
		for range perClient {
			mutexes = append(mutexes, c.Mutex(name))
		}
	}
	return mutexes
}

// runHandOvers has a goroutine per handle take and release the lock
// until n grants were made, and returns how long that took.
func runHandOvers(b *testing.B, mutexes []*fairlock.Mutex, n int) time.Duration {
	var left atomic.Int64
	left.Store(int64(n))
	var wg sync.WaitGroup
	ctx := context.Background()
	start := time.Now()
	for _, m := range mutexes {
		wg.Go(func() {
			for left.Add(-1) >= 0 {
				lctx, err := m.Lock(ctx)
				if err != nil {
					b.Error(err)
					return
				}
				if err := m.Unlock(lctx); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	return time.Since(start)
}

// benchHandOver runs a hand-over benchmark on clients Clients made with
// opts, perClient goroutines on each, and returns the Clients.
func benchHandOver(b *testing.B, clients, perClient int, opts ...fairlock.Option) []*fairlock.Client {
	e := newEnv(b)
	var mutexes []*fairlock.Mutex
	var made []*fairlock.Client
	for range clients {
		c := e.client(opts...)
		made = append(made, c)
		for range perClient {
			mutexes = append(mutexes, c.Mutex("contended"))
		}
	}
	var (
		left      atomic.Int64
		released  atomic.Int64 // unix nanos of the last release
		gapNanos  atomic.Int64
		handOvers atomic.Int64
		wg        sync.WaitGroup
		ctx       = context.Background()
	)
	left.Store(int64(b.N))
	b.ResetTimer()
	start := time.Now()
	for _, m := range mutexes {
		wg.Go(func() {
			for left.Add(-1) >= 0 {
				lctx, err := m.Lock(ctx)
				if err != nil {
					b.Error(err)
					return
				}
				if r := released.Load(); r != 0 {
					gapNanos.Add(time.Now().UnixNano() - r)
					handOvers.Add(1)
				}
				released.Store(time.Now().UnixNano())
				if err := m.Unlock(lctx); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "grants/s")
	if n := handOvers.Load(); n > 0 {
		b.ReportMetric(float64(gapNanos.Load())/float64(n)/1e3, "µs/handover")
	}
	require.Zero(b, e.rdb.LLen(ctx, e.keys("contended").Queue).Val())
	return made
}
