package fairlock_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
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

	ctx := context.Background()
	var (
		mutexes []*fairlock.Mutex
		held    []context.Context
	)
	for i := range holds {
		m := c.Mutex(fmt.Sprintf("many:%d", i))
		hctx, err := m.Lock(ctx)
		require.NoError(t, err)
		mutexes, held = append(mutexes, m), append(held, hctx)
	}
	require.LessOrEqual(t, engineGoroutines(), 3, "goroutines of the engine with %d holds", holds)

	time.Sleep(lease + lease/3) // past the lease: every hold lives only if renewed
	for i, hctx := range held {
		require.NoError(t, hctx.Err(), "hold %d was lost: %v", i, context.Cause(hctx))
	}
	renewals, pipelines := counter.pipelined.Load(), counter.pipelines.Load()
	require.GreaterOrEqual(t, renewals, int64(holds), "every hold was renewed")
	require.LessOrEqual(t, pipelines*10, renewals, "%d renewals in %d pipelines", renewals, pipelines)
	for i, m := range mutexes {
		require.NoError(t, m.Unlock(held[i]))
	}
}
