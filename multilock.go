package fairlock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fairlock/fairlock/fair"
	"github.com/fairlock/fairlock/queue"
)

// MaxMultiNames is the most names one MultiLock takes, counted after
// duplicates are dropped.
const MaxMultiNames = 64

// MultiLock is a handle on several named locks taken together: all of
// them or none. Its methods are safe for concurrent use. Each name is the
// lock a Mutex of that name is, so MultiLock and Mutex callers of the same
// names exclude each other.
//
// How it waits depends on where the names live:
//   - On one server (a *redis.Client, plain or following sentinels),
//     Lock joins every name's line at once with one entry, a ticket, and
//     is granted every name at once when its ticket heads every line and
//     none of the names is held. It holds nothing while it waits, and
//     nobody passes it: the oldest waiter of a name is served first,
//     whether it waits for that name alone or for several.
//   - On a Redis Cluster or a Ring, whose names live on different
//     servers, Lock takes the names one after another in one order that
//     every Client follows (bytewise on their Redis keys), waiting in
//     each name's FIFO line while it holds the names before it. The
//     price: a waiting MultiLock holds the names that come before the
//     one it waits for.
//
// Either way, MultiLock callers whose sets overlap, and Mutex callers of
// single names, never deadlock; docs/algorithm.md gives the argument.
type MultiLock struct {
	c     *Client
	locks []*Mutex // in the order they are taken; nil when err != nil
	err   error    // invalid names or option: returned by every method
}

// MultiLock returns a handle on the locks of names, taken together. A
// name given twice counts once. opts apply to every name, as they do to a
// Mutex. No names, an invalid name, or more than MaxMultiNames names make
// every method fail: with ErrInvalidName, or ErrTooManyNames.
func (c *Client) MultiLock(names []string, opts ...HandleOption) *MultiLock {
	if c == nil {
		return &MultiLock{err: errNilClient}
	}
	ml := &MultiLock{c: c}
	if c.engine == nil {
		ml.err = errNotOnQuorum("MultiLock")
		return ml
	}
	if len(names) == 0 {
		ml.err = fmt.Errorf("%w: a MultiLock needs at least one name", ErrInvalidName)
		return ml
	}
	seen := make(map[string]bool, len(names))
	for _, name := range names {
		if seen[name] {
			continue
		}
		seen[name] = true
		m := c.Mutex(name, opts...)
		if m.err != nil {
			ml.err = m.err
			return ml
		}
		ml.locks = append(ml.locks, m)
	}
	if len(ml.locks) > MaxMultiNames {
		ml.err = fmt.Errorf("%w: %d names, more than %d", ErrTooManyNames, len(ml.locks), MaxMultiNames)
		ml.locks = nil
		return ml
	}
	slices.SortFunc(ml.locks, func(a, b *Mutex) int { return cmp.Compare(a.key.lock, b.key.lock) })
	return ml
}

// Names returns the lock names, each once, in the order Lock takes them.
func (ml *MultiLock) Names() []string {
	if ml == nil {
		return nil
	}
	names := make([]string, len(ml.locks))
	for i, m := range ml.locks {
		names[i] = m.name
	}
	return names
}

// usable returns the error that stops any call: a bad handle, a nil
// context, a closed Client.
func (ml *MultiLock) usable(ctx context.Context) error {
	switch {
	case ml == nil || (ml.err == nil && ml.c == nil):
		return errNilMultiLock
	case ml.err != nil:
		return ml.err
	}
	return ml.locks[0].usable(ctx)
}

// Lock waits until it holds every name, or until ctx ends. It returns a
// context that carries a hold of each name:
//   - it keeps ctx's values but not its deadline or cancellation: ctx
//     bounds only the wait;
//   - it is cancelled as soon as any of the holds ends: after Unlock, or
//     when a lease is lost (context.Cause is then ErrLeaseLost, naming the
//     lock), or at Close (cause ErrClosed). Pass it to the work done under
//     the locks.
//
// Each name is also held as by Mutex.Lock: the returned context works
// with the Mutex of any of the names (Token, Unlock of that name alone,
// re-entry). A context that already carries holds of some of the names
// re-enters those, one level each, and takes the rest; the names it held
// before stay held while Lock waits for the others, whatever their order.
//
// All or none: when Lock fails (ctx ended, Close, a Redis error, or on a
// Cluster or Ring the lease of a name taken on the way lost, as a fixed
// lease that runs out while Lock waits for a later name), it holds none
// of the names, has left every line it joined, and has given back every
// name it took on the way, one level each for names it re-entered. A give-back Redis does not answer goes on in the
// background until Redis takes it or the lease runs out, as an Unlock's.
func (ml *MultiLock) Lock(ctx context.Context) (context.Context, error) {
	return ml.acquire(ctx, true)
}

