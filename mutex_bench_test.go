package fairlock_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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

func benchUncontended(b *testing.B, opts ...fairlock.Option) {
	benchUncontendedWith(b, context.Background(), opts...)
}

func benchUncontendedWith(b *testing.B, ctx context.Context, opts ...fairlock.Option) {
	e := newEnv(b)
	m := e.client(opts...).Mutex("uncontended")
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

func benchHandOver(b *testing.B, clients, perClient int) {
	e := newEnv(b)
	var mutexes []*fairlock.Mutex
	for range clients {
		c := e.client()
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
}
