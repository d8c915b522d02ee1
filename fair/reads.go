package fair

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/fairlock/fairlock/internal/errs"
	"github.com/fairlock/fairlock/internal/shortly"
	"github.com/fairlock/fairlock/queue"
)

// read runs one read of Redis for a caller (see within): it returns when
// ctx ends, with ctx's error, even while Redis does not answer, and the
// read, bounded by the call timeout, ends in the background. A read that
// fails in a way a failover explains asks for a fresh map of the
// deployment, as a script's call does (see topology): a Client that only
// reads would otherwise send its reads to a dead master until the client
// library reloads its map by itself. A server that says it will be ready
// shortly (loading its data set, say) is asked again until it answers or
// the read's bound passes (see shortly).
func read[T any](e *Engine, ctx context.Context, f func(ctx context.Context) (T, error)) (T, error) {
	if err := e.checkLayout(ctx); err != nil {
		var zero T
		return zero, err
	}
	return within(e, ctx, func() (T, error) {
		rctx, cancel := e.bounded(ctx)
		defer cancel()
		sent := time.Now()
		v, err := shortly.Do(rctx, func() (T, error) { return f(rctx) })
		e.called(sent, err)
		return v, err
	}, nil)
}

// HoldCount returns the levels owner holds, 0 when it holds none.
func (l *Mutex) HoldCount(ctx context.Context, owner string) (int, error) {
	return read(l.e, ctx, func(ctx context.Context) (int, error) {
		v, err := l.e.rdb.HMGet(ctx, l.keys.Lock, "owner", "count").Result()
		if err != nil {
			return 0, refusal(err)
		}
		if o, _ := v[0].(string); o != owner {
			return 0, nil
		}
		c, _ := v[1].(string)
		n, err := strconv.Atoi(c)
		if err != nil {
			return 0, fmt.Errorf("%w: count %q", errs.ErrUnexpectedReply, c)
		}
		return n, nil
	})
}

// Took reports whether h was taken through this lock's engine, which makes
// it a hold of this lock when its keys are the same.
func (l *Mutex) Took(h Held) bool {
	x, ok := h.(*Hold)
	return ok && l.e.Took(x)
}

// Took reports whether h was taken through this engine.
func (e *Engine) Took(h *Hold) bool { return h.l.e == e }

// Holds reports whether Redis, as l's engine reaches it, has h as the hold
// of l: the same owner under the same fencing token. It tells a hold of
// this lock taken through another engine (another Client of the same
// deployment) from a hold of a lock that only has the same keys (the same
// name and prefix on another deployment or DB).
//
// A weighted lock's hold is its owner's record in the lock's hash, under
// the same token, with a level of the hold's kind (a write level for a
// RWMutex's write hold, a shared level otherwise).
func (l *Mutex) Holds(ctx context.Context, held Held) (bool, error) {
	h, ok := held.(*Hold)
	if !ok {
		return false, nil // a quorum's hold: never one of this lock
	}
	if l.w != nil {
		return l.holdsWeighted(ctx, h)
	}
	return read(l.e, ctx, func(ctx context.Context) (bool, error) {
		v, err := l.e.rdb.HMGet(ctx, l.keys.Lock, "owner", "token").Result()
		if err != nil {
			return false, refusal(err)
		}
		owner, _ := v[0].(string)
		token, _ := v[1].(string)
		return owner == h.owner && token == strconv.FormatInt(h.token, 10), nil
	})
}

// holdsWeighted is Holds for a weighted lock.
func (l *Mutex) holdsWeighted(ctx context.Context, h *Hold) (bool, error) {
	return read(l.e, ctx, func(ctx context.Context) (bool, error) {
		rec, err := l.e.rdb.HMGet(ctx, l.keys.Lock, "o:"+h.owner).Result()
		if err != nil {
			return false, refusal(err)
		}
		s, ok := rec[0].(string)
		if !ok {
			return false, nil
		}
		r, err := queue.ParseHolder(s)
		if err != nil {
			return false, fmt.Errorf("%w: %w", errs.ErrUnexpectedReply, err)
		}
		levels := r.Shared
		if h.Exclusive() {
			levels = r.Excl
		}
		return r.Token == h.token && levels > 0, nil
	})
}

// IsLocked reports whether anyone holds the lock.
func (l *Mutex) IsLocked(ctx context.Context) (bool, error) {
	return read(l.e, ctx, func(ctx context.Context) (bool, error) {
		n, err := l.e.rdb.Exists(ctx, l.keys.Lock).Result()
		return n == 1, refusal(err)
	})
}

// TTL returns the hold's remaining lease, 0 when the lock is free, as
// Redis has it (held is not needed).
func (l *Mutex) TTL(ctx context.Context, _ Held) (time.Duration, error) {
	return read(l.e, ctx, func(ctx context.Context) (time.Duration, error) {
		d, err := l.e.rdb.PTTL(ctx, l.keys.Lock).Result()
		if err != nil {
			return 0, refusal(err)
		}
		switch {
		case d == -2:
			return 0, nil // no such key: go-redis keeps PTTL's -2 as is
		case d < 0:
			return 0, fmt.Errorf("%w: lock key %q has no expiry", errs.ErrUnexpectedReply, l.keys.Lock)
		}
		return d, nil
	})
}

// ForceUnlock removes the hold whoever owns it and hands the lock to the
// next live waiter. It reports whether a hold was removed.
//
// The script runs detached from ctx, bounded by the call timeout, on a
// goroutine of the engine. When ctx ends first, ForceUnlock returns ctx's
// error at once and the script goes on in the background (Close waits for
// it): the caller then does not know whether the hold is removed. The
// script may have run, may still run once Redis answers, or may fail; its
// outcome is logged.
func (l *Mutex) ForceUnlock(ctx context.Context) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	return within(l.e, ctx, func() (bool, error) {
		cctx, cancel := l.e.detached(ctx)
		defer cancel()
		removed, err := l.forceUnlock(cctx)
		if publishRefused(err) {
			return false, fmt.Errorf("fairlock: force-unlock done and the lock handed on, but %w", refusal(err))
		}
		return removed, refusal(err)
	}, func(removed bool, err error) {
		l.e.log.Info("fairlock: force-unlock answered after its caller gave up",
			l.lockAttrs("removed", removed, "err", err)...)
	})
}

// ForceRelease removes the hold of owner on a weighted lock, every level
// of it, whoever holds it, and grants the waiters that now fit. It
// reports whether a hold was removed. The holder's Client is told, as by
// ForceUnlock, and the script runs as ForceUnlock's does: detached from
// ctx, bounded by the call timeout; when ctx ends first it returns ctx's
// error and the script goes on in the background.
func (l *Mutex) ForceRelease(ctx context.Context, owner string) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	return within(l.e, ctx, func() (bool, error) {
		cctx, cancel := l.e.detached(ctx)
		defer cancel()
		removed, err := l.forceRelease(cctx, owner)
		if publishRefused(err) {
			return false, fmt.Errorf("fairlock: force-release done and the waiters that fit granted, but %w", refusal(err))
		}
		return removed, refusal(err)
	}, func(removed bool, err error) {
		l.e.log.Info("fairlock: force-release answered after its caller gave up",
			"lock", l.keys.Name, "owner", owner, "removed", removed, "err", err)
	})
}
