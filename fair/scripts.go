package fair

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/fairlock/fairlock/lua"
)

// Acquire modes.
const (
	modeTry     = "try"
	modeWait    = "wait"
	modeReenter = "reenter"
)

// reply is the answer of one acquire call.
type reply struct {
	granted bool
	token   int64         // when granted
	count   int           // when granted: the owner's levels after the call
	hint    time.Duration // when not granted in wait mode: when to poll again
	joined  bool          // when not granted: this call appended the entry to the queue
}

// randomID returns 16 hex characters: a waiter id or a call id.
func randomID() string {
	return fmt.Sprintf("%016x", rand.Uint64())
}

func ms(d time.Duration) int64 { return d.Milliseconds() }

// acquire runs acquire.lua once, under a fresh call id.
func (l *Mutex) acquire(ctx context.Context, owner, entry string, lease time.Duration, mode string) (reply, error) {
	return l.acquireCall(ctx, randomID(), owner, entry, lease, mode)
}

// acquireCall runs acquire.lua once under the given call id: the same id
// stands for the same call, re-sent.
func (l *Mutex) acquireCall(ctx context.Context, call, owner, entry string, lease time.Duration, mode string) (reply, error) {
	s, err := l.e.scripts(ctx)
	if err != nil {
		return reply{}, err
	}
	receipt := l.keys.Call(call)
	keys := append(l.scripted[:4:4], receipt)
	w := l.runScript(ctx, s.Acquire, keys, receipt, l.e.receiptTTL(),
		owner, entry, ms(lease), ms(l.e.cfg.WaiterTTL), mode, l.keys.Wake, l.e.receiptTTL())
	v, err := w.cmd.Slice()
	l.e.topo.failed(err)
	if err != nil {
		return reply{}, refusal(err)
	}
	n, err := ints(v)
	if err != nil {
		return reply{}, err
	}
	switch {
	case len(n) == 3 && n[0] == 1:
		// Only a grant must reach the replicas: a caller told "busy"
		// holds nothing that a failover could lose.
		return reply{granted: true, token: n[1], count: int(n[2])}, l.acknowledged(w)
	case len(n) == 3 && n[0] == 0:
		return reply{hint: time.Duration(n[1]) * time.Millisecond, joined: n[2] == 1}, nil
	}
	return reply{}, fmt.Errorf("%w: acquire answered %v", errUnexpectedReply, v)
}

// release runs release.lua once, under a fresh call id, and returns the
// owner's remaining levels, or -1 when the owner does not hold the lock.
func (l *Mutex) release(ctx context.Context, owner string, lease time.Duration) (int, error) {
	return l.releaseCall(ctx, randomID(), owner, lease, l.e.receiptTTL())
}

// releaseCall runs release.lua once under the given call id, whose receipt
// is kept for receiptTTL ms. When the engine waits for replicas and the
// release was made but not acknowledged, the count is valid and the error
// wraps errs.NotReplicated.
func (l *Mutex) releaseCall(ctx context.Context, call, owner string, lease time.Duration, receiptTTL int64) (int, error) {
	s, err := l.e.scripts(ctx)
	if err != nil {
		return 0, err
	}
	receipt := l.keys.Call(call)
	keys := append(l.scripted[:4:4], receipt)
	w := l.runScript(ctx, s.Release, keys, receipt, receiptTTL, owner, ms(lease), l.keys.Wake, receiptTTL)
	n, err := w.cmd.Int64()
	l.e.topo.failed(err)
	if err != nil {
		return int(n), refusal(err)
	}
	if n < 0 {
		return -1, nil // not held: nothing changed, nothing to acknowledge
	}
	return int(n), l.acknowledged(w)
}

// renew runs renew.lua once: true when the owner still holds the lock. It
// publishes nothing, so it is the same script in both sets.
func (l *Mutex) renew(ctx context.Context, owner string, lease time.Duration) (bool, error) {
	n, err := lua.RenewScript.Run(ctx, l.e.rdb, l.scripted[:1], owner, ms(lease)).Int64()
	l.e.topo.failed(err)
	return n == 1, refusal(err)
}

// cancel runs cancel.lua once: true when a level handed to entry was given
// back.
func (l *Mutex) cancel(ctx context.Context, owner, entry string) (bool, error) {
	s, err := l.e.scripts(ctx)
	if err != nil {
		return false, err
	}
	n, err := s.Cancel.Run(ctx, l.e.rdb, l.scripted, owner, entry, l.keys.Wake).Int64()
	l.e.topo.failed(err)
	return n == 1, refusal(err)
}

// forceUnlock runs forceunlock.lua once and returns its reply (1: a hold
// was removed), with the error as the server gave it.
func (l *Mutex) forceUnlock(ctx context.Context) (int64, error) {
	s, err := l.e.scripts(ctx)
	if err != nil {
		return 0, err
	}
	n, err := s.ForceUnlock.Run(ctx, l.e.rdb, l.scripted, l.keys.Wake).Int64()
	l.e.topo.failed(err)
	return n, err
}

// ints converts a script's flat array of integers.
func ints(v []any) ([]int64, error) {
	out := make([]int64, len(v))
	for i, x := range v {
		switch x := x.(type) {
		case int64:
			out[i] = x
		case string:
			n, err := strconv.ParseInt(x, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("%w: %q", errUnexpectedReply, x)
			}
			out[i] = n
		default:
			return nil, fmt.Errorf("%w: %T", errUnexpectedReply, x)
		}
	}
	return out, nil
}
