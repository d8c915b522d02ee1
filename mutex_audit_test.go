package fairlock_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/internal/redistest"
)

func TestReleaseUndoneByAGracefulFailoverIsSentAgain(t *testing.T) {
	redistest.Slow(t)
	t.Parallel()
	set := redistest.SentinelFor(t, 1, 3)
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

	// Release once the replica is promoted, while the holder's client still
	// writes to the old primary: Sentinel demotes it only later, and the
	// release is lost with it.
	old := failoverUntilPromoted(t, set)
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
		undone = undone || strings.Contains(l, "brought back a hold")
	}
	require.True(t, undone, "the failover undid the release (else this test proved nothing): %v", logs.all())
	require.NoError(t, newcomer.Mutex(name).Unlock(got))
}

// A graceful Sentinel failover loses the old primary's last writes: here a
// release, a waiter's grant and release, and another waiter's give-up. On
// the new primary the released hold is back and both waiters are still in
// line, and each would block the lock for a lease or a waiter TTL (30s
// here). The audits of the Clients that made them release them in turn,
// so a newcomer is granted the lock within seconds of the switch.
func TestWhatAGracefulFailoverBringsBackIsReleasedInTurn(t *testing.T) {
	redistest.Slow(t)
	t.Parallel()
	set := redistest.SentinelFor(t, 1, 3)
	ctx := context.Background()
	prefix := redistest.Prefix(t)
	newClient := func(logs *logRecorder) *fairlock.Client {
		c, err := fairlock.New(set.Client(t), fairlock.WithPrefix(prefix), fairlock.WithWaiterTTL(30*time.Second),
			fairlock.WithLogger(slog.New(logs)))
		require.NoError(t, err) // a 30s lease
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	holderLogs, waiterLogs, quitterLogs := &logRecorder{}, &logRecorder{}, &logRecorder{}
	holderClient, waiterClient, quitterClient := newClient(holderLogs), newClient(waiterLogs), newClient(quitterLogs)

	const name = "brought-back"
	probe := set.Client(t)
	queued := func(n int64) {
		require.Eventually(t, func() bool { return probe.LLen(ctx, prefix+":{"+name+"}:queue").Val() == n },
			5*time.Second, 5*time.Millisecond)
	}
	hctx, err := holderClient.Mutex(name).Lock(ctx)
	require.NoError(t, err)
	next := lockAsync(ctx, waiterClient.Mutex(name))
	queued(1)
	qctx, quit := context.WithCancel(ctx)
	defer quit()
	quitter := lockAsync(qctx, quitterClient.Mutex(name))
	queued(2)
	require.NoError(t, probe.Do(ctx, "WAIT", 1, 5000).Err()) // the replica has it all

	old := failoverUntilPromoted(t, set)

	// On the old primary, until Sentinel demotes it: the quitter gives up,
	// the holder releases, the waiter is granted and releases.
	quit()
	require.ErrorIs(t, await(t, quitter, 5*time.Second).err, context.Canceled)
	require.NoError(t, holderClient.Mutex(name).Unlock(hctx))
	r := await(t, next, 15*time.Second)
	require.NoError(t, r.err)
	_ = waiterClient.Mutex(name).Unlock(r.ctx)
	_, err = set.WaitFailover(old, 30*time.Second)
	require.NoError(t, err)
	switched := time.Now()

	lctx, cancel := context.WithTimeout(ctx, 25*time.Second)
	defer cancel()
	newcomer := newClient(&logRecorder{}).Mutex(name)
	got, err := newcomer.Lock(lctx)
	require.NoError(t, err)
	took := time.Since(switched)
	require.NoError(t, newcomer.Unlock(got))
	t.Logf("a newcomer was granted the lock %v after the switch", took)
	require.Less(t, took, 20*time.Second, "not a 30s lease or waiter TTL")
	for who, logs := range map[string]*logRecorder{"holder": holderLogs, "waiter": waiterLogs, "quitter": quitterLogs} {
		back := false
		for _, l := range logs.all() {
			back = back || strings.Contains(l, "brought back")
		}
		require.True(t, back, "the failover brought back what the %s left (else this test proved nothing): %v", who, logs.all())
	}
}

// failoverUntilPromoted starts a graceful failover of a set with one
// replica and returns, with the old primary's address, once the replica
// answers as a master: the old primary still takes writes until Sentinel
// demotes it, and they are lost then.
func failoverUntilPromoted(t *testing.T, set *redistest.SentinelSet) string {
	t.Helper()
	ctx := t.Context()
	old, err := set.Primary(ctx)
	require.NoError(t, err)
	var replica string
	for _, a := range set.Addrs() {
		if a != old {
			replica = a
		}
	}
	rep := set.Server(replica).Client(t)
	_, err = set.Failover(ctx)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		role, err := rep.Do(ctx, "ROLE").Slice()
		return err == nil && len(role) > 0 && role[0] == "master"
	}, 10*time.Second, 5*time.Millisecond)
	return old
}
