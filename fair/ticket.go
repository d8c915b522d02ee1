package fair

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock/fairlock/internal/errs"
	"github.com/fairlock/fairlock/lua"
	"github.com/fairlock/fairlock/queue"
)

// Ticket is several locks of one server taken together by one entry, a
// ticket, that waits in all their lines at once and is granted every lock
// at once, when it heads every line and none of the locks is held (see
// lua/lib.lua). It holds none of them while it waits. It is a cheap
// handle, safe for concurrent use.
type Ticket struct {
	e     *Engine
	locks []*Mutex     // in key order; at least two
	keys  []queue.Keys // keys[i] is locks[i].keys
}

// Ticket returns the ticket handle of the locks of keys: at least two, in
// key order, all on the one server the engine's client talks to.
func (e *Engine) Ticket(keys []queue.Keys) *Ticket {
	t := &Ticket{e: e, keys: keys}
	for _, k := range keys {
		t.locks = append(t.locks, e.Member(k))
	}
	return t
}

// Lock takes every lock for req.Owner, as Mutex.Lock takes one: without
// req.Wait in one attempt that fails with errs.ErrLocked when any lock is
// held or awaited, with it by waiting in every line at once. It returns
// the hold of each lock, in key order. When ctx ends first, the ticket
// leaves every line (giving back a grant that raced with the end), and
// the caller holds nothing.
func (t *Ticket) Lock(ctx context.Context, req Request) ([]*Hold, error) {
	return lockIn[[]*Hold](t, ctx, req)
}

var _ line[[]*Hold] = (*Ticket)(nil)

func (t *Ticket) engine() *Engine  { return t.e }
func (t *Ticket) lockKind() string { return kindMultiLock }

// name joins the locks' names with commas.
func (t *Ticket) name() string { return strings.Join(t.names(), ",") }

// names returns the locks' names, in key order.
func (t *Ticket) names() []string {
	names := make([]string, len(t.keys))
	for i, k := range t.keys {
		names[i] = k.Name
	}
	return names
}

func (t *Ticket) entry(req Request) string {
	return queue.Entry(queue.NewID()+t.e.tag+queue.TicketVersion, req.Lease, req.Owner)
}

// wake is the first lock's channel of the engine: the scripts publish a
// ticket's grant there.
func (t *Ticket) wake() string       { return t.locks[0].wakeChannel }
func (t *Ticket) sharedWake() string { return "" }

// pushed is the grant a ticket's wake message carries: every lock's token
// (see hand_over_ticket in lua/lib.lua). A message with fewer is not the
// whole grant, which a poll then claims.
func (t *Ticket) pushed(_ int64, tokens []int64) (queue.Reply, bool) {
	if len(tokens) != len(t.locks) {
		return queue.Reply{}, false
	}
	return queue.Reply{Granted: true, Token: tokens[0], Count: 1, Tokens: tokens}, true
}

func (t *Ticket) poll(ctx context.Context, req Request, entry, mode string) (queue.Reply, error) {
	cctx, cancel := t.e.detached(ctx)
	defer cancel()
	return t.e.acquiring(cctx, func(s *lua.Scripts) lua.Call {
		return s.MultiAcquire(t.keys, req.Owner, entry, ms(req.Lease), ms(t.e.cfg.WaiterTTL), mode)
	}, "", 0, func(cmd *redis.Cmd) (queue.Reply, error) { return lua.ReadMultiAcquire(cmd, len(t.keys)) })
}

func (t *Ticket) cancel(ctx context.Context, owner, entry string) (bool, error) {
	ok, err := t.e.flagCall(ctx, func(s *lua.Scripts) lua.Call { return s.CancelTicket(t.keys, owner, entry) })
	return ok, refusal(err)
}

// giveBack releases a grant of every lock, the last first.
func (t *Ticket) giveBack(ctx context.Context, req Request) error {
	return t.eachBack(func(l *Mutex) error { return l.giveBack(ctx, req) })
}

