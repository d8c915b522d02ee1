package fair

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock/fairlock/internal/errs"
	"github.com/fairlock/fairlock/internal/shortly"
	"github.com/fairlock/fairlock/lua"
)

// replication is what an engine built with Config.Replicas waits for after
// every acquire and release script: n replicas' acknowledgement, for at
// most timeout.
//
// WAIT counts the replicas that have acknowledged every write made on the
// connection it is sent on, so the script and the WAIT travel in one
// pipeline on one connection to the node that owns the lock's keys. A
// re-sent re-entry or release (go-redis re-sends a pipeline whose reply
// was lost) finds its receipt and writes nothing; on a server that moves a
// connection's replication offset only with its writes (Redis 7.0 moves it
// with every command, later versions do not), a WAIT after it would count
// replicas that never saw the first run. So the pipeline also renews the
// receipt's expiry (PEXPIRE, a write whenever the receipt exists): a
// replica that acknowledges it has everything the primary wrote before
// it, the first run included. A re-sent grant has no receipt, but claims
// its hold, which renews the hold's lease: a write as well.
type replication struct {
	n       int
	timeout time.Duration
}

// pipeliner is a client of one node that can send a pipeline and say
// how many replicas the node has.
type pipeliner interface {
	lua.Client
	Pipeline() redis.Pipeliner
	Info(ctx context.Context, sections ...string) *redis.StringCmd
}

var errNoPrimary = errors.New("fairlock: waiting for replicas needs a *redis.Client, *redis.ClusterClient or *redis.Ring")

// primaryFor returns a client of the node that owns key: the cluster's
// master of its slot, the Ring's shard of its hash tag, or the client
// itself (a single server, or a failover client's primary). A cluster
// client's own pipeline would send the keyless WAIT to any node.
func (e *Engine) primaryFor(ctx context.Context, key string) (pipeliner, error) {
	switch r := e.rdb.(type) {
	case *redis.ClusterClient:
		c, err := r.MasterForKey(ctx, key)
		if err != nil {
			return nil, err
		}
		return c, nil
	case *redis.Ring:
		c, err := r.GetShardClientForKey(key)
		if err != nil {
			return nil, err
		}
		return c, nil
	case *redis.Client:
		return r, nil
	}
	return nil, errNoPrimary
}

// waited is the outcome of a script run by runScript: the script's reply,
// and the verdict of the WAIT that followed it.
type waited struct {
	cmd  *redis.Cmd
	wait *redis.IntCmd // nil: the engine waits for no replicas, or the script was not sent
	node pipeliner     // the node the WAIT was sent to
}

// minWait is the shortest WAIT runScript sends: WAIT 0 would block for
// good.
const minWait = time.Millisecond

// runScript runs call once. Without replicas it is script.Run on the
// engine's client, as it always was: EVALSHA, then EVAL when the server
// lacks the script. With replicas it sends EVALSHA, PEXPIRE of the call's
// receipt (to receiptTTL ms) and WAIT in one pipeline on the primary of
// the lock.
//
// When the server lacked the script (first use, SCRIPT FLUSH, a restart,
// a failover), nothing ran, but the WAIT after it was served: it waited
// for what the connection (on Redis 7.0, where every command moves the
// connection's replication offset to the primary's: the whole primary)
// wrote so far, and told whether the replicas keep up. The call is sent
// again with EVAL (a re-run is as safe as any re-sent call, since the
// script is idempotent per call id), and each call still waits for
// replicas for one timeout at most, in all:
//
//   - when that WAIT came back short or failed, with no WAIT at all: its
//     verdict is the call's, as the change would not be acknowledged in
//     time either, and the call is reported unacknowledged (see
//     acknowledged) with the change made on the primary;
//   - otherwise with a WAIT for what is left of the timeout.
//
// A server that says it will be ready shortly (see shortly) did not run
// the script: the call is sent again until it runs or ctx ends.
func (e *Engine) runScript(ctx context.Context, call lua.Call, receipt string, receiptTTL int64) waited {
	w, err := shortly.Do(ctx, func() (waited, error) {
		w := e.runScriptOnce(ctx, call, receipt, receiptTTL)
		return w, w.cmd.Err()
	})
	if err != nil {
		w.cmd.SetErr(err) // the reply that kept it from running, and ctx's error
	}
	return w
}

