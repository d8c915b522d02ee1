package fair

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock/fairlock/internal/pause"
	"github.com/fairlock/fairlock/internal/shortly"
	"github.com/fairlock/fairlock/lua"
)

// byServer splits items, the lock of each living at key(item), by the
// server each lives on: a Cluster's master, a Ring's shard; all of them
// together on one server, or when the client cannot tell. Each group keeps
// the items' order. A Cluster's or a Ring's pipeline is answered only once
// every server in it has answered: a pipeline per group keeps a dead
// master from holding up the calls to live ones (the watchdog's renewals
// of the holds on live masters, Close's releases).
func byServer[T any](e *Engine, items []T, key func(T) string) [][]T {
	if len(items) == 0 {
		return nil
	}
	if len(items) < 2 || e.OneServer() {
		return [][]T{items}
	}
	ctx, cancel := context.WithTimeout(context.Background(), e.cfg.CallTimeout)
	defer cancel()
	index := map[pipeliner]int{}
	var groups [][]T
	for _, item := range items {
		server, err := e.primaryFor(ctx, key(item))
		if err != nil {
			server = nil // unknown: sent together with the other unknown
		}
		g, ok := index[server]
		if !ok {
			g = len(groups)
			index[server] = g
			groups = append(groups, nil)
		}
		groups[g] = append(groups[g], item)
	}
	return groups
}

// pipelined runs calls in one pipeline on the engine's client and returns
// the command of each, answered: again the way the engine's runner says
// for those the server did not run (it lacked the library or the script;
// see lua.Runner), and again after a pause for those it said it would be
// ready for shortly (see shortly), until ctx ends; each keeps the reply it
// got last. Every answer counts for whether Redis is reached (see called).
// The replies are as the server gave them: the caller reads them (and
// takes refusal's view of their errors).
//
// When the server lacks what many calls need (after FUNCTION FLUSH, a
// restart, a failover), the runner sends them again as scripts: the first
// call of each script with its source (EVAL, which loads it) and the
// others by SHA1 behind it, in the same pipeline, so that a pipeline of
// many calls does not carry a script's source many times. When the server
// still lacks a script after the pipeline that carried its source (that
// EVAL failed), every call of it goes with EVAL.
func (e *Engine) pipelined(ctx context.Context, calls []lua.Call) []*redis.Cmd {
	cmds := make([]*redis.Cmd, len(calls))
	sends := make([]lua.Sending, len(calls))
	pending := make([]int, len(calls))
	for i := range calls {
		sends[i] = e.runner.Start(calls[i])
		pending[i] = i
	}
	wait := shortly.FirstPause
	carried := map[*redis.Script]bool{} // scripts whose source an earlier pipeline carried
	for {
		pipe := e.rdb.Pipeline()
		carries := map[*redis.Script]bool{}
		for _, i := range pending {
			if script := calls[i].Script; sends[i].Via == lua.BySource && !carried[script] {
				if carries[script] {
					sends[i].Via = lua.BySHA // behind the call that loads it
				}
				carries[script] = true
			}
			cmds[i] = calls[i].Send(ctx, pipe, sends[i].Via)
		}
		sent := time.Now()
		_, _ = pipe.Exec(ctx) // every command carries its own outcome
		var again []int
		unrun := false // the server did not run some, and says how to send them
		for _, i := range pending {
			err := cmds[i].Err()
			if e.runner.Again(ctx, e.rdb, calls[i], &sends[i], err) {
				again, unrun = append(again, i), true
				continue
			}
			if shortly.Reply(err) && ctx.Err() == nil {
				again = append(again, i)
			}
			e.called(sent, err)
		}
		for script := range carries {
			carried[script] = true
		}
		switch {
		case len(again) == 0:
			return cmds
		case unrun:
		case !pause.For(ctx, wait):
			return cmds // each keeps the refusal it got
		default:
			wait = min(2*wait, shortly.LongestPause)
		}
		pending = again
	}
}