func (t *Ticket) giveBackUnacked(ctx context.Context, req Request) error {
	return t.eachBack(func(l *Mutex) error { return l.giveBackUnacked(ctx, req) })
}

// eachBack runs f on every lock, the last first, and joins the errors.
func (t *Ticket) eachBack(f func(l *Mutex) error) error {
	var errs []error
	for i := len(t.locks) - 1; i >= 0; i-- {
		if err := f(t.locks[i]); err != nil {
			errs = append(errs, fmt.Errorf("lock %q: %w", t.locks[i].keys.Name, err))
		}
	}
	return errors.Join(errs...)
}

// grant makes the hold of each lock from the tokens rep answers. A
// grant that cannot be held whole (ctx ended, the engine closed) is given
// back whole.
func (t *Ticket) grant(ctx context.Context, req Request, entry string, rep queue.Reply, from time.Time, span time.Duration, how handing) ([]*Hold, error) {
	if len(rep.Tokens) != len(t.locks) {
		err := fmt.Errorf("fairlock: a grant of %d locks answered %d tokens", len(t.locks), len(rep.Tokens))
		return nil, errors.Join(err, t.e.soon(func() error { return t.giveBack(ctx, req) }))
	}
	holds := make([]*Hold, 0, len(t.locks))
	for i, l := range t.locks {
		h, err := l.hold(ctx, req, entry, rep.Tokens[i], from, span, how)
		if err != nil {
			// l.hold gave its own lock back; the holds made before go too.
			for _, made := range holds {
				made.abandon(err)
			}
			for _, rest := range t.locks[i+1:] {
				err = errors.Join(err, t.e.soon(func() error { return rest.giveBack(ctx, req) }))
			}
			return nil, err
		}
		holds = append(holds, h)
	}
	return holds, nil
}

// ended has the engine's audit watch every lock for what a failover
// brings back of the call: the ticket leaves every line at once.
func (t *Ticket) ended(req Request, entry string) {
	for _, l := range t.locks {
		t.e.audit.ended(l, t, req, entry, nil, "")
	}
}

// observeEnd reports the end of a Lock call that began at start, under
// the locks' names joined (see name), with the first lock's token.
func (t *Ticket) observeEnd(ctx context.Context, req Request, entry string, start time.Time, holds []*Hold, err error) {
	var first *Hold
	if len(holds) > 0 {
		first = holds[0]
	}
	observeEnd(t, ctx, req, entry, start, first, err)
}

// OneServer reports whether every key the engine's client reaches lives
// on one server, so that one script may take several locks: a client of
// one server (or of a primary that sentinels follow), not of a Redis
// Cluster or a Ring.
func (e *Engine) OneServer() bool {
	_, ok := e.rdb.(*redis.Client)
	return ok
}

// Join adds a level to the hold that req.Owner already has of the lock in
// Redis (an owner id shared with other callers: see Request.Shared), as
// a hold of its own, the way Lock re-enters such a hold; errs.ErrNotHeld
// when the owner holds no level. It never takes a free lock and never
// waits. A MultiLock on one server joins the holds its owner already has
// before its ticket waits for the rest, as Lock would re-enter them one
// by one, so that it never waits for its own owner.
func (l *Mutex) Join(ctx context.Context, req Request) (*Hold, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := l.e.begin(); err != nil {
		return nil, err
	}
	defer l.e.ops.Done()
	sent := time.Now()
	rep, err := callWithin(l, ctx, req, "", queue.ModeReenter, giveBackIfGranted(l, ctx, req))
	switch {
	case unacked(err):
		return nil, dropUnacked(l, ctx, req, err)
	case err != nil:
		return nil, err
	case !rep.Granted:
		return nil, errs.ErrNotHeld
	}
	return l.hold(ctx, req, l.entry(req), rep.Token, sent, req.Lease, handing{})
}
