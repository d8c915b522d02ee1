package fairlock_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/internal/redistest"
)

// fullCoverageOff lets a Cluster serve the slots of its live masters
// while one master is down: with full coverage required (Redis's
// default) every node refuses every command until the failover ends, and
// every hold with a lease shorter than that is lost, wherever it lives.
var fullCoverageOff = []string{"--cluster-require-full-coverage", "no"}

// On a Cluster a MultiLock takes its names one after another, each on
// another master: it holds the first two while it waits for the last,
// held by another caller. Then a master dies.
//   - The master of a name it holds, with a lease shorter than the
//     failover: that hold is lost, the call fails with ErrLeaseLost and
//     has given back the name it holds on a live master and left the
//     line it waited in; what the dead master's replica has of the lost
//     hold expires within the lease.
//   - The master of the name it waits for: the holder's lease runs out
//     in the failover, and the call goes on and is granted every name,
//     keeping the holds it had (the same tokens).
//
// Either way, after the failover anyone can take every name.
func TestMultiLockOnAClusterWhoseMasterDiesIsGrantedWholeOrHoldsNothing(t *testing.T) {
	redistest.Slow(t)
	t.Parallel()
	for _, tc := range []struct {
		name string
		kill int // the index in key order of the name whose master dies
	}{
		{"the master of a name it holds", 0},
		{"the master of the name it waits for", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cluster := redistest.ClusterFor(t, 3, 1, fullCoverageOff...)
			e := clusterEnv(t, cluster)
			bg := context.Background()
			names, masterOf := clusterNames(t, cluster, "acct")
			f := newMultiFault(t, e, names, multiLease)
			last := f.names[2]
			holder := e.client(fairlock.WithLease(multiLease)).Mutex(last)
			hctx, err := holder.Lock(bg)
			require.NoError(t, err)

			ctx, cancel := context.WithTimeout(bg, multiBound)
			defer cancel()
			multi := lockAsync(ctx, f.ml)
			e.waitQueued(last, 1)
			tr, err := f.traces()
			require.NoError(t, err)
			for _, name := range f.names[:2] {
				require.True(t, tr[name].held, "the MultiLock holds %q while it waits for %q", name, last)
			}
			doomed := f.names[tc.kill]
			master := masterOf[doomed]
			replicated(t, cluster.Node(master).Client(t))

			killed := time.Now()
			require.NoError(t, cluster.Kill(master))
			r := await(t, multi, multiBound)
			ended := time.Now()
			t.Logf("Lock returned %v after the kill of the master of %q: %v", ended.Sub(killed), doomed, r.err)
			if tc.kill < 2 {
				require.ErrorIs(t, r.err, fairlock.ErrLeaseLost)
				require.Contains(t, r.err.Error(), fmt.Sprintf("lock %q: fairlock: lease lost", doomed), "the error names the lock lost")
				require.Nil(t, r.ctx)
				// What it took or joined on the live masters it gave up
				// before Lock returned.
				f.requireNoneBut(doomed, "what Redis keeps of the failed MultiLock in")
			}
			_, err = cluster.WaitFailover("{"+doomed+"}", master, 30*time.Second)
			require.NoError(t, err)
			t.Logf("cluster failed over %v after the kill", time.Since(killed))

			if tc.kill == 2 {
				require.NoError(t, r.err)
				got := f.requireWhole(r.ctx)
				for _, name := range f.names[:2] {
					require.Equal(t, tr[name].token, got[name], "%q is still the hold taken before the failover", name)
				}
				ended = f.unlockWhole(r.ctx)
			}
			f.requireGone(ended, settleBound)
			if hctx.Err() == nil {
				require.NoError(t, holder.Unlock(hctx))
			}
			f.requireFreeForOthers()
		})
	}
}

// On a Cluster a MultiLock holds every name when the master of one of
// them dies, and the failover outlasts the lease. That hold is lost and
// the context ends with ErrLeaseLost naming it; the names on the live
// masters are still held, and Unlock releases them and reports the one
// lost. What the dead master's replica has of the lost hold expires
// within the lease.
func TestMultiLockOnAClusterThatLosesOneNameEndsItsContext(t *testing.T) {
	redistest.Slow(t)
	t.Parallel()
	cluster := redistest.ClusterFor(t, 3, 1, fullCoverageOff...)
	e := clusterEnv(t, cluster)
	bg := context.Background()
	names, masterOf := clusterNames(t, cluster, "acct")
	f := newMultiFault(t, e, names, multiLease)
	mctx, err := f.ml.Lock(bg)
	require.NoError(t, err)
	f.requireWhole(mctx)
	doomed := f.names[1]
	master := masterOf[doomed]
	replicated(t, cluster.Node(master).Client(t))

	killed := time.Now()
	require.NoError(t, cluster.Kill(master))
	requireDone(t, mctx, 10*time.Second)
	t.Logf("context ended %v after the kill: %v", time.Since(killed), context.Cause(mctx))
	require.ErrorIs(t, context.Cause(mctx), fairlock.ErrLeaseLost)
	require.Contains(t, context.Cause(mctx).Error(), fmt.Sprintf("%q", doomed), "the cause names the lock lost")

	err = f.ml.Unlock(mctx)
	released := time.Now()
	t.Logf("Unlock: %v", err)
	require.ErrorIs(t, err, fairlock.ErrLeaseLost)
	for _, name := range f.names {
		require.Equal(t, name == doomed, strings.Contains(err.Error(), fmt.Sprintf("%q", name)),
			"Unlock reports %q as lost: %v", name, err)
	}
	f.requireNoneBut(doomed, "Unlock released")

	_, err = cluster.WaitFailover("{"+doomed+"}", master, 30*time.Second)
	require.NoError(t, err)
	f.requireGone(released, settleBound)
	f.requireFreeForOthers()
}
