package fair

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// eachCmd is a go-redis hook that calls itself with every command sent,
// alone or in a pipeline, before it goes: the tests' counters and
// recorders of commands.
type eachCmd func(redis.Cmder)

func (f eachCmd) DialHook(next redis.DialHook) redis.DialHook { return next }
func (f eachCmd) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		f(cmd)
		return next(ctx, cmd)
	}
}
func (f eachCmd) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			f(cmd)
		}
		return next(ctx, cmds)
	}
}
