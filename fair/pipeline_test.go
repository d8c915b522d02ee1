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

// countEvals counts the scripts sent with their source (EVAL) and by SHA1
// (EVALSHA), and the functions called (FCALL), with eachCmd.
type countEvals struct{ eval, evalsha, fcall atomic.Int64 }

func (h *countEvals) count(cmd redis.Cmder) {
	switch cmd.Name() {
	case "eval":
		h.eval.Add(1)
	case "evalsha":
		h.evalsha.Add(1)
	case "fcall":
		h.fcall.Add(1)
	}
}

// A pipeline of many calls that the server cannot run as they are sent
// (after SCRIPT FLUSH and FUNCTION FLUSH, a restart, a failover) carries
// each script's source once: the first call of each is sent again with
// EVAL, which loads it, and the others by SHA1 behind it, including the
// calls of functions whose library the server lacked. Every call is
// answered, and the library is loaded again for the calls after them.
func TestPipelinedCallsLoadEachMissingScriptOnce(t *testing.T) {
	srv, err := redistest.Start()
	require.NoError(t, err)
	t.Cleanup(srv.Stop)
	rdb := srv.Client(t)
	e := mustEngine(t, rdb, Config{WaiterTTL: 10 * time.Second, CallTimeout: 5 * time.Second})
	ctx := context.Background()
	require.NoError(t, rdb.ScriptFlush(ctx).Err())
	require.NoError(t, rdb.FunctionFlush(ctx).Err())
	evals := &countEvals{}
	rdb.AddHook(eachCmd(evals.count))

	prefix := redistest.Prefix(t)
	var calls []lua.Call
	for i := range 50 {
		k, err := queue.For(prefix, fmt.Sprintf("l%d", i))
		require.NoError(t, err)
		calls = append(calls, lua.Renew(k, "o", 1000))
		w, err := queue.Weighted(prefix, k.Name, queue.KindSemaphore)
		require.NoError(t, err)
		wrenew := lua.Classic.WRenew(w, "o", 1000)
		require.NotEmpty(t, wrenew.Function, "the weighted renewal is a function of the library")
		calls = append(calls, wrenew)
		release := lua.Classic.Release(k, fmt.Sprintf("c%d", i), "o", "", 1000, 1000)
		require.NotEmpty(t, release.Function, "the release is a function of the library")
		calls = append(calls, release)
	}
	for i, cmd := range e.pipelined(ctx, calls) {
		require.NoError(t, cmd.Err(), "call %d", i)
	}
	require.EqualValues(t, 3, evals.eval.Load(), "calls sent with their script's source: one per script")
	require.EqualValues(t, 100, evals.fcall.Load(), "the calls of functions went first by FCALL")
	require.EqualValues(t, 50+len(calls)-3, evals.evalsha.Load(),
		"calls sent by SHA1: renew.lua's, then every call but the three loading ones again")
	require.Eventually(t, func() bool {
		names, err := rdb.FunctionList(ctx, redis.FunctionListQuery{}).Result()
		return err == nil && len(names) == 1
	}, 5*time.Second, 10*time.Millisecond, "the library is loaded again in the background")
}
