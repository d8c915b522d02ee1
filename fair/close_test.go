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
	e := mustEngine(t, rdb, Config{WaiterTTL: time.Second, CallTimeout: callTimeout,
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

// An engine cannot be built past the root package's validation with a
// Config it cannot run with: NewEngine refuses it.
func TestNewEngineRefusesAConfigItCannotRunWith(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled
	t.Cleanup(func() { _ = rdb.Close() })
	ok := Config{WaiterTTL: time.Second, CallTimeout: time.Second}
	for _, tt := range []struct {
		name string
		cfg  func(c *Config)
		want string
	}{
		{"zero", func(c *Config) { *c = Config{} }, "WaiterTTL 0s"},
		{"no call timeout", func(c *Config) { c.CallTimeout = 0 }, "CallTimeout 0s"},
		{"negative replicas", func(c *Config) { c.Replicas = -1 }, "Replicas -1"},
		{"replicas without a timeout", func(c *Config) { c.Replicas = 1 }, "ReplicaTimeout 0s"},
	} {
		cfg := ok
		tt.cfg(&cfg)
		e, err := NewEngine(rdb, cfg)
		require.ErrorIs(t, err, errBadConfig, tt.name)
		require.ErrorContains(t, err, tt.want, tt.name)
		require.Nil(t, e, tt.name)
	}
	_, err := NewEngine(nil, ok)
	require.ErrorIs(t, err, errBadConfig)

	e, err := NewEngine(rdb, ok) // no logger: discards
	require.NoError(t, err)
	require.NoError(t, e.Close())
}
