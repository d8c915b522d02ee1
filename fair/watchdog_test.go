package fair

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock/internal/errs"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/fairlock/fairlock/lua"
	"github.com/fairlock/fairlock/queue"
)

// slowRenewals is a go-redis hook that holds back every pipeline of
// renewals by d, once armed.
type slowRenewals struct {
	d     time.Duration
	armed atomic.Bool
}

var renewHash = lua.Renew(queue.Keys{}, "", 0).Script.Hash()

func (h *slowRenewals) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *slowRenewals) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *slowRenewals) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if h.armed.Load() && slices.ContainsFunc(cmds, func(c redis.Cmder) bool {
			args := c.Args()
			return c.Name() == "evalsha" && len(args) > 1 && args[1] == renewHash
		}) {
			time.Sleep(h.d)
		}
		return next(ctx, cmds)
	}
}

// Renewals that fall due together go out in pipelines of holds with about
// the same time left: a hold that is about to be declared lost bounds the
// wait for its own pipeline, not for the others'. Here one hold has
// 100 ms left and the others seconds, and every pipeline is answered
// after 300 ms: the one is lost, the others are renewed.
func TestRenewalsShortOfTimeDoNotCutShortTheOthers(t *testing.T) {
	srv, err := redistest.Start()
	require.NoError(t, err)
	t.Cleanup(srv.Stop)
	rdb := srv.Client(t)
	slow := &slowRenewals{d: 300 * time.Millisecond}
	rdb.AddHook(slow)
	e := mustEngine(t, rdb, Config{WaiterTTL: 10 * time.Second, CallTimeout: 5 * time.Second})
	prefix := redistest.Prefix(t)
	ctx := context.Background()

	var holds []*Hold
	for i := range 20 {
		k, err := queue.For(prefix, fmt.Sprintf("h%d", i))
		require.NoError(t, err)
		h, err := e.Mutex(k).Lock(ctx, Request{Owner: k.Name, Lease: 30 * time.Second})
		require.NoError(t, err)
		e.dog.unwatch(h) // renewed here, by hand
		holds = append(holds, h)
	}
	near := holds[0]
	near.valid = time.Now().Add(near.span/6 + 100*time.Millisecond) // declared lost in 100 ms
	valid := make([]time.Time, len(holds))
	for i, h := range holds {
		valid[i] = h.valid
	}

	slow.armed.Store(true)
	e.dog.renew(slices.Clone(holds))
	require.ErrorIs(t, context.Cause(near.Context()), errs.ErrLeaseLost, "the hold out of time")
	for i, h := range holds[1:] {
		require.NoError(t, h.Context().Err(), "hold %d", i+1)
		require.False(t, h.failing, "hold %d: its renewal failed", i+1)
		require.True(t, h.valid.After(valid[i+1]), "hold %d was not renewed", i+1)
	}
}
