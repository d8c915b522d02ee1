package fairlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/internal/redistest"
)

// BenchmarkReplicasUncontendedLockUnlock: one goroutine takes and releases
// a lock nobody else wants, through a failover client of a primary with
// one replica under a sentinel: the fast path as it is (two round trips),
// and with WithReplicas(1, 1s), where each of the two calls also waits
// for the replica's acknowledgement in the same pipeline.
func BenchmarkReplicasUncontendedLockUnlock(b *testing.B) {
	set := redistest.SentinelFor(b, 1, 1)
	cases := []struct {
		name string
		opts []fairlock.Option
	}{
		{"none", nil},
		{"WithReplicas(1,1s)", []fairlock.Option{fairlock.WithReplicas(1, time.Second)}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			opts := append([]fairlock.Option{fairlock.WithPrefix(redistest.Prefix(b))}, c.opts...)
			lc, err := fairlock.New(set.Client(b), opts...)
			require.NoError(b, err)
			b.Cleanup(func() { _ = lc.Close() })
			m := lc.Mutex("uncontended")
			ctx := context.Background()
			for b.Loop() {
				hctx, err := m.Lock(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if err := m.Unlock(hctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
