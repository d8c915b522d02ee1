package fairlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/internal/faultproxy"
	"github.com/fairlock/fairlock/internal/redistest"
)

func TestHolderCutOffFromRedisLearnsLeaseLostBeforeItExpires(t *testing.T) {
	redistest.Slow(t)
	t.Parallel()
	for _, tc := range []struct {
		name string
		cut  func(p *faultproxy.Proxy)
	}{{
		// Renewals hang without an error, longer than the lease (go-redis
		// waits for its ReadTimeout, 5s by default, whatever the context).
		name: "frozen",
		cut:  (*faultproxy.Proxy).FreezeAll,
	}, {
		// Renewals fail at once.
		name: "rejected",
		cut:  (*faultproxy.Proxy).Reject,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			const lease = 1500 * time.Millisecond // renewed every 500ms
			cut, p := e.proxied(&redis.Options{}, fairlock.WithLease(lease))
			m := cut.Mutex("partition")
			asked := time.Now()
			hctx, err := m.Lock(context.Background())
			require.NoError(t, err)
			// Cut before the first renewal: the key expires no sooner
			// than a lease after Lock was called.
			tc.cut(p)
			expires := asked.Add(lease)
			owner, err := e.rdb.HGet(context.Background(), e.keys("partition").Lock, "owner").Result()
			require.NoError(t, err)

			// Another owner, not behind the proxy, waits in line.
			other := e.client().Mutex("partition")
			next := make(chan result, 1)
			var granted time.Time
			go func() {
				ctx, err := other.Lock(context.Background())
				granted = time.Now()
				next <- result{ctx, err}
			}()
			e.waitQueued("partition", 1)

			requireDone(t, hctx, lease+5*time.Second)
			lost := time.Now()
			// At that moment Redis still holds the key for the cut-off
			// holder: nobody else can have been granted yet.
			still := e.rdb.HGet(context.Background(), e.keys("partition").Lock, "owner").Val()
			require.ErrorIs(t, context.Cause(hctx), fairlock.ErrLeaseLost)
			t.Logf("lease lost %v before it expires", expires.Sub(lost))
			assert.True(t, lost.Before(expires), "the holder learned of the loss %v after its lease ran out", lost.Sub(expires))
			assert.Equal(t, owner, still, "the holder learned of the loss only after the lock changed hands")

			r := await(t, next, lease+5*time.Second)
			require.NoError(t, r.err)
			t.Logf("other owner granted %v after the cut-off holder learned of the loss", granted.Sub(lost))
			assert.Less(t, granted.Sub(asked), lease+time.Second)
			require.NoError(t, other.Unlock(r.ctx))
			require.ErrorIs(t, m.Unlock(hctx), fairlock.ErrLeaseLost)
			e.requireClean("partition")
		})
	}
}
