package fairlock_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/internal/redistest"
)

// commitCalls is a go-redis hook that counts the calls of the quorum
// scripts' commit (qcommit) sent alone.
type commitCalls struct{ n atomic.Int64 }

func (h *commitCalls) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *commitCalls) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if args := cmd.Args(); cmd.Name() == "fcall" && len(args) > 1 && strings.HasSuffix(fmt.Sprint(args[1]), "qcommit") {
			h.n.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (h *commitCalls) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// A quorum hold whose masters all drew the same token (their counters
// were equal) has that token committed without a call: Token sends no
// qcommit and returns it. Masters whose counters differ draw different
// tokens, and Token commits the largest to a majority in a round. With
// the counters equal again, the next hold needs none.
func TestQuorumTokenDrawnByAMajorityNeedsNoCommitRound(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	servers := redistest.Masters(t, 3)
	calls := &commitCalls{}
	masters := make([]redis.UniversalClient, len(servers))
	for i, s := range servers {
		rdb := s.Client(t)
		rdb.AddHook(calls)
		masters[i] = rdb
	}
	prefix := redistest.Prefix(t)
	c, err := fairlock.NewQuorum(ctx, masters, fairlock.WithPrefix(prefix))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	m := c.Mutex("job")
	counter := func(name string) string { return prefix + ":{" + name + "}:q:token" }
	setCounters := func(values ...int) {
		for i, v := range values {
			require.NoError(t, servers[i].Client(t).Set(ctx, counter("job"), v, 0).Err())
		}
	}
	token := func() int64 {
		t.Helper()
		hctx, err := m.Lock(ctx)
		require.NoError(t, err)
		tok, err := m.Token(hctx)
		require.NoError(t, err)
		require.NoError(t, m.Unlock(hctx))
		return tok
	}

	setCounters(100, 100, 100)
	require.Equal(t, int64(101), token(), "every master drew 101")
	require.Zero(t, calls.n.Load(), "no commit round")

	setCounters(200, 300, 400)
	first := token()
	require.GreaterOrEqual(t, first, int64(301), "the largest token the holding masters drew (any two of them hold 301 or 401)")
	require.Positive(t, calls.n.Load(), "a commit round")

	calls.n.Store(0)
	setCounters(500, 500, 500)
	require.Equal(t, int64(501), token())
	require.Zero(t, calls.n.Load())
}
