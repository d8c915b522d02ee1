package fairlock_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/internal/redistest"
)

// BenchmarkQuorumUncontendedLockUnlock: one goroutine takes a quorum lock
// nobody else wants, commits its token, and releases it, on 1, 3 and 5
// masters: the fast path (one round of qtry), the commit round, and the
// release round, each waiting for a majority.
func BenchmarkQuorumUncontendedLockUnlock(b *testing.B) {
	for _, n := range []int{1, 3, 5} {
		b.Run(fmt.Sprintf("masters=%d", n), func(b *testing.B) {
			m := quorumOf(b, redistest.Masters(b, n)).Mutex("uncontended")
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				held, err := m.Lock(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := m.Token(held); err != nil {
					b.Fatal(err)
				}
				if err := m.Unlock(held); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkQuorumHandOverContended: 16 goroutines over 4 quorum Clients
// of 3 masters take turns on one lock, each committing its token: nearly
// every grant is a hand-over pushed by a majority of the masters.
func BenchmarkQuorumHandOverContended(b *testing.B) {
	servers := redistest.Masters(b, 3)
	var mutexes []*fairlock.Mutex
	for range 4 {
		c := quorumOf(b, servers)
		for range 4 {
			mutexes = append(mutexes, c.Mutex("contended"))
		}
	}
	var (
		left atomic.Int64
		wg   sync.WaitGroup
		ctx  = context.Background()
	)
	left.Store(int64(b.N))
	b.ResetTimer()
	start := time.Now()
	for _, m := range mutexes {
		wg.Go(func() {
			for left.Add(-1) >= 0 {
				held, err := m.Lock(ctx)
				if err != nil {
					b.Error(err)
					return
				}
				if _, err := m.Token(held); err != nil {
					b.Error(err)
				}
				if err := m.Unlock(held); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "grants/s")
}
