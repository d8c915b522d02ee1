package main

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync/atomic"
	"time"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/lua"
	"github.com/fairlock/fairlock/queue"
	"github.com/redis/go-redis/v9"
)

// roundTrips is a go-redis hook that counts what the clients it is added
// to send: every command or pipeline that goes out is one round trip,
// every new connection one dial. Pub/sub messages pushed by the server are
// not round trips and are not counted.
type roundTrips struct {
	calls atomic.Int64
	dials atomic.Int64
}

var _ redis.Hook = (*roundTrips)(nil)

func (h *roundTrips) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		h.dials.Add(1)
		return next(ctx, network, addr)
	}
}

func (h *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.calls.Add(1)
		return next(ctx, cmd)
	}
}

func (h *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.calls.Add(1)
		return next(ctx, cmds)
	}
}

// count is a reading of a roundTrips hook.
type count struct {
	calls int64
	dials int64
}

func (h *roundTrips) read() count {
	return count{calls: h.calls.Load(), dials: h.dials.Load()}
}

func (c count) minus(o count) count {
	return count{calls: c.calls - o.calls, dials: c.dials - o.dials}
}

// clientSet is the clients one library uses in one run: n lockers of the
// library, each over a go-redis client, or one per master, all with the
// counting hook.
type clientSet struct {
	rdbs    []*redis.Client
	lockers []locker
	closers []func() error
	hook    *roundTrips
}

// openClients opens n lockers of lib: over one client each of the server
// described by opts[0], or, when opts describes several masters, lib's
// quorum lock over one client of each master.
func openClients(lib library, opts []*redis.Options, n int) (*clientSet, error) {
	s := &clientSet{hook: &roundTrips{}}
	for range n {
		rdbs := make([]*redis.Client, len(opts))
		for i, o := range opts {
			rdbs[i] = redis.NewClient(o)
			rdbs[i].AddHook(s.hook)
		}
		s.rdbs = append(s.rdbs, rdbs...)
		var (
			l       locker
			closeFn func() error
			err     error
		)
		switch {
		case len(rdbs) == 1:
			l, closeFn, err = lib.open(rdbs[0])
		case lib.openQuorum == nil:
			err = fmt.Errorf("%s: %w", lib.name, errNoQuorumLock)
		default:
			l, closeFn, err = lib.openQuorum(rdbs)
		}
		if err != nil {
			return nil, errors.Join(err, s.close())
		}
		s.lockers = append(s.lockers, l)
		s.closers = append(s.closers, closeFn)
	}
	return s, nil
}

// close closes the lockers, then the clients under them.
func (s *clientSet) close() error {
	var errs []error
	for _, c := range s.closers {
		errs = append(errs, c())
	}
	for _, rdb := range s.rdbs {
		errs = append(errs, rdb.Close())
	}
	return errors.Join(errs...)
}

// fairClients are fresh fairlock Clients, each over a go-redis client of
// its own, all counted by one scripts hook.
type fairClients struct {
	rdbs    []*redis.Client
	clients []*fairlock.Client
	hook    *scripts
}

// openFairClients opens n Clients of the server described by opts, with
// the given lease.
func openFairClients(opts *redis.Options, n int, lease time.Duration) (*fairClients, error) {
	fc := &fairClients{hook: &scripts{release: releaseCall}}
	for range n {
		rdb := redis.NewClient(opts)
		rdb.AddHook(fc.hook)
		fc.rdbs = append(fc.rdbs, rdb)
		c, err := fairlock.New(rdb, fairlock.WithLease(lease))
		if err != nil {
			return nil, errors.Join(err, fc.close())
		}
		fc.clients = append(fc.clients, c)
	}
	return fc, nil
}

// close closes the Clients, then the go-redis clients under them.
func (fc *fairClients) close() error {
	var errs []error
	for _, c := range fc.clients {
		errs = append(errs, c.Close())
	}
	for _, rdb := range fc.rdbs {
		errs = append(errs, rdb.Close())
	}
	return errors.Join(errs...)
}

// scripts is a go-redis hook that counts script calls (FCALL, EVALSHA or
// EVAL, sent alone or in a pipeline) and round trips (a command or a whole
// pipeline sent), and reads the replies of fairlock's release script.
type scripts struct {
	calls      atomic.Int64
	roundTrips atomic.Int64
	release    lua.Call // the release call, by whose script and function it is known
	// Replies of the release script: it found the owner's hold (the
	// levels left, or a hand-over), found it gone (-1), or failed.
	found, gone, failed atomic.Int64
}

// releaseCall is fairlock's release call as a Client of one server sends
// it: a function of its library, or a script.
var releaseCall = lua.Classic.Release(queue.Keys{}, "", "", "", 0, 0)

var _ redis.Hook = (*scripts)(nil)

func (h *scripts) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *scripts) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.roundTrips.Add(1)
		h.countScript(cmd)
		err := next(ctx, cmd)
		h.readRelease(cmd)
		return err
	}
}

func (h *scripts) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.roundTrips.Add(1)
		for _, cmd := range cmds {
			h.countScript(cmd)
		}
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			h.readRelease(cmd)
		}
		return err
	}
}

func (h *scripts) countScript(cmd redis.Cmder) {
	if slices.Contains(scriptCommands, cmd.Name()) {
		h.calls.Add(1)
	}
}

// readRelease counts the reply of a call of the release function or
// script. A call refused for want of the library or the script, which the
// Client sends again, counts as nothing.
func (h *scripts) readRelease(cmd redis.Cmder) {
	args := cmd.Args()
	if len(args) < 2 {
		return
	}
	body, _ := args[1].(string)
	switch cmd.Name() {
	case "fcall":
		if body != h.release.Function {
			return
		}
	case "evalsha", "eval":
		if cmd.Name() == "eval" {
			sum := sha1.Sum([]byte(body))
			body = hex.EncodeToString(sum[:])
		}
		if body != h.release.Script.Hash() {
			return
		}
	default:
		return
	}
	c, ok := cmd.(*redis.Cmd)
	if !ok {
		return
	}
	v, err := c.Result()
	switch {
	case err != nil && (redis.HasErrorPrefix(err, "NOSCRIPT") || redis.HasErrorPrefix(err, "Function not found")):
	case err != nil:
		h.failed.Add(1)
	case v == int64(-1):
		h.gone.Add(1)
	default:
		h.found.Add(1)
	}
}

// scriptCount is a reading of a scripts hook.
type scriptCount struct{ scripts, roundTrips int64 }

func (h *scripts) read() scriptCount {
	return scriptCount{scripts: h.calls.Load(), roundTrips: h.roundTrips.Load()}
}

func (c scriptCount) minus(o scriptCount) scriptCount {
	return scriptCount{scripts: c.scripts - o.scripts, roundTrips: c.roundTrips - o.roundTrips}
}
