package fair

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock/internal/errs"
	"github.com/fairlock/fairlock/lua"
	"github.com/fairlock/fairlock/notify"
)

// hungCluster is a fakeCluster whose INFO blocks, whatever its context
// (as go-redis's read does by default), until gate is closed; asked
// counts the INFO calls.
type hungCluster struct {
	fakeCluster
	gate  chan struct{}
	asked *atomic.Int32
}

func (h hungCluster) Info(ctx context.Context, sections ...string) *redis.StringCmd {
	h.asked.Add(1)
	<-h.gate
	return h.fakeCluster.Info(ctx, sections...)
}

// returnsWithin calls f in a goroutine and returns its error, failing the
// test if f takes longer than within.
func returnsWithin(t *testing.T, within time.Duration, f func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err
	case <-time.After(within):
		t.Fatalf("still waiting after %v", within)
		return nil
	}
}

// The first question to the server (the wake mode, the server check) runs
// on a goroutine of the engine: a caller whose context ends returns then,
// callers meanwhile join the question instead of asking again, and the
// answer, once in, counts for the calls after it.
func TestHungFirstQuestionsEndAtTheCallersContext(t *testing.T) {
	const v7 = "# Server\r\nredis_version:7.0.0\r\nredis_mode:cluster\r\n"
	unsafe := map[string]string{"maxmemory": "1073741824", "maxmemory-policy": "allkeys-lru"}
	gate := make(chan struct{})
	var asked atomic.Int32
	server := hungCluster{fakeCluster: fakeCluster{fakeServer: fakeServer{info: v7, conf: unsafe}}, gate: gate, asked: &asked}
	e := &Engine{rdb: server, log: slog.New(slog.DiscardHandler), cfg: Config{CallTimeout: time.Minute}}
	e.init(e.cfg.CallTimeout)
	e.layout.ok.Store(true) // the fake answers no script
	var released sync.Once
	release := func() { released.Do(func() { close(gate) }) }
	t.Cleanup(func() { release(); e.wg.Wait() })

	for _, ask := range []struct {
		name string
		call func(ctx context.Context) error
	}{
		{"wake mode", func(ctx context.Context) error { _, err := e.hubMode(ctx); return err }},
		{"server check", e.checkServer},
	} {
		for range 3 {
			err := returnsWithin(t, time.Second, func() error {
				ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
				defer cancel()
				return ask.call(ctx)
			})
			require.ErrorIs(t, err, context.DeadlineExceeded, ask.name)
		}
	}
	require.EqualValues(t, 2, asked.Load(), "one INFO for each question, joined by the later callers")

	release()
	s, err := e.scripts(context.Background())
	require.NoError(t, err)
	require.Same(t, lua.Sharded, s)
	mode, err := e.hubMode(context.Background())
	require.NoError(t, err)
	require.Equal(t, notify.Sharded, mode)
	require.ErrorIs(t, e.checkServer(context.Background()), errs.ErrUnsafeServer,
		"the check cut short by its callers went on, and its verdict counts")
	require.EqualValues(t, 2, asked.Load(), "both answers were kept")
}
