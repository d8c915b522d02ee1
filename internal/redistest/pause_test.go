//go:build unix

package redistest_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock/internal/redistest"
)

// A suspended server answers nothing until it is resumed, and keeps its
// keys; a killed one restarted with an append-only file keeps them too.
func TestSuspendedServerAnswersOnlyOnceResumedAndAOFRestartKeepsKeys(t *testing.T) {
	t.Parallel()
	s, err := redistest.Start("--appendonly", "yes", "--appendfsync", "always")
	require.NoError(t, err)
	t.Cleanup(s.Stop)
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := context.Background()
	require.NoError(t, rdb.Set(ctx, "k", "v", 0).Err())

	require.NoError(t, s.Suspend())
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	err = rdb.Get(short, "k").Err()
	cancel()
	require.Error(t, err, "a stopped server answers nothing")
	require.NoError(t, s.Resume())
	require.Eventually(t, func() bool { return rdb.Get(ctx, "k").Val() == "v" }, 10*time.Second, 10*time.Millisecond)

	s.Kill()
	require.Error(t, s.Suspend(), "a killed server cannot be suspended")
	require.NoError(t, s.Restart())
	require.Equal(t, "v", rdb.Get(ctx, "k").Val(), "the append-only file kept the key")
}
