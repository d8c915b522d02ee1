package fair

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock/fairlock/lua"
	"github.com/fairlock/fairlock/queue"
)

// A weighted lock (a Semaphore, a RWMutex) is held by many holders at a
// time, each with a weight, as long as their weights fit in its capacity
// (see "Weighted locks" in lua/lib.lua). Its calls wait, hold, renew and
// give up exactly as a Mutex's do: a *Mutex handle of a weighted lock is
// bound to one level (a weight, and for a RWMutex's writer exclusive), and
// only its scripts differ. So the waiting engine, holds, the watchdog and
// the release paths serve it unchanged.

// Weights is what the handles of one weighted lock share: for a
// Semaphore, the capacity its handle believes in.
type Weights struct {
	capacity atomic.Int64 // a Semaphore's permits; 0 for a RWMutex
	rw       bool         // a RWMutex's; fixed
}

// NewWeights returns the shared part of a weighted lock: a Semaphore's
// with capacity permits, or a RWMutex's with capacity 0.
func NewWeights(capacity int64) *Weights {
	w := &Weights{rw: capacity == 0}
	w.capacity.Store(capacity)
	return w
}

// Capacity returns the capacity the handle believes in; SetCapacity
// changes it.
func (w *Weights) Capacity() int64           { return w.capacity.Load() }
func (w *Weights) SetCapacity(permits int64) { w.capacity.Store(permits) }

// Weighted returns the handle of the weighted lock of keys (made by
// queue.Weighted) at one level: its calls ask for level.Weight, as a
// writer when level.Excl.
func (e *Engine) Weighted(keys queue.Keys, w *Weights, level lua.Level) *Mutex {
	return &Mutex{e: e, keys: keys, wakeChannel: keys.ClientWake(e.tag), w: w, level: level, kind: weightedKind(w, level.Excl)}
}

// weightedAcquire runs wacquire.lua once under call id call.
func (l *Mutex) weightedAcquire(ctx context.Context, call, owner, entry string, lease time.Duration, mode string) (queue.Reply, error) {
	ttl := l.e.receiptTTL()
	return l.e.acquiring(ctx, func(s *lua.Scripts) lua.Call {
		return s.WAcquire(l.keys, call, owner, entry, ms(lease), ms(l.e.cfg.WaiterTTL), mode, ttl, l.level, l.w.Capacity())
	}, l.keys.Call(call), ttl, func(cmd *redis.Cmd) (queue.Reply, error) {
		rep, err := lua.ReadAcquire(cmd)
		return rep, lua.WeightedRefusal(err)
	})
}

// Resize stores permits as the Semaphore's capacity in Redis, which grants
// the waiters that now fit, and makes it the handles' own. It returns the
// capacity stored before, 0 when none was (nothing holds or waits: the
// next grant stores its caller's). When ctx ends before Redis answers,
// Resize returns ctx's error at once, and the change may still be made
// once Redis answers (its outcome is logged).
func (l *Mutex) Resize(ctx context.Context, permits int64) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if err := l.e.begin(); err != nil {
		return 0, err
	}
	defer l.e.ops.Done()
	l.w.SetCapacity(permits)
	// As ForceUnlock: the script runs detached from ctx, bounded by the
	// call timeout, and the caller gets ctx's error as soon as ctx ends.
	return within(l.e, ctx, func() (int64, error) {
		cctx, cancel := l.e.detached(ctx)
		defer cancel()
		s, err := l.e.scripts(cctx)
		if err != nil {
			return 0, err
		}
		sent := time.Now()
		before, err := lua.ReadCount(l.e.run(cctx, s.WResize(l.keys, permits)))
		l.e.called(sent, err)
		return before, refusal(err)
	}, func(before int64, err error) {
		l.e.log.Info("fairlock: a change of capacity answered after its caller gave up",
			l.lockAttrs("permits", permits, "err", err)...)
	})
}
