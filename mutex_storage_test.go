package fairlock_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/fairlock/fairlock/queue"
)

// The tests of this file hold what README.md says Redis keeps: the keys
// of a lock live while it is held or waited for, and receipts a little
// longer; once every lock is free and every receipt expired, nothing.

// scanKeys returns every key under the test's prefix, with SCAN.
// It leaves out the prefix's layout key, the one key a prefix keeps for
// good (see ErrLayout), written once whatever the locks.
func (e *env) scanKeys(ctx context.Context) ([]string, error) {
	var keys []string
	it := e.rdb.Scan(ctx, 0, e.prefix+":*", 1000).Iterator()
	for it.Next(ctx) {
		if it.Val() != queue.LayoutKey(e.prefix) {
			keys = append(keys, it.Val())
		}
	}
	return keys, it.Err()
}

func TestFreeLocksLeaveNoKeysOnceTheirReceiptsExpire(t *testing.T) {
	redistest.Slow(t)
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	const (
		names       = 2000
		lease       = time.Second // a hold outlives a busy machine's stalls between Lock and Unlock
		callTimeout = time.Second // receipts live twice that (a release's: the lease more)
	)
	opts := []fairlock.Option{fairlock.WithLease(lease), fairlock.WithCallTimeout(callTimeout)}
	c := e.client(opts...)

	// Many names, each locked and unlocked once, by a few goroutines.
	var wg sync.WaitGroup
	errs := make(chan error, names)
	for g := range 8 {
		wg.Go(func() {
			for i := g; i < names; i += 8 {
				m := c.Mutex(fmt.Sprintf("order:%d", i))
				hctx, err := m.Lock(ctx)
				if err == nil {
					err = m.Unlock(hctx)
				}
				if err != nil {
					errs <- fmt.Errorf("order:%d: %w", i, err)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}

	// One lock re-entered, then handed over to a waiter of another Client.
	m := c.Mutex("contended")
	hctx, err := m.Lock(ctx)
	require.NoError(t, err)
	inner, err := m.Lock(hctx)
	require.NoError(t, err)
	other := e.client(opts...).Mutex("contended")
	waiter := lockAsync(ctx, other)
	e.waitQueued("contended", 1)
	require.NoError(t, m.Unlock(inner))
	require.NoError(t, m.Unlock(hctx))
	r := await(t, waiter, 10*time.Second)
	require.NoError(t, r.err)
	require.NoError(t, other.Unlock(r.ctx))

	// A MultiLock's ticket granted by a release, and one that gives up:
	// neither leaves its key behind.
	ml := c.MultiLock([]string{"set-a", "set-b"})
	mctx, err := ml.Lock(ctx)
	require.NoError(t, err)
	mc := e.client(opts...)
	granted := lockAsync(ctx, mc.MultiLock([]string{"set-a", "set-b"}))
	e.waitQueued("set-a", 1)
	gctx, cancel := context.WithCancel(ctx)
	givesUp := lockAsync(gctx, mc.MultiLock([]string{"set-b", "set-c"}))
	e.waitQueued("set-c", 1)
	cancel()
	require.ErrorIs(t, await(t, givesUp, 10*time.Second).err, context.Canceled)
	e.waitQueued("set-c", 0)
	require.NoError(t, ml.Unlock(mctx))
	r = await(t, granted, 10*time.Second)
	require.NoError(t, r.err)
	require.NoError(t, mc.MultiLock([]string{"set-a", "set-b"}).Unlock(r.ctx))
	e.requireNoTickets()

	// Every key left expires: none stays for good.
	keys, err := e.scanKeys(ctx)
	require.NoError(t, err)
	for _, key := range keys {
		ttl, err := e.rdb.PTTL(ctx, key).Result()
		require.NoError(t, err)
		// -1: the key never expires; -2: it expired since the SCAN.
		require.NotEqual(t, time.Duration(-1), ttl, "%s never expires (%d keys under the prefix)", key, len(keys))
		require.LessOrEqual(t, ttl, lease+2*callTimeout, "%s", key)
	}

	// And once the last receipt has expired, nothing is left.
	require.Eventually(t, func() bool {
		keys, err = e.scanKeys(ctx)
		return err == nil && len(keys) == 0
	}, lease+2*callTimeout+10*time.Second, 50*time.Millisecond, "keys left under the prefix")
}

func TestTokensRiseAcrossACounterThatExpiredWhileTheLockWasBusy(t *testing.T) {
	redistest.Slow(t)
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	const lease = 500 * time.Millisecond // the watchdog renews the hold; the counter lasts one lease
	k := e.keys("busy")
	counterGone := func() {
		t.Helper()
		require.Eventually(t, func() bool { return e.rdb.Exists(ctx, k.Token).Val() == 0 },
			lease+5*time.Second, 5*time.Millisecond, "the token counter expires")
	}
	a := e.client(fairlock.WithLease(lease)).Mutex("busy")
	b := e.client(fairlock.WithLease(lease)).Mutex("busy")

	hctx, err := a.Lock(ctx)
	require.NoError(t, err)
	first, err := a.Token(hctx)
	require.NoError(t, err)
	waiter := lockAsync(ctx, b)
	e.waitQueued("busy", 1)

	counterGone()
	again, err := a.Token(hctx)
	require.NoError(t, err, "the hold outlives its counter")
	require.Equal(t, first, again)
	require.NoError(t, a.Unlock(hctx))
	r := await(t, waiter, 10*time.Second)
	require.NoError(t, r.err)
	handed, err := b.Token(r.ctx)
	require.NoError(t, err)
	require.Greater(t, handed, first, "the hand-over after the counter expired")
	require.NoError(t, b.Unlock(r.ctx))

	counterGone()
	hctx, err = a.Lock(ctx)
	require.NoError(t, err)
	last, err := a.Token(hctx)
	require.NoError(t, err)
	require.Greater(t, last, handed, "a grant of the free lock after the counter expired")
	require.NoError(t, a.Unlock(hctx))
}
