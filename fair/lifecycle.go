package fair

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fairlock/fairlock/internal/errs"
)

// lifecycle is what an Engine and a Quorum share from New to Close: the
// calls in flight, the goroutines they leave running, the live holds (of
// type H), and Close's bound. Every goroutine it runs is waited for by
// Close, and every call to Redis made through detached or bounded is
// given up one call timeout after Close started, so that Close returns
// within about that even when Redis does not answer.
type lifecycle[H comparable] struct {
	callTimeout time.Duration
	closing     chan struct{} // closed when Close starts
	// stopped is cancelled one call timeout after Close starts (or when it
	// ends): every call still out then is given up.
	stopped context.Context
	stop    context.CancelFunc
	// closeBy is when stopped is cancelled, in Unix nanoseconds, once
	// Close has started (0 before): the latest deadline of any call.
	closeBy atomic.Int64

	mu     sync.Mutex
	closed bool // guarded by mu
	// holds are the live holds, and those Close ended whose release is
	// not answered yet; guarded by mu
	holds     map[H]struct{}
	ops       sync.WaitGroup // calls in flight; Add only under mu while !closed
	wg        sync.WaitGroup // goroutines left running; Add only within an op or a hold
	closeOnce sync.Once
}

func (lc *lifecycle[H]) init(callTimeout time.Duration) {
	lc.callTimeout = callTimeout
	lc.closing = make(chan struct{})
	lc.stopped, lc.stop = context.WithCancel(context.Background())
	lc.holds = make(map[H]struct{})
}

// begin registers a call in flight, or fails with errs.ErrClosed; the
// call ends with ops.Done.
func (lc *lifecycle[H]) begin() error {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	if lc.closed {
		return errs.ErrClosed
	}
	lc.ops.Add(1)
	return nil
}

// Closed reports whether Close has been called.
func (lc *lifecycle[H]) Closed() bool {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	return lc.closed
}

// goUnlessClosed runs f in a goroutine that Close waits for, unless Close
// has started; it reports whether f was started. It is for work begun
// outside a call in flight (an Unlock), where the wait group may
// otherwise be added to while Close waits on it.
func (lc *lifecycle[H]) goUnlessClosed(f func()) bool {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	if lc.closed {
		return false
	}
	lc.wg.Go(f)
	return true
}

// addHold records a live hold, unless Close has started: then it reports
// false and the hold must end.
func (lc *lifecycle[H]) addHold(h H) bool {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	if lc.closed {
		return false
	}
	lc.holds[h] = struct{}{}
	return true
}

// dropHold forgets a hold that ended.
func (lc *lifecycle[H]) dropHold(h H) {
	lc.mu.Lock()
	delete(lc.holds, h)
	lc.mu.Unlock()
}

// liveHolds returns the holds live now (and, once Close started, those
// it ended whose release is not answered yet).
func (lc *lifecycle[H]) liveHolds() []H {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	holds := make([]H, 0, len(lc.holds))
	for h := range lc.holds {
		holds = append(holds, h)
	}
	return holds
}

// shut runs Close once: no call begins any more, closing is closed, and
// at once, side by side, the holds live then are ended and released by
// abandon (all of them in one call, so that their releases can go out
// together), the calls in flight are waited for, and so is each of also;
// then every goroutine left running. Calls to Redis still out one call
// timeout after shut started are given up (see detached), so that it
// returns within about that.
func (lc *lifecycle[H]) shut(abandon func([]H), also ...func()) {
	lc.closeOnce.Do(func() {
		lc.mu.Lock()
		lc.closed = true
		lc.mu.Unlock()
		holds := lc.liveHolds()
		lc.closeBy.Store(time.Now().Add(lc.callTimeout).UnixNano())
		bound := time.AfterFunc(lc.callTimeout, lc.stop)
		defer bound.Stop()
		defer lc.stop()
		close(lc.closing)

		var wg sync.WaitGroup
		for _, f := range also {
			wg.Go(f)
		}
		wg.Go(lc.ops.Wait)
		wg.Go(func() { abandon(holds) })
		wg.Wait()
		lc.wg.Wait()
	})
}

// closeContext returns the context of the calls Close makes itself (the
// releases of the holds it ends): it ends at the bound of Close, with a
// deadline there (see detached). It must be called once Close started.
func (lc *lifecycle[H]) closeContext() (context.Context, context.CancelFunc) {
	return lc.bound(context.Background(), time.Time{})
}

// detached returns a context for a state-changing call made on behalf of
// ctx: it keeps ctx's values but not its cancellation, so the call is
// never abandoned half-way, and it is bounded by the call timeout (and by
// the bound of Close). Once Close has started, its deadline is no later
// than the bound of Close: go-redis stops a read that blocks at the
// context's deadline, not at its cancellation, so a call made during
// Close (the clean-up of a call answered late) must not be given a later
// one.
func (lc *lifecycle[H]) detached(ctx context.Context) (context.Context, context.CancelFunc) {
	return lc.bound(context.WithoutCancel(ctx), callBound(ctx))
}

// boundKey carries, in a caller's context, a time by which every call
// made for it must end (see withBound).
type boundKey struct{}

// withBound returns ctx, whose calls detached and bounded bound by by as
// well: by the caller's deadline, for a call run on its goroutine.
func withBound(ctx context.Context, by time.Time) context.Context {
	return context.WithValue(ctx, boundKey{}, by)
}

// callBound returns the time withBound gave ctx, or the zero time. It is
// read from the caller's context itself: a context.WithoutCancel of it
// would allocate at every lookup.
func callBound(ctx context.Context) time.Time {
	by, _ := ctx.Value(boundKey{}).(time.Time)
	return by
}

// bounded returns ctx bounded as detached bounds a call: by the call
// timeout and by the bound of Close. It is the context of a read made on
// behalf of ctx, which stops when ctx ends.
func (lc *lifecycle[H]) bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	return lc.bound(ctx, callBound(ctx))
}

// bound returns ctx with a deadline at the call timeout from now, or
// earlier at the bound of Close or at by (unless zero).
func (lc *lifecycle[H]) bound(ctx context.Context, by time.Time) (context.Context, context.CancelFunc) {
	deadline := time.Now().Add(lc.callTimeout)
	if at := lc.closeBy.Load(); at != 0 && at < deadline.UnixNano() {
		deadline = time.Unix(0, at)
	}
	if !by.IsZero() && by.Before(deadline) {
		deadline = by // a call made on the caller's goroutine (see callInline)
	}
	// No hook on stopped is needed: a call that read closeBy before Close
	// stored it began before, so its deadline comes no later than the
	// bound of Close, which is armed after the store.
	return context.WithDeadline(ctx, deadline)
}