// TryLock takes every name only if that needs no waiting: it never joins
// a line, and fails with ErrLocked (naming the locks it tried) when any
// name is held by another owner or has anyone waiting for it. It then
// holds none of them. A context that carries live holds of
// some names re-enters them, as with Lock.
func (ml *MultiLock) TryLock(ctx context.Context) (context.Context, error) {
	return ml.acquire(ctx, false)
}

func (ml *MultiLock) acquire(ctx context.Context, wait bool) (context.Context, error) {
	if err := ml.usable(ctx); err != nil {
		return nil, err
	}
	owner, shared, err := lockOwner(ctx)
	if err != nil {
		return nil, err
	}
	a := ml.begin(ctx, owner, shared, wait)
	defer a.end()
	// The names the context holds already are re-entered first; then, on
	// one server, the holds a shared owner has elsewhere are joined, and
	// the rest taken with one ticket; elsewhere the rest are taken one
	// after another in key order.
	rest, err := a.reenter()
	if err == nil && len(rest) >= 2 && ml.c.engine.OneServer() {
		if rest, err = a.join(rest); err == nil {
			err = a.ticket(rest)
		}
	} else if err == nil {
		err = a.oneByOne(rest)
	}
	if err != nil {
		return nil, a.fail(err)
	}
	return ml.withHolds(ctx, a.holds), nil
}

// acquisition is one Lock or TryLock call of a MultiLock under way.
type acquisition struct {
	ml    *MultiLock
	ctx   context.Context         // the caller's
	wctx  context.Context         // ctx, and also ended when a hold taken ends
	stop  context.CancelCauseFunc // ends wctx
	req   fair.Request            // Lease and Fixed are set per lock
	holds []fair.Held             // holds[i] is the hold of ml.locks[i], once taken
	took  []int                   // the indexes of the holds taken, in the order taken
	// unhooks stop the watches of the holds taken (see keep).
	unhooks []func() bool
}

func (ml *MultiLock) begin(ctx context.Context, owner string, shared, wait bool) *acquisition {
	wctx, stop := context.WithCancelCause(ctx)
	return &acquisition{ml: ml, ctx: ctx, wctx: wctx, stop: stop,
		req: fair.Request{Owner: owner, Wait: wait, Shared: shared}, holds: make([]fair.Held, len(ml.locks))}
}

// end stops what the acquisition watches; the holds it took stay.
func (a *acquisition) end() {
	for _, unhook := range a.unhooks {
		unhook()
	}
	a.stop(nil)
}

// request returns the request for the lock of m.
func (a *acquisition) request(m *Mutex) fair.Request {
	req := a.req
	req.Lease, req.Fixed = m.lease, m.fixed
	return req
}

// keep records the hold of ml.locks[i]. The wait for the names still to
// take ends when it ends (its lease lost, Close): the call could not hold
// every name then.
func (a *acquisition) keep(i int, h fair.Held) {
	a.holds[i] = h
	a.took = append(a.took, i)
	name := a.ml.locks[i].name
	a.unhooks = append(a.unhooks, context.AfterFunc(h.Context(), func() { a.stop(endedCause(name, h.Context())) }))
}

// fail gives back every hold taken and returns the call's error: err, or
// the cause of a hold taken that ended meanwhile.
func (a *acquisition) fail(err error) error {
	if a.ctx.Err() == nil && a.wctx.Err() != nil {
		err = context.Cause(a.wctx)
	}
	if undo := a.ml.giveBack(a.holds, a.took); undo != nil {
		err = fmt.Errorf("%w (giving back the locks taken before: %w)", err, undo)
	}
	return err
}

// reenter re-enters the names whose live holds the caller's context
// carries, and returns the indexes of the others.
func (a *acquisition) reenter() ([]int, error) {
	var rest []int
	for i, m := range a.ml.locks {
		h, entered, err := m.reenter(a.ctx, a.req.Owner, a.req.Shared)
		switch {
		case err != nil:
			return nil, fmt.Errorf("fairlock: lock %q: %w", m.name, err)
		case entered:
			a.keep(i, h)
		default:
			rest = append(rest, i)
		}
	}
	return rest, nil
}

