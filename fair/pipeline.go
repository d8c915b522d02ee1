package fair

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock/fairlock/internal/pause"
	"github.com/fairlock/fairlock/internal/shortly"
	"github.com/fairlock/fairlock/lua"
)

// byServer splits n items, the lock of item i living at key(i), by the
// server each lives on: a Cluster's master, a Ring's shard; all of them
// together on one server, or when the client cannot tell. It returns the
// indices of each group, in their order. A Cluster's or a Ring's pipeline
// is answered only once every server in it has answered: a pipeline per
// group keeps a dead master from holding up the calls to live ones.
func (e *Engine) byServer(n int, key func(i int) string) [][]int {
	if n == 0 {
		return nil
	}
	if n < 2 || e.OneServer() {
		all := make([]int, n)
		for i := range all {
			all[i] = i
		}
		return [][]int{all}
	}
	ctx, cancel := context.WithTimeout(context.Background(), e.cfg.CallTimeout)
	defer cancel()
	index := map[pipeliner]int{}
	var groups [][]int
	for i := range n {
		server, err := e.primaryFor(ctx, key(i))
		if err != nil {
			server = nil // unknown: sent together with the other unknown
		}
		g, ok := index[server]
		if !ok {
			g = len(groups)
			index[server] = g
			groups = append(groups, nil)
		}
		groups[g] = append(groups[g], i)
	}
	return groups
}

// pipelined runs calls in one pipeline on the engine's client and returns
// the command of each, answered: again for those the server lacked the
// script for, and again after a pause for those it said it would be ready
// for shortly (see shortly), until ctx ends; each keeps the reply it got
// last. Every answer counts for whether Redis is reached (see called).
// The replies are as the server gave them: the caller reads them (and
// takes refusal's view of their errors).
//
// The calls go by the scripts' SHA1 (EVALSHA). When the server lacks a
// script, the first call of each script that it lacked is sent again with
// the script's source (EVAL, which loads it), and the others again by
// SHA1 after it, in the same pipeline: a pipeline of many calls does not
// carry the source many times. (When the server still lacks the script
// after that, as when that EVAL failed, every call of it goes with EVAL.)
func (e *Engine) pipelined(ctx context.Context, calls []lua.Call) []*redis.Cmd {
	cmds := make([]*redis.Cmd, len(calls))
	pending := make([]int, len(calls))
	for i := range pending {
		pending[i] = i
	}
	wait := shortly.FirstPause
	// unloaded are the scripts that the server still lacked after a
	// pipeline that loaded them (their EVAL failed): all their calls go
	// with EVAL from then on, each with its own outcome.
	unloaded := map[*redis.Script]bool{}
	for eval := false; ; {
		pipe := e.rdb.Pipeline()
		loading := map[*redis.Script]bool{}
		for _, i := range pending {
			script := calls[i].Script
			if eval && (!loading[script] || unloaded[script]) {
				loading[script] = true
				cmds[i] = calls[i].Eval(ctx, pipe)
			} else {
				cmds[i] = calls[i].EvalSha(ctx, pipe)
			}
		}
		sent := time.Now()
		_, _ = pipe.Exec(ctx) // every command carries its own outcome
		var again []int
		missing := false // the server lacked the script for some
		for _, i := range pending {
			err := cmds[i].Err()
			switch {
			case noScript(err):
				// Not run; sent again, its script loaded by then (a
				// call sent with EVAL never gets this reply).
				if eval {
					unloaded[calls[i].Script] = true
				}
				again, missing = append(again, i), true
				continue
			case shortly.Reply(err) && ctx.Err() == nil:
				again = append(again, i)
			}
			e.called(sent, err)
		}
		switch {
		case len(again) == 0:
			return cmds
		case missing:
			eval = true
		case !pause.For(ctx, wait):
			return cmds // each keeps the refusal it got
		default:
			wait = min(2*wait, shortly.LongestPause)
		}
		pending = again
	}
}
