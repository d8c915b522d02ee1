package fair

import (
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// mustEngine returns NewEngine(rdb, cfg), closed when the test ends.
func mustEngine(t testing.TB, rdb Redis, cfg Config) *Engine {
	t.Helper()
	e, err := NewEngine(rdb, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = e.Close() })
	return e
}
