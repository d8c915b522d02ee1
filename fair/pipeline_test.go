package fair

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/fairlock/fairlock/lua"
	"github.com/fairlock/fairlock/queue"
)

// countEvals is a go-redis hook that counts the scripts sent with their
// source (EVAL) and by SHA1 (EVALSHA).
type countEvals struct{ eval, evalsha atomic.Int64 }

func (h *countEvals) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *countEvals) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.count(cmd)
		return next(ctx, cmd)
	}
}
func (h *countEvals) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			h.count(cmd)
		}
		return next(ctx, cmds)
	}
}
func (h *countEvals) count(cmd redis.Cmder) {
	switch cmd.Name() {
	case "eval":
		h.eval.Add(1)
	case "evalsha":
		h.evalsha.Add(1)
	}
}

// A pipeline of many calls of scripts the server lacks (after SCRIPT
// FLUSH, a restart, a failover) carries each script's source once: the
// first call of each is sent again with EVAL, which loads it, and the
// others by SHA1 behind it. Every call is answered.
func TestPipelinedCallsLoadEachMissingScriptOnce(t *testing.T) {
	srv, err := redistest.Start()
	require.NoError(t, err)
	t.Cleanup(srv.Stop)
	rdb := srv.Client(t)
	evals := &countEvals{}
	rdb.AddHook(evals)
	e := mustEngine(t, rdb, Config{WaiterTTL: 10 * time.Second, CallTimeout: 5 * time.Second})
	ctx := context.Background()
	require.NoError(t, rdb.ScriptFlush(ctx).Err())

	prefix := redistest.Prefix(t)
	var calls []lua.Call
	for i := range 50 {
		k, err := queue.For(prefix, fmt.Sprintf("l%d", i))
		require.NoError(t, err)
		calls = append(calls, lua.Renew(k, "o", 1000))
		w, err := queue.Weighted(prefix, k.Name, queue.KindSemaphore)
		require.NoError(t, err)
		calls = append(calls, lua.WRenew(w, "o", 1000))
	}
	for i, cmd := range e.pipelined(ctx, calls) {
		_, err := lua.ReadFlag(cmd)
		require.NoError(t, err, "call %d", i)
	}
	require.EqualValues(t, 2, evals.eval.Load(), "calls sent with their script's source: one per script")
	require.EqualValues(t, 2*len(calls)-2, evals.evalsha.Load(), "calls sent by SHA1: every call, then all but the two loading ones again")
}