// runScriptOnce is one run of runScript.
func (e *Engine) runScriptOnce(ctx context.Context, call lua.Call, receipt string, receiptTTL int64) waited {
	r := e.repl
	if r == nil {
		return waited{cmd: e.runner.Run(ctx, e.rdb, call)}
	}
	node, err := e.primaryFor(ctx, call.Keys[0])
	if err != nil {
		cmd := redis.NewCmd(ctx)
		cmd.SetErr(err)
		return waited{cmd: cmd}
	}
	send := func(via lua.Via, timeout time.Duration) waited {
		pipe := node.Pipeline()
		cmd := call.Send(ctx, pipe, via)
		var wait *redis.IntCmd
		if timeout > 0 {
			if receipt != "" {
				pipe.PExpire(ctx, receipt, time.Duration(receiptTTL)*time.Millisecond)
			}
			wait = redis.NewIntCmd(ctx, "wait", r.n, max(timeout, minWait).Milliseconds())
			_ = pipe.Process(ctx, wait)
		}
		_, _ = pipe.Exec(ctx) // every command carries its own outcome
		return waited{cmd: cmd, wait: wait, node: node}
	}
	sent := time.Now()
	s := e.runner.Start(call)
	w := send(s.Via, r.timeout)
	for e.runner.Again(ctx, node, call, &s, w.cmd.Err()) {
		// The script did not run: send it again, with what is left of
		// the WAIT's time unless the WAIT has already given its verdict.
		if got, err := w.wait.Result(); err != nil || got < int64(r.n) {
			verdict := w.wait
			w = send(s.Via, 0)
			w.wait = verdict
		} else {
			w = send(s.Via, max(r.timeout-time.Since(sent), minWait))
		}
	}
	if msg, ok := serverReply(w.cmd.Err()); ok && redirected(msg) {
		// The node no longer serves the slot (a failover, a slot
		// migration): go-redis follows that only for the commands it
		// routes itself. The script did not run. The error is no server
		// reply, so it is retried like a network error (a Lock polls
		// again, an Unlock is sent again), once the client's map, which
		// the caller's failure asks to reload, names the new master.
		cmd := redis.NewCmd(ctx)
		cmd.SetErr(fmt.Errorf("fairlock: the lock's slot is served elsewhere now (%s); not run", msg))
		return waited{cmd: cmd}
	}
	return w
}

// redirected reports whether an error reply sends the caller to another
// cluster node.
func redirected(msg string) bool {
	return strings.HasPrefix(msg, "MOVED ") || strings.HasPrefix(msg, "ASK ")
}

// acknowledged returns nil when the script's change was acknowledged by
// enough replicas (or none are waited for), and otherwise an error that
// wraps errs.ErrNotReplicated: the WAIT's short count, its error reply
// (wrapped too, so that a refusal is not retried), or the network error
// that cut it off (retried like any other).
//
// A short count makes it ask the node how many replicas it has connected
// (INFO replication, on the node the WAIT went to): fewer than the engine
// waits for (none at all, a replica detached or gone, a new primary that
// no replica has found yet) and waiting could last for good, so the error
// wraps tooFewReplicas, which says both numbers, and is not retried. When
// the node does not say (INFO refused, a network error), the short count
// is all the error says, and it is retried as before.
func (e *Engine) acknowledged(ctx context.Context, w waited) error {
	if w.wait == nil {
		return nil
	}
	r := e.repl
	got, err := w.wait.Result()
	if err != nil {
		e.topo.failed(err)
		return fmt.Errorf("%w: WAIT: %w", errs.ErrNotReplicated, refusal(err))
	}
	if got >= int64(r.n) {
		return nil
	}
	if n, ok := connectedReplicas(ctx, w.node); ok && n < r.n {
		return fmt.Errorf("%w: %w", errs.ErrNotReplicated, tooFewReplicas{asked: r.n, connected: n})
	}
	return fmt.Errorf("%w: %d of %d replicas acknowledged within %v", errs.ErrNotReplicated, got, r.n, r.timeout)
}

// tooFewReplicas is wrapped by acknowledged's error when the primary has
// fewer replicas connected than the engine waits for: no retry.
type tooFewReplicas struct {
	asked, connected int
}

func (e tooFewReplicas) Error() string {
	unit := "replicas"
	if e.asked == 1 {
		unit = "replica"
	}
	return fmt.Sprintf("asked for %d %s, the primary has %d connected", e.asked, unit, e.connected)
}

// connectedReplicas returns how many replicas node has connected, in any
// state of their sync (INFO replication's connected_slaves), and false
// when it does not say.
func connectedReplicas(ctx context.Context, node pipeliner) (int, bool) {
	if node == nil {
		return 0, false
	}
	info, err := node.Info(ctx, "replication").Result()
	if err != nil {
		return 0, false
	}
	n, err := strconv.Atoi(infoField(info, "connected_slaves"))
	return n, err == nil
}

// unacked reports whether err says that a call changed a hold on the
// primary but was not acknowledged by enough replicas. The call's reply is
// then valid: a grant was made, a level released.
func unacked(err error) bool {
	return errors.Is(err, errs.ErrNotReplicated)
}
