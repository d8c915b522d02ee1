package fairlock_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/internal/faultproxy"
	"github.com/fairlock/fairlock/internal/redistest"
)

// pubsub returns the ids of the server's connections in pub/sub mode of
// the Client named client, and the number of subscriptions to the shared
// wake channel of the lock name, which only waiting Clients subscribe (a
// holder listens on its Client's channel of the lock).
func (e *env) pubsub(name, client string) (ids []string, subscribers int64, err error) {
	ctx := context.Background()
	list, err := e.rdb.Do(ctx, "CLIENT", "LIST", "TYPE", "pubsub").Text()
	if err != nil {
		return nil, 0, err
	}
	for _, line := range strings.Split(list, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if id, ok := strings.CutPrefix(f[0], "id="); ok && slices.Contains(f, "name="+client) {
			ids = append(ids, id)
		}
	}
	counts, err := e.wakeSubscriptions(name)
	return ids, counts[e.keys(name).Wake], err
}

func TestWaitersAreWokenPromptlyAfterTheNotifyConnectionIsCut(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		heartbeat time.Duration
		// within bounds the grant after the release. Waiters poll every
		// 20s: only the push, or the hub's wake-up after it recovered,
		// can explain a grant within it.
		within time.Duration
		cut    func(e *env, p *faultproxy.Proxy)
		slow   bool // waits out heartbeats and read timeouts: skipped under -short
	}{{
		// The server closes the subscription: the hub sees the error at
		// once, reconnects and wakes its waiters.
		name:      "killed",
		heartbeat: time.Second,
		within:    time.Second,
		cut: func(e *env, _ *faultproxy.Proxy) {
			ids, _, err := e.pubsub("canary", "waiters")
			require.NoError(e.t, err)
			require.Len(e.t, ids, 1, "one pub/sub connection to kill")
			require.NoError(e.t, e.rdb.Do(context.Background(), "CLIENT", "KILL", "ID", ids[0]).Err())
		},
	}, {
		// Every connection of the waiters' Client goes silent without an
		// error (new ones work): the hub notices after two silent
		// heartbeats; the waiter's next poll first times out on its
		// frozen pooled connection (the 500ms read timeout), then is
		// re-sent on a new one.
		name:      "half-open",
		heartbeat: 200 * time.Millisecond,
		within:    2*200*time.Millisecond + 2*500*time.Millisecond + time.Second,
		cut: func(_ *env, p *faultproxy.Proxy) {
			p.FreezeExisting()
		},
		slow: true,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.slow {
				redistest.Slow(t)
			}
			t.Parallel()
			e := newPrivateEnv(t)
			opts := []fairlock.Option{fairlock.WithWaiterTTL(time.Minute), fairlock.WithLease(time.Minute)}
			holder := e.client(opts...)
			// The waiters' connections are named, to tell them from the
			// holder's (whose holds listen for their revocation).
			waiters, p := e.proxied(&redis.Options{ReadTimeout: 500 * time.Millisecond, ClientName: "waiters"},
				append(opts, fairlock.WithHeartbeat(tc.heartbeat))...)

			// A waiter on another lock keeps the hub subscribed through
			// every round, so that its subscription can be watched.
			cctx, err := holder.Mutex("canary").Lock(context.Background())
			require.NoError(t, err)
			stopCanary, cancel := context.WithCancel(context.Background())
			defer cancel()
			canary := lockAsync(stopCanary, waiters.Mutex("canary"))
			e.waitQueued("canary", 1)

			hm, wm := holder.Mutex("cut"), waiters.Mutex("cut")
			for round := range 3 {
				hctx, err := hm.Lock(context.Background())
				require.NoError(t, err)
				w := lockAsync(context.Background(), wm)
				e.waitQueued("cut", 1)
				before, subscribed, err := e.pubsub("canary", "waiters")
				require.NoError(t, err)
				require.Len(t, before, 1, "round %d: the hub's one pub/sub connection", round)

				tc.cut(e, p)
				released := time.Now()
				require.NoError(t, hm.Unlock(hctx))
				r := await(t, w, tc.within+5*time.Second)
				took := time.Since(released)
				require.NoError(t, r.err)
				t.Logf("round %d: granted %v after the release", round, took)
				assert.Less(t, took, tc.within, "round %d: the waiter was not woken after the cut", round)
				require.NoError(t, wm.Unlock(r.ctx))

				require.Eventually(t, func() bool {
					ids, n, err := e.pubsub("canary", "waiters")
					return err == nil && len(ids) == 1 && ids[0] != before[0] && n == subscribed
				}, 10*time.Second, 10*time.Millisecond,
					"round %d: the hub must subscribe again on a new connection (before %v, %d subscriptions)", round, before, subscribed)

			}

			cancel()
			require.ErrorIs(t, await(t, canary, 5*time.Second).err, context.Canceled)
			require.NoError(t, holder.Mutex("canary").Unlock(cctx))
			e.requireClean("canary")
			e.requireClean("cut")
		})
	}
}
