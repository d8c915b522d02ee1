package fair

import (
	"context"
	"time"

	"github.com/fairlock/fairlock/internal/shortly"
	"github.com/fairlock/fairlock/lua"
	"github.com/fairlock/fairlock/queue"
	"github.com/redis/go-redis/v9"
)

func ms(d time.Duration) int64 { return d.Milliseconds() }

// acquire runs acquire.lua once, under a fresh call id.
func (l *Mutex) acquire(ctx context.Context, owner, entry string, lease time.Duration, mode string) (queue.Reply, error) {
	return l.acquireCall(ctx, queue.NewID(), Request{Owner: owner, Lease: lease}, entry, mode)
}

// acquireCall runs acquire.lua once for req under the given call id: the
// same id stands for the same call, re-sent. A candidate's call (req.Value
// set) carries its value.
func (l *Mutex) acquireCall(ctx context.Context, call string, req Request, entry, mode string) (queue.Reply, error) {
	if l.w != nil {
		return l.weightedAcquire(ctx, call, req.Owner, entry, req.Lease, mode)
	}
	ttl := l.e.receiptTTL()
	return l.e.acquiring(ctx, func(s *lua.Scripts) lua.Call {
		if req.Value != "" {
			return s.Campaign(l.keys, call, req.Owner, entry, ms(req.Lease), ms(l.e.cfg.WaiterTTL), mode, ttl, req.Value)
		}
		return s.Acquire(l.keys, call, req.Owner, entry, ms(req.Lease), ms(l.e.cfg.WaiterTTL), mode, ttl)
	}, l.keys.Call(call), ttl, lua.ReadAcquire)
}

// acquiring runs one call of a script that takes locks (made from the
// engine's set of scripts by build; its receipt, if any, kept for
// receiptTTL ms) and reads its reply with read. A grant counts once the
// replicas acknowledged it (see acknowledged): only a grant must reach
// them, as a caller told "busy" holds nothing a failover could lose.
func (e *Engine) acquiring(ctx context.Context, build func(*lua.Scripts) lua.Call, receipt string, receiptTTL int64, read func(*redis.Cmd) (queue.Reply, error)) (queue.Reply, error) {
	s, err := e.scripts(ctx)
	if err != nil {
		return queue.Reply{}, err
	}
	sent := time.Now()
	w := e.runScript(ctx, build(s), receipt, receiptTTL)
	rep, err := read(w.cmd)
	e.called(sent, err)
	switch {
	case err != nil:
		return queue.Reply{}, refusal(err)
	case rep.Granted:
		return rep, e.acknowledged(ctx, w)
	}
	return rep, nil
}

// release runs release.lua once, under a fresh call id, and returns the
// owner's remaining levels, or -1 when the owner does not hold the lock.
func (l *Mutex) release(ctx context.Context, owner string, lease time.Duration) (int, error) {
	return l.releaseCall(ctx, queue.NewID(), owner, lease, l.e.receiptTTL())
}

// releaseCall runs release.lua once under the given call id, whose receipt
// is kept for receiptTTL ms. When the engine waits for replicas and the
// release was made but not acknowledged, the count is valid and the error
// wraps errs.ErrNotReplicated.
func (l *Mutex) releaseCall(ctx context.Context, call, owner string, lease time.Duration, receiptTTL int64) (int, error) {
	s, err := l.e.scripts(ctx)
	if err != nil {
		return 0, err
	}
	sent := time.Now()
	w := l.e.runScript(ctx, l.releaseScript(s, call, owner, lease, receiptTTL), l.keys.Call(call), receiptTTL)
	rep, err := lua.ReadRelease(w.cmd)
	l.e.called(sent, err)
	if err != nil {
		return rep.Count, refusal(err)
	}
	l.handOff(rep)
	if rep.Count < 0 {
		return -1, nil // not held: nothing changed, nothing to acknowledge
	}
	return rep.Count, l.e.acknowledged(ctx, w)
}

