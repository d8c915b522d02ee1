package pause

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestForWaitsItsTimeUnlessTheContextEnds(t *testing.T) {
	start := time.Now()
	require.True(t, For(context.Background(), 20*time.Millisecond))
	require.GreaterOrEqual(t, time.Since(start), 20*time.Millisecond)

	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(10*time.Millisecond, cancel)
	start = time.Now()
	require.False(t, For(ctx, time.Hour))
	require.Less(t, time.Since(start), 10*time.Second, "returned once the context ended")
}
