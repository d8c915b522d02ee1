package fairlock_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock"
)

// renewalCounter is a go-redis hook that counts the pipelines a client
// sends and the scripts in them.
type renewalCounter struct{ pipelines, scripts atomic.Int64 }

func (c *renewalCounter) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (c *renewalCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (c *renewalCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.pipelines.Add(1)
		for _, cmd := range cmds {
			if name := cmd.Name(); name == "evalsha" || name == "eval" {
				c.scripts.Add(1)
			}
		}
		return next(ctx, cmds)
	}
}

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
	const holds, lease = 300, 1500 * time.Millisecond
	e := newEnv(t)
	rdb := e.srv.Client(t)
	counter := &renewalCounter{}
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
	renewals, pipelines := counter.scripts.Load(), counter.pipelines.Load()
	require.GreaterOrEqual(t, renewals, int64(holds), "every hold was renewed")
	require.LessOrEqual(t, pipelines*10, renewals, "%d renewals in %d pipelines", renewals, pipelines)
	for i, m := range mutexes {
		require.NoError(t, m.Unlock(held[i]))
	}
}
