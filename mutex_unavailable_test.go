package fairlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/internal/faultproxy"
)

// TestALockWhoseContextEndsWhileRedisDoesNotServeItSaysSo cuts a Client
// off from Redis (through a proxy, frozen: no answer; or rejecting every
// connection: refused), in line behind a holder, at its first call or with
// a TryLock: the call ends with its context's error joined with
// ErrUnavailable. A caller who gives up on a line that Redis keeps
// answering gets the context's error alone.
func TestALockWhoseContextEndsWhileRedisDoesNotServeItSaysSo(t *testing.T) {
	t.Parallel()
	// A read timeout below the Lock's second: go-redis bounds a read on
	// a frozen connection by it, not by the context, and the Client's Close
	// at the end waits for the reads still out.
	ropts := &redis.Options{MaxRetries: 1, DialTimeout: 100 * time.Millisecond, ReadTimeout: 700 * time.Millisecond}
	tests := []struct {
		name string
		// warm: the Client makes one Lock and Unlock before the cut, so
		// that its server check and subscriptions are done.
		warm bool
		// queued: the call waits in line behind a holder when Redis is
		// cut off; else it starts once Redis is cut off.
		queued bool
		try    bool                        // a TryLock, not a Lock
		cut    func(p *faultproxy.Proxy)   // nil: Redis keeps answering
		opts   []fairlock.Option           // of the cut-off Client
		want   func(t *testing.T, e error) // what the call returned
	}{
		{name: "in line, frozen", warm: true, queued: true, cut: (*faultproxy.Proxy).FreezeAll, want: requireUnavailable},
		{name: "in line, polling often, frozen", warm: true, queued: true, cut: (*faultproxy.Proxy).FreezeAll,
			opts: []fairlock.Option{fairlock.WithWaiterTTL(300 * time.Millisecond)}, want: requireUnavailable},
		{name: "in line, rejected", warm: true, queued: true, cut: (*faultproxy.Proxy).Reject, want: requireUnavailable},
		{name: "first call, frozen", cut: (*faultproxy.Proxy).FreezeAll, want: requireUnavailable},
		{name: "a lock never waited for, frozen", warm: true, cut: (*faultproxy.Proxy).FreezeAll, want: requireUnavailable},
		{name: "TryLock, frozen", warm: true, try: true, cut: (*faultproxy.Proxy).FreezeAll, want: requireUnavailable},
		{name: "in line, Redis answering", warm: true, queued: true, want: requireGaveUp},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newPrivateEnv(t)
			ctx := context.Background()
			// A call timeout of 2 s, above the Lock's 1 s: the frozen
			// calls are given up by then, and the Client's Close at the
			// end waits no longer for them.
			c, proxy := e.proxied(ropts, append([]fairlock.Option{fairlock.WithCallTimeout(2 * time.Second)}, tt.opts...)...)
			t.Cleanup(proxy.Heal) // new connections pass again, for the Client's Close
			if tt.warm {
				hctx, err := c.Mutex("warm").Lock(ctx)
				require.NoError(t, err)
				require.NoError(t, c.Mutex("warm").Unlock(hctx))
			}
			m := c.Mutex("cut")
			if tt.queued {
				holder := e.client().Mutex("cut")
				hctx, err := holder.Lock(ctx)
				require.NoError(t, err)
				defer func() { require.NoError(t, holder.Unlock(hctx)) }()
			}
			lctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			var got <-chan result
			if tt.queued {
				got = lockAsync(lctx, m)
				e.waitQueued("cut", 1)
			}
			if tt.cut != nil {
				tt.cut(proxy)
			}
			if !tt.queued && tt.try {
				_, err := m.TryLock(lctx)
				tt.want(t, err)
				return
			}
			if !tt.queued {
				got = lockAsync(lctx, m)
			}
			tt.want(t, await(t, got, 5*time.Second).err)
		})
	}
}

// requireUnavailable asserts that err is a context's deadline joined with
// ErrUnavailable.
func requireUnavailable(t *testing.T, err error) {
	t.Helper()
	require.ErrorIs(t, err, context.DeadlineExceeded, "the context's error is kept")
	require.ErrorIs(t, err, fairlock.ErrUnavailable)
}

// requireGaveUp asserts that err is a context's deadline without ErrUnavailable.
func requireGaveUp(t *testing.T, err error) {
	t.Helper()
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.NotErrorIs(t, err, fairlock.ErrUnavailable, "Redis answered: %v", err)
}
