package fairlock_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/internal/redistest"
)

// A Sentinel failover, or a restart of a redis-server, in the middle of a
// MultiLock's Lock or while it holds. On one server the MultiLock waits
// in every line with one ticket and is granted every name at once.

// A MultiLock waits in every line, behind a holder of b, while Sentinel
// fails the primary over. After the failover it holds nothing until it is
// granted every name at once: when the holder unlocks b, or once the
// holder's lease ran out in the failover.
func TestMultiLockWaitingThroughASentinelFailoverIsGrantedWhole(t *testing.T) {
	redistest.Slow(t)
	t.Parallel()
	for _, tc := range []struct {
		name  string
		keeps bool // the holder's lease outlasts the failover
	}{
		{"the holder keeps b", true},
		{"the holder loses b", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			set := redistest.SentinelFor(t, 1, 3)
			e := sentinelEnv(t, set)
			bg := context.Background()
			holderLease := multiLease
			if tc.keeps {
				holderLease = 15 * time.Second
			}
			holder := e.client(fairlock.WithLease(holderLease)).Mutex("b")
			hctx, err := holder.Lock(bg)
			require.NoError(t, err)
			rec := &recorder{}
			f := newObservedMultiFault(t, e, []string{"c", "b", "a"}, multiLease, rec)
			ctx, cancel := context.WithTimeout(bg, multiBound)
			defer cancel()
			multi := lockAsync(ctx, f.ml)
			for _, name := range f.names {
				e.waitQueued(name, 1)
			}
			replicated(t, e.rdb)

			killed := time.Now()
			old, err := set.KillPrimary(bg)
			require.NoError(t, err)
			_, err = set.WaitFailover(old, 30*time.Second)
			require.NoError(t, err)
			t.Logf("sentinels switched %v after the kill", time.Since(killed))

			if tc.keeps {
				// A poll answered by the new primary found b held: the
				// MultiLock still waits in every line, and holds nothing.
				rec.awaitEvent(t, strings.Join(f.names, ","), func(ev fairlock.Event) bool {
					return ev.Kind == fairlock.EventPolled && ev.Sent.After(killed)
				})
				tr, err := f.traces()
				require.NoError(t, err)
				for _, name := range f.names {
					require.Equal(t, trace{waits: true}, tr[name], "what Redis keeps of the waiting MultiLock in %q", name)
				}
				select {
				case r := <-multi:
					t.Fatalf("the MultiLock returned while b is held: %v", r.err)
				default:
				}
				require.NoError(t, hctx.Err(), "the holder's lease outlasts the failover")
				require.NoError(t, holder.Unlock(hctx))
			} else {
				requireDone(t, hctx, 10*time.Second)
				require.ErrorIs(t, context.Cause(hctx), fairlock.ErrLeaseLost)
			}

			r := await(t, multi, multiBound)
			require.NoError(t, r.err)
			t.Logf("granted %v after the kill", time.Since(killed))
			f.requireWhole(r.ctx)
			f.requireGone(f.unlockWhole(r.ctx), time.Second)
			f.requireFreeForOthers()
			e.requireNoTickets()
		})
	}
}