// releaseScript builds the call of the lock's release script (release.lua,
// or a weighted lock's wrelease.lua) under call id call.
func (l *Mutex) releaseScript(s *lua.Scripts, call, owner string, lease time.Duration, receiptTTL int64) lua.Call {
	if l.w != nil {
		return s.WRelease(l.keys, call, owner, l.e.tag, ms(lease), receiptTTL, l.level)
	}
	return s.Release(l.keys, call, owner, l.e.tag, ms(lease), receiptTTL)
}

// renewCall builds the call of the lock's renewal of owner's hold.
func (l *Mutex) renewCall(owner string, lease time.Duration) lua.Call {
	if l.w != nil {
		// A hold was granted, so the engine has decided its set.
		s := lua.Classic
		if w := l.e.wake.Load(); w != nil {
			s = w.scripts
		}
		return s.WRenew(l.keys, owner, ms(lease))
	}
	return lua.Renew(l.keys, owner, ms(lease))
}

// handOff hands the wake messages of a release to the engine's own
// waiters, when the release granted the lock to some (a Mutex's to one, a
// weighted lock's to as many as fit): the script published nothing for
// them (a local hand-off), and each message reaches its waiter as if it
// had come by pub/sub. A waiter that is gone by then (its Lock returned)
// ignores it, as it would a push.
func (l *Mutex) handOff(rep queue.Released) {
	for _, wake := range rep.Wakes {
		l.e.hub.Deliver(l.wakeChannel, wake)
	}
}

// releaseUnwaited runs release.lua once, under a fresh call id, and waits
// for no replicas whatever the engine's configuration: see
// giveBackUnacked.
func (l *Mutex) releaseUnwaited(ctx context.Context, owner string) (int, error) {
	s, err := l.e.scripts(ctx)
	if err != nil {
		return 0, err
	}
	sent := time.Now()
	rep, err := lua.ReadRelease(l.e.run(ctx, l.releaseScript(s, queue.NewID(), owner, 0, l.e.receiptTTL())))
	l.e.called(sent, err)
	if err == nil {
		l.handOff(rep)
	}
	return rep.Count, refusal(err)
}

// cancel runs cancel.lua once: true when a level handed to entry was given
// back.
func (l *Mutex) cancel(ctx context.Context, owner, entry string) (bool, error) {
	ok, err := l.e.flagCall(ctx, func(s *lua.Scripts) lua.Call {
		if l.w != nil {
			return s.WCancel(l.keys, owner, entry)
		}
		return s.Cancel(l.keys, owner, entry)
	})
	return ok, refusal(err)
}

// forceUnlock runs forceunlock.lua once: true when a hold was removed,
// with the error as the server gave it.
func (l *Mutex) forceUnlock(ctx context.Context) (bool, error) {
	return l.e.flagCall(ctx, func(s *lua.Scripts) lua.Call { return s.ForceUnlock(l.keys) })
}

// forceRelease runs wforce.lua once: true when owner's hold was removed,
// with the error as the server gave it.
func (l *Mutex) forceRelease(ctx context.Context, owner string) (bool, error) {
	return l.e.flagCall(ctx, func(s *lua.Scripts) lua.Call { return s.WForce(l.keys, owner) })
}

// flagCall runs one call of a script that answers a flag (made from the
// engine's set of scripts by build), with the error as the server gave
// it.
func (e *Engine) flagCall(ctx context.Context, build func(*lua.Scripts) lua.Call) (bool, error) {
	s, err := e.scripts(ctx)
	if err != nil {
		return false, err
	}
	sent := time.Now()
	ok, err := lua.ReadFlag(e.run(ctx, build(s)))
	e.called(sent, err)
	return ok, err
}

// run sends one call of a script with the engine's client, again while
// the server says it will be ready shortly (see shortly), until ctx ends.
func (e *Engine) run(ctx context.Context, call lua.Call) *redis.Cmd {
	cmd, err := shortly.Do(ctx, func() (*redis.Cmd, error) {
		cmd := e.runner.Run(ctx, e.rdb, call)
		return cmd, cmd.Err()
	})
	if err != nil {
		cmd.SetErr(err) // the reply that kept it from running, and ctx's error
	}
	return cmd
}