// join joins, for a shared owner, the holds of the locks at indexes that
// the owner has already through another Client, as Lock would re-enter
// them, so that a ticket never waits for its own owner; it returns the
// indexes of the others.
func (a *acquisition) join(indexes []int) ([]int, error) {
	if !a.req.Shared {
		return indexes, nil
	}
	var rest []int
	for _, i := range indexes {
		m := a.ml.locks[i]
		h, err := a.ml.engineLock(i).Join(a.wctx, a.request(m))
		switch {
		case errors.Is(err, ErrNotHeld):
			rest = append(rest, i)
		case err != nil:
			return nil, fmt.Errorf("fairlock: lock %q: %w", m.name, err)
		default:
			a.keep(i, h)
		}
	}
	return rest, nil
}

// ticket takes the locks at indexes (on one server) at once, waiting in
// all their lines with one ticket; one lock alone is taken as a Mutex.
func (a *acquisition) ticket(indexes []int) error {
	if len(indexes) < 2 {
		return a.oneByOne(indexes)
	}
	keys := make([]queue.Keys, len(indexes))
	for j, i := range indexes {
		keys[j] = a.ml.locks[i].keys
	}
	hs, err := a.ml.c.engine.Ticket(keys).Lock(a.wctx, a.request(a.ml.locks[indexes[0]]))
	if err != nil {
		return fmt.Errorf("fairlock: locks %s: %w", quoted(a.ml.namesOf(indexes)), err)
	}
	for j, i := range indexes {
		a.keep(i, hs[j])
	}
	return nil
}

// oneByOne takes the locks at indexes one after another, in key order.
func (a *acquisition) oneByOne(indexes []int) error {
	for _, i := range indexes {
		m := a.ml.locks[i]
		h, err := a.ml.engineLock(i).Lock(a.wctx, a.request(m))
		if err != nil {
			return fmt.Errorf("fairlock: lock %q: %w", m.name, err)
		}
		a.keep(i, h)
	}
	return nil
}

// engineLock returns the engine's lock of ml.locks[i]: a MultiLock runs
// on one deployment's engine only (a quorum Client offers none).
func (ml *MultiLock) engineLock(i int) *fair.Mutex { return ml.c.engine.Member(ml.locks[i].keys) }

// quoted returns names quoted and joined with commas.
func quoted(names []string) string {
	q := make([]string, len(names))
	for i, name := range names {
		q[i] = strconv.Quote(name)
	}
	return strings.Join(q, ", ")
}

// namesOf returns the names of the locks at indexes.
func (ml *MultiLock) namesOf(indexes []int) []string {
	names := make([]string, len(indexes))
	for j, i := range indexes {
		names[j] = ml.locks[i].name
	}
	return names
}

// endedCause is the cause a MultiLock's context, or its wait, ends with
// when the hold of lock name (whose context is hctx) has ended: nil for
// an Unlock, else the hold's cause (ErrLeaseLost, ErrClosed) naming the
// lock.
func endedCause(name string, hctx context.Context) error {
	cause := context.Cause(hctx)
	if cause == nil || errors.Is(cause, context.Canceled) {
		return nil
	}
	return fmt.Errorf("lock %q: %w", name, cause)
}

// giveBack releases one level of each hold taken (the indexes of holds
// in took), the last taken first, after a MultiLock could not take every
// name. The releases are bounded as an Unlock with the call timeout is:
// one that Redis does not answer goes on in the background.
func (ml *MultiLock) giveBack(holds []fair.Held, took []int) error {
	var errs []error
	for j := len(took) - 1; j >= 0; j-- {
		m := ml.locks[took[j]]
		ctx, cancel := context.WithTimeout(context.Background(), m.c.cfg.callTimeout)
		if err := holds[took[j]].Unlock(ctx); err != nil {
			errs = append(errs, fmt.Errorf("lock %q: %w", m.name, err))
		}
		cancel()
	}
	return errors.Join(errs...)
}

