package fairlock_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/internal/redistest"
)

func TestReleaseUndoneByAGracefulFailoverIsSentAgain(t *testing.T) {
	t.Parallel()
	set, err := redistest.StartSentinel(1, 3)
	require.NoError(t, err)
	t.Cleanup(set.Stop)
	ctx := context.Background()
	prefix := redistest.Prefix(t)
	logs := &logRecorder{}
	holderClient, err := fairlock.New(set.Client(t), fairlock.WithPrefix(prefix), fairlock.WithLogger(slog.New(logs)))
	require.NoError(t, err) // a 30s lease
	t.Cleanup(func() { _ = holderClient.Close() })
	waiterClient, err := fairlock.New(set.Client(t), fairlock.WithPrefix(prefix), fairlock.WithWaiterTTL(3*time.Second))
	require.NoError(t, err)
	t.Cleanup(func() { _ = waiterClient.Close() })

	const name = "undone"
	holder := holderClient.Mutex(name)
	hctx, err := holder.Lock(ctx)
	require.NoError(t, err)
	next := lockAsync(ctx, waiterClient.Mutex(name))
	probe := set.Client(t)
	require.Eventually(t, func() bool { return probe.LLen(ctx, prefix+":{"+name+"}:queue").Val() == 1 },
		5*time.Second, 5*time.Millisecond)

	old, err := set.Primary(ctx)
	require.NoError(t, err)
	replicas := set.Addrs()
	var replica string
	for _, a := range replicas {
		if a != old {
			replica = a
		}
	}
	rep := redis.NewClient(&redis.Options{Addr: replica})
	defer rep.Close()
	_, err = set.Failover(ctx)
	require.NoError(t, err)
	// Release once the replica is promoted, while the holder's client still
	// writes to the old primary: Sentinel demotes it only later, and the
	// release is lost with it.
	require.Eventually(t, func() bool {
		role, err := rep.Do(ctx, "ROLE").Slice()
		return err == nil && len(role) > 0 && role[0] == "master"
	}, 10*time.Second, 5*time.Millisecond)
	require.NoError(t, holder.Unlock(hctx))
	released := time.Now()

	// The waiter was handed the lock on the old primary too; that grant is
	// lost with it, and so is its release.
	r := await(t, next, 15*time.Second)
	require.NoError(t, r.err)
	_ = waiterClient.Mutex(name).Unlock(r.ctx)
	_, err = set.WaitFailover(old, 30*time.Second)
	require.NoError(t, err)

	// On the new primary the holder's hold is back; the audit sends its
	// release again, so a newcomer gets the lock long before the 30s lease
	// would have run out.
	lctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	newcomer, err := fairlock.New(set.Client(t), fairlock.WithPrefix(prefix), fairlock.WithWaiterTTL(3*time.Second))
	require.NoError(t, err)
	t.Cleanup(func() { _ = newcomer.Close() })
	got, err := newcomer.Mutex(name).Lock(lctx)
	require.NoError(t, err)
	took := time.Since(released)
	t.Logf("the newcomer was granted %v after the release", took)
	require.Less(t, took, 15*time.Second, "not the 30s lease")
	undone := false
	for _, l := range logs.all() {
		undone = undone || strings.Contains(l, "undid a release")
	}
	require.True(t, undone, "the failover undid the release (else this test proved nothing): %v", logs.all())
	require.NoError(t, newcomer.Mutex(name).Unlock(got))
}