// The primary dies right after a MultiLock was granted every name, the
// grant perhaps not yet on the replica. With a lease shorter than the
// failover, its holds end together: its context ends with ErrLeaseLost,
// Unlock says so, and what the new primary has of them expires within
// the lease. With a lease that outlasts the failover, it keeps every name
// under the same tokens and Unlock releases them all; or, if the grant
// had not reached the replica, it loses them all.
func TestMultiLockHeldThroughASentinelFailoverIsKeptOrLostWhole(t *testing.T) {
	redistest.Slow(t)
	t.Parallel()
	for _, tc := range []struct {
		name     string
		outlasts bool // the lease outlasts the failover
	}{
		{"lease shorter than the failover", false},
		{"lease longer than the failover", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			set := redistest.SentinelFor(t, 1, 3)
			e := sentinelEnv(t, set)
			bg := context.Background()
			lease := multiLease
			if tc.outlasts {
				lease = 15 * time.Second
			}
			f := newMultiFault(t, e, []string{"c", "b", "a"}, lease)
			mctx, err := f.ml.Lock(bg)
			require.NoError(t, err)
			before := f.tokensIn(mctx)
			killed := time.Now()
			old, err := set.KillPrimary(bg)
			require.NoError(t, err)
			_, err = set.WaitFailover(old, 30*time.Second)
			require.NoError(t, err)
			t.Logf("sentinels switched %v after the kill", time.Since(killed))

			if !tc.outlasts {
				f.requireGone(f.requireLost(mctx, 10*time.Second), settleBound)
				f.requireFreeForOthers()
				return
			}
			// The watchdog renews every hold on the new primary, or finds
			// none there and ends them all.
			renewedSinceKill := func() bool {
				for _, name := range f.names {
					st, err := f.inspect(name)
					if err != nil || !st.Held || st.Client != f.c.ID() {
						return false
					}
					// Set at killed+x, the lease left is lease-(now-killed)+x.
					if st.LeaseLeft <= lease-time.Since(killed)+100*time.Millisecond {
						return false
					}
				}
				return true
			}
			require.Eventually(t, func() bool { return mctx.Err() != nil || renewedSinceKill() },
				lease, 50*time.Millisecond, "every hold renewed on the new primary, or the context ended")
			if mctx.Err() != nil {
				t.Log("the grant had not reached the replica")
				f.requireGone(f.requireLost(mctx, time.Second), settleBound)
				f.requireFreeForOthers()
				return
			}
			require.Equal(t, before, f.requireWhole(mctx), "the same holds, under the same tokens")
			f.requireGone(f.unlockWhole(mctx), time.Second)
			f.requireFreeForOthers()
		})
	}
}

// A redis-server without persistence restarts while a MultiLock waits in
// every line behind a holder of b: the restarted server has neither, the
// MultiLock joins again and is granted every name. A second restart while
// it holds them loses them all: its context ends with ErrLeaseLost and
// nothing is held.
func TestMultiLockAcrossARestartIsGrantedWholeAndLostWhole(t *testing.T) {
	redistest.Slow(t)
	t.Parallel()
	e := newPrivateEnv(t)
	bg := context.Background()
	holder := e.client(fairlock.WithLease(multiLease)).Mutex("b")
	hctx, err := holder.Lock(bg)
	require.NoError(t, err)
	f := newMultiFault(t, e, []string{"c", "b", "a"}, multiLease)
	ctx, cancel := context.WithTimeout(bg, multiBound)
	defer cancel()
	multi := lockAsync(ctx, f.ml)
	for _, name := range f.names {
		e.waitQueued(name, 1)
	}
	tr, err := f.traces()
	require.NoError(t, err)
	for _, name := range f.names {
		require.Equal(t, trace{waits: true}, tr[name], "what Redis keeps of the waiting MultiLock in %q", name)
	}

	require.NoError(t, e.srv.Restart())
	restarted := time.Now()
	r := await(t, multi, multiBound)
	require.NoError(t, r.err)
	t.Logf("granted %v after the restart returned", time.Since(restarted))
	f.requireWhole(r.ctx)
	requireDone(t, hctx, multiLease+5*time.Second)
	require.ErrorIs(t, context.Cause(hctx), fairlock.ErrLeaseLost, "the holder's hold went with the restart")
	require.NoError(t, r.ctx.Err(), "the MultiLock's holds are the restarted server's")

	require.NoError(t, e.srv.Restart())
	f.requireGone(f.requireLost(r.ctx, multiLease+5*time.Second), time.Second)
	f.requireFreeForOthers()
	for _, name := range f.names {
		e.requireClean(name)
	}
	e.requireNoTickets()
}
