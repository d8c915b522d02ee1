package fairlock

import (
	"context"

	"github.com/google/uuid"

	"github.com/fairlock/fairlock/fair"
	"github.com/fairlock/fairlock/lua"
	"github.com/fairlock/fairlock/queue"
)

// weighted is what a Semaphore and a RWMutex handle share: a weighted lock
// of one name and kind (see "Weighted locks" in docs/algorithm.md).
type weighted struct {
	c     *Client
	name  string
	keys  queue.Keys
	w     *fair.Weights
	key   holdKey
	lease leaseConfig
	err   error // invalid name, capacity or option: returned by every method
	isNil error // what a call on a nil handle returns
}

// newWeighted returns the handle of the weighted lock of kind named name
// with capacity (a Semaphore's permits; 0 for a RWMutex), or one whose
// every call fails with the error of a bad name or option.
func newWeighted(c *Client, name, kind string, capacity int64, opts []HandleOption, isNil error) weighted {
	h := weighted{c: c, name: name, isNil: isNil}
	if c == nil {
		h.err = errNilClient
		return h
	}
	if c.engine == nil {
		h.err = errNotOnQuorum("Semaphore or RWMutex")
		return h
	}
	h.lease, h.err = c.leaseOf(opts)
	if h.err != nil {
		return h
	}
	h.keys, h.err = queue.Weighted(c.cfg.prefix, name, kind)
	h.w = fair.NewWeights(capacity)
	h.key = holdKey{lock: h.keys.Lock}
	return h
}

// usable returns the error that stops any call: a bad handle, a nil
// context, a closed Client.
func (h *weighted) usable(ctx context.Context) error {
	switch {
	case h.err != nil:
		return h.err
	case h.c == nil:
		return h.isNil
	case ctx == nil:
		return errNilContext
	case h.c.closed():
		return ErrClosed
	}
	return nil
}

// take waits in line (or, without wait, tries once) for a fresh hold at
// level, under an owner id of its own, and returns its context.
func (h *weighted) take(ctx context.Context, level lua.Level, wait bool) (context.Context, error) {
	l := h.c.engine.Weighted(h.keys, h.w, level)
	held, err := l.Lock(ctx, fair.Request{Owner: uuid.NewString(), Lease: h.lease.d, Fixed: h.lease.fixed, Wait: wait})
	if err != nil {
		return nil, err
	}
	return withHoldOf(ctx, h.key, held), nil
}

// newest returns the newest hold of this lock that ctx carries for which
// keep is true (see heldOf); nil when none.
func (h *weighted) newest(ctx context.Context, keep func(fair.Held) bool) (fair.Held, error) {
	return heldOf(ctx, h.key, h.c.engine.Weighted(h.keys, h.w, lua.Level{}), keep)
}

// alive reports whether a hold has not ended.
func alive(held fair.Held) bool { return held.Context().Err() == nil }

// unlock gives up one level of the newest hold ctx carries for which
// keep is true: ErrNotHeld when there is none.
func (h *weighted) unlock(ctx context.Context, keep func(fair.Held) bool) error {
	if err := h.usable(ctx); err != nil {
		return notHeld(err)
	}
	held, err := h.newest(ctx, keep)
	switch {
	case err != nil:
		return err
	case held == nil:
		return ErrNotHeld
	}
	return held.Unlock(ctx)
}

// Token returns the fencing token of the newest hold of the lock that ctx
// carries: ErrNotHeld when it carries none.
func (h *weighted) token(ctx context.Context) (int64, error) {
	if err := h.usable(ctx); err != nil {
		return 0, notHeld(err)
	}
	held, err := h.newest(ctx, anyHold)
	switch {
	case err != nil:
		return 0, err
	case held == nil:
		return 0, ErrNotHeld
	}
	return held.Token(ctx)
}

// forceRelease is ForceRelease of a Semaphore or a RWMutex.
func (h *weighted) forceRelease(ctx context.Context, owner string) (bool, error) {
	if err := h.usable(ctx); err != nil {
		return false, err
	}
	if err := queue.ValidateOwner(owner); err != nil {
		return false, err
	}
	return h.c.engine.Weighted(h.keys, h.w, lua.Level{}).ForceRelease(ctx, owner)
}