// Unlock gives up one level of each name's hold carried by ctx (the
// context Lock returned, or one derived from it), the last name taken
// first. At a name's last level its lock goes to the next waiter, and the
// context Lock returned is cancelled. It fails with ErrNotHeld when ctx
// carries no live hold of any of the names; it releases every name it
// can, and joins the errors of those it cannot (ErrNotHeld for a name ctx
// carries no live hold of, ErrLeaseLost for one whose lease was lost),
// each naming its lock. ctx's deadline bounds it as it bounds
// Mutex.Unlock. On one server the names' releases go to Redis in one call,
// which ends every hold it ends before it hands any name over.
func (ml *MultiLock) Unlock(ctx context.Context) error {
	if err := ml.usable(ctx); err != nil {
		return notHeld(err)
	}
	var errs []error
	held := 0
	// The holds of this Client's engine go to Redis together (on one
	// server, in one call: see fair.UnlockAll), the others one by one.
	var together []*fair.Hold
	var names []string // of together's holds
	for i := len(ml.locks) - 1; i >= 0; i-- {
		m := ml.locks[i]
		h, err := m.holdFrom(ctx)
		switch {
		case err != nil:
		case h == nil:
			err = ErrNotHeld
		default:
			held++
			if fh, ok := h.(*fair.Hold); ok && ml.c.engine.Took(fh) {
				together, names = append(together, fh), append(names, m.name)
				continue
			}
			err = h.Unlock(ctx)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("fairlock: lock %q: %w", m.name, err))
		}
	}
	for j, err := range fair.UnlockAll(ctx, together) {
		if err != nil {
			errs = append(errs, fmt.Errorf("fairlock: lock %q: %w", names[j], err))
		}
	}
	if held == 0 {
		return ErrNotHeld
	}
	return errors.Join(errs...)
}

// Token returns the fencing token of the hold of name carried by ctx, as
// Mutex.Token does. ErrInvalidName when name is not one of the MultiLock's
// names, ErrNotHeld when ctx carries no live hold of it.
func (ml *MultiLock) Token(ctx context.Context, name string) (int64, error) {
	if err := ml.usable(ctx); err != nil {
		return 0, notHeld(err)
	}
	for _, m := range ml.locks {
		if m.name == name {
			return m.Token(ctx)
		}
	}
	return 0, fmt.Errorf("%w: %q is not a name of this MultiLock", ErrInvalidName, name)
}

// multiHeld is the context MultiLock.Lock returns: the values of the
// caller's context, a hold of each name, and a cancellation that comes
// when the first of those holds ends (no deadline).
type multiHeld struct {
	context.Context                         // the caller's context without its cancellation: values only
	holds           map[holdKey]*carried    // each name's holds, newest first
	ended           context.Context         // cancelled when any of the holds ends, with its cause
	end             context.CancelCauseFunc // cancels ended; called when the first hold ends
}

// withHolds returns the context of holds, one per lock of ml in order,
// on top of ctx.
func (ml *MultiLock) withHolds(ctx context.Context, holds []fair.Held) context.Context {
	ended, end := context.WithCancelCause(context.Background())
	c := &multiHeld{Context: context.WithoutCancel(ctx), holds: make(map[holdKey]*carried, len(holds)), ended: ended, end: end}
	for i, h := range holds {
		m := ml.locks[i]
		prev := m.carriedFrom(ctx)
		chain := prev
		if prev == nil || prev.h != h {
			chain = &carried{h: h, next: prev}
		}
		c.holds[m.key] = chain
		name := m.name
		context.AfterFunc(h.Context(), func() { c.end(endedCause(name, h.Context())) })
	}
	return c
}

func (c *multiHeld) Deadline() (time.Time, bool) { return time.Time{}, false }
func (c *multiHeld) Done() <-chan struct{}       { return c.ended.Done() }
func (c *multiHeld) Err() error                  { return c.ended.Err() }

// Value finds the holds, then the caller's values, then those of the
// context that ends with the first hold: as for a single hold, that last
// step lets context.Cause and derived contexts see its cancellation.
func (c *multiHeld) Value(key any) any {
	if k, ok := key.(holdKey); ok {
		if chain, ok := c.holds[k]; ok {
			return chain
		}
	}
	if v := c.Context.Value(key); v != nil {
		return v
	}
	return c.ended.Value(key)
}

func (c *multiHeld) String() string { return fmt.Sprintf("fairlock.multiHeld(%d locks)", len(c.holds)) }
