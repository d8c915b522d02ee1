package fair

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// A call made once Close has started (the clean-up of a call that was
// answered late) gets a deadline no later than the bound of Close: go-redis
// stops a blocked read at the deadline, not at the cancellation.
func TestCallsMadeDuringCloseAreBoundByIt(t *testing.T) {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	const callTimeout = 5 * time.Second
	e := NewEngine(rdb, Config{Prefix: "p", Lease: time.Second, WaiterTTL: time.Second, CallTimeout: callTimeout,
		Heartbeat: time.Second, Logger: slog.New(slog.DiscardHandler)})

	ctx, cancel := e.detached(context.Background())
	before, ok := ctx.Deadline()
	cancel()
	require.True(t, ok)
	require.WithinDuration(t, time.Now().Add(callTimeout), before, time.Second, "the call timeout before Close")

	start := time.Now()
	require.NoError(t, e.Close())
	time.Sleep(100 * time.Millisecond)
	ctx, cancel = e.detached(context.Background())
	defer cancel()
	during, ok := ctx.Deadline()
	require.True(t, ok)
	require.True(t, during.Before(start.Add(callTimeout+50*time.Millisecond)), "a call made during Close ends by its bound")
}
