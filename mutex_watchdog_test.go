package fairlock_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/internal/redistest"
)

// engineGoroutines counts the goroutines running code of the lock engine.
func engineGoroutines() int {
	buf := make([]byte, 1<<22)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "fairlock/fair.") {
			n++
		}
	}
	return n
}

// The holds of a Client are kept alive by one watchdog, not a goroutine
// each, and the renewals that fall due together go out in one pipeline.
func TestHoldsShareOneWatchdogThatPipelinesTheirRenewals(t *testing.T) {
	redistest.Slow(t)
	const holds, lease = 300, 1500 * time.Millisecond
	e := newEnv(t)
	rdb := e.srv.Client(t)
	counter := &scriptCounter{}
	rdb.AddHook(counter)
	c, err := fairlock.New(rdb, fairlock.WithPrefix(e.prefix), fairlock.WithLease(lease))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })

	// The holds are taken at once, so that their renewals fall due
	// together however long a Lock takes on the machine (taken one after
	// another, on a loaded machine, they spread over more than a lease).
	ctx := context.Background()
	mutexes, held := make([]*fairlock.Mutex, holds), make([]context.Context, holds)
	errs := make([]error, holds)
	var wg sync.WaitGroup
	for i := range holds {
		mutexes[i] = c.Mutex(fmt.Sprintf("many:%d", i))
		wg.Go(func() { held[i], errs[i] = mutexes[i].Lock(ctx) })
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
	require.LessOrEqual(t, engineGoroutines(), 3, "goroutines of the engine with %d holds", holds)

	time.Sleep(lease + lease/3) // past the lease: every hold lives only if renewed
	for i, hctx := range held {
		require.NoError(t, hctx.Err(), "hold %d was lost: %v", i, context.Cause(hctx))
	}
	renewals, pipelines := counter.pipelined.Load(), counter.pipelines.Load()
	t.Logf("%d renewals in %d pipelines", renewals, pipelines)
	require.GreaterOrEqual(t, renewals, int64(holds), "every hold was renewed")
	require.LessOrEqual(t, pipelines*10, renewals, "%d renewals in %d pipelines", renewals, pipelines)
	for i, m := range mutexes {
		require.NoError(t, m.Unlock(held[i]))
	}
}

// On a Cluster the renewals of holds on different masters do not wait for
// one another: a master that stops answering costs the holds on it, and
// only those. (A Cluster's pipeline is answered only when every master in
// it has answered: one pipeline for all the renewals due would have the
// silent master hold up those of the live ones until they too were lost.)
func TestASilentMasterLosesOnlyTheHoldsOnIt(t *testing.T) {
	redistest.Slow(t)
	t.Parallel()
	// A node timeout longer than the test: the silent master is never
	// failed, so the other masters go on serving their slots.
	cluster := redistest.ClusterFor(t, 3, 0, "--cluster-node-timeout", "60000")
	ctx := context.Background()
	e := clusterEnv(t, cluster)
	names, masterOf := clusterNames(t, cluster, "renew")
	const lease = 1500 * time.Millisecond
	c := e.client(fairlock.WithLease(lease))
	held := map[string]context.Context{}
	for _, name := range names {
		hctx, err := c.Mutex(name).Lock(ctx)
		require.NoError(t, err)
		held[name] = hctx
	}

	silent := names[0]
	resume := redistest.Pause(t, cluster.Node(masterOf[silent]).Client(t))
	requireDone(t, held[silent], 2*lease)
	require.ErrorIs(t, context.Cause(held[silent]), fairlock.ErrLeaseLost)
	time.Sleep(lease) // a lease past the loss: the others live only if renewed all along
	for _, name := range names[1:] {
		require.NoError(t, held[name].Err(), "the hold of %q, on a live master, was lost: %v", name, context.Cause(held[name]))
	}
	resume()
	for _, name := range names[1:] {
		require.NoError(t, c.Mutex(name).Unlock(held[name]))
	}
}
