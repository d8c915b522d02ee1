package fairlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/fairlock/fairlock/fair"
	"github.com/fairlock/fairlock/queue"
)

// MaxValueLen is the most bytes an Election's value may have (64 KiB): it
// is stored in Redis with the leadership, and read by every observer at
// every change.
const MaxValueLen = queue.MaxValueLen

// Election is a handle on one named leader election. Candidates wait in
// one line, in the order they joined it, and the first is the
// leader until it resigns or its lease is lost; then the next is told
// at once, by push. Each leadership has a term, the fencing token of its
// grant, which rises with every election, and a value, which its leader
// campaigned with or proclaimed since. Its methods are safe for
// concurrent use.
//
// An Election is a Mutex whose holds are leaderships: the same line,
// leases, watchdog and tokens (see docs/algorithm.md), under keys of its
// own, so that an Election and a Mutex of one name are two locks.
type Election struct {
	c     *Client
	name  string
	lock  fair.Elector // one deployment's or a quorum's; nil when err != nil
	keys  queue.Keys
	key   holdKey
	lease time.Duration
	fixed bool
	err   error // invalid name or option: returned by every method
}

// Election returns a handle on the leader election called name. A
// leadership's lease is the Client's (WithLease): a leader whose process
// dies is replaced within it. WithFixedLease gives the handle's
// leaderships a lease that nothing renews: each ends d after its grant.
// An invalid name or option is reported by every call on the handle.
//
// On a quorum Client (NewQuorum) the election is a quorum lock: a
// leadership counts while a majority of the masters hold it, candidates
// are served in bakery order, the term is the token Campaign commits to
// a majority before it returns, Leader and Observe read every master and
// report the majority's leadership, and Proclaim writes the value on a
// majority.
func (c *Client) Election(name string, opts ...HandleOption) *Election {
	if c == nil {
		return &Election{name: name, err: errNilElection}
	}
	e := &Election{c: c, name: name}
	lc, optErr := c.leaseOf(opts)
	e.lease, e.fixed = lc.d, lc.fixed
	keys, lock, err := c.run.Election(c.cfg.prefix, name)
	switch {
	case err != nil:
		e.err = err
	case optErr != nil:
		e.err = optErr
	default:
		e.lock, e.keys, e.key = lock, keys, holdKey{lock: keys.Lock}
	}
	return e
}

// Name returns the election's name.
func (e *Election) Name() string {
	if e == nil {
		return ""
	}
	return e.name
}

// usable returns the error that stops any call: a bad handle, a nil
// context, a closed Client.
func (e *Election) usable(ctx context.Context) error {
	switch {
	case e == nil || (e.c == nil && e.err == nil):
		return errNilElection
	case e.err != nil:
		return e.err
	case ctx == nil:
		return errNilContext
	case e.c.closed():
		return ErrClosed
	}
	return nil
}

// checkValue returns the error of a value no candidate may campaign or
// proclaim with: empty, or longer than MaxValueLen.
func checkValue(value string) error {
	switch {
	case value == "":
		return fmt.Errorf("%w: empty", ErrInvalidValue)
	case len(value) > MaxValueLen:
		return fmt.Errorf("%w: %d bytes, more than %d (MaxValueLen)", ErrInvalidValue, len(value), MaxValueLen)
	}
	return nil
}

// Campaign waits until this candidate is elected, in the order the
// candidates joined the line, or until ctx ends. It returns the
// leadership's context, as Mutex.Lock returns a hold's: it keeps ctx's
// values but not its deadline or cancellation, and it is cancelled when
// the leadership ends: at Resign, when the lease is lost (context.Cause is
// then ErrLeaseLost), or at Close (ErrClosed). Do the leader's work under
// it, and stamp what the leader writes with its term (Term).
//
// value is what the leader stands for (an address, an id), 1 to
// MaxValueLen bytes (ErrInvalidValue otherwise): Leader and Observe report
// it. A Campaign with a context that carries this election's live
// leadership changes its value, as Proclaim does, and returns at once.
//
// When ctx ends first, Campaign returns ctx's error (joined with
// ErrUnavailable when Redis was not serving the call then) and leaves the
// line at once: nothing of the candidate is left in Redis.
func (e *Election) Campaign(ctx context.Context, value string) (context.Context, error) {
	if err := e.usable(ctx); err != nil {
		return nil, err
	}
	if err := checkValue(value); err != nil {
		return nil, err
	}
	if ctx.Err() != nil {
		return nil, ctxErr(ctx)
	}
	h, err := e.leadership(ctx)
	switch {
	case err != nil:
		return nil, err
	case h != nil:
		if err := e.proclaim(ctx, h, value); err != nil {
			return nil, err
		}
		return ctx, nil
	}
	held, err := e.lock.Take(ctx, fair.Request{Owner: uuid.NewString(), Lease: e.lease, Fixed: e.fixed, Wait: true, Value: value})
	if err != nil {
		return nil, err
	}
	// The term is the token: on a quorum, committed to a majority before
	// the leader acts, so that every reading of the leadership has it (on
	// one deployment the token is known, and this makes no call).
	if _, err := held.Token(ctx); err != nil {
		return nil, errors.Join(err, held.Unlock(context.WithoutCancel(ctx)))
	}
	return withHoldOf(ctx, e.key, held), nil
}

// holdFrom returns the leadership of this election that ctx carries, or
// nil, as Mutex.holdFrom does a hold.
func (e *Election) holdFrom(ctx context.Context) (fair.Held, error) {
	return heldOf(ctx, e.key, e.lock, anyHold)
}

// leadership returns the live leadership of this election that ctx
// carries, or nil.
func (e *Election) leadership(ctx context.Context) (fair.Held, error) {
	h, err := e.holdFrom(ctx)
	if err != nil || h == nil {
		return nil, err
	}
	if h.Context().Err() != nil {
		return nil, nil
	}
	return h, nil
}

// Proclaim changes the value of the leadership ctx carries (Campaign's
// context, or one derived from it), without an election: Leader reports
// the new value, and observers are told it, under the same term. It fails
// with ErrNotHeld when ctx carries no live leadership of this election
// (wrapping ErrLeaseLost when Redis no longer has it), and with
// ErrInvalidValue for a value Campaign would refuse.
func (e *Election) Proclaim(ctx context.Context, value string) error {
	if err := e.usable(ctx); err != nil {
		return notHeld(err)
	}
	if err := checkValue(value); err != nil {
		return err
	}
	h, err := e.leadership(ctx)
	switch {
	case err != nil:
		return err
	case h == nil:
		return ErrNotHeld
	}
	return e.proclaim(ctx, h, value)
}

// proclaim is Proclaim of the leadership h.
func (e *Election) proclaim(ctx context.Context, h fair.Held, value string) error {
	done, err := e.lock.Proclaim(ctx, h, value)
	switch {
	case err != nil:
		return err // when done, the value was proclaimed but the observers were not told (NOPERM)
	case !done:
		return fmt.Errorf("%w: %w: Redis has another leadership of election %q", ErrNotHeld, ErrLeaseLost, e.name)
	}
	return nil
}

// Resign ends the leadership ctx carries and hands it to the next
// candidate in line, by push, as Unlock hands a lock over; the
// leadership's context is cancelled. With nobody in line, the election
// has no leader, and its observers are told so. It fails with ErrNotHeld
// when ctx carries no live leadership of this election (wrapping
// ErrLeaseLost when it was lost before), and with ErrLeaseLost when Redis
// no longer had it (its lease ran out, a failover lost it), as Unlock
// does. ctx's deadline bounds it as it bounds Mutex.Unlock.
func (e *Election) Resign(ctx context.Context) error {
	if err := e.usable(ctx); err != nil {
		return notHeld(err)
	}
	h, err := e.holdFrom(ctx)
	switch {
	case err != nil:
		return err
	case h == nil:
		return ErrNotHeld
	}
	return h.Unlock(ctx)
}

// Term returns the term of the leadership ctx carries: the fencing token
// of its grant, which rises with every election, across restarts and
// failovers, as a Mutex's tokens do. Pass it with what the leader writes,
// so that a store can refuse the writes of a leader that was replaced.
// ErrNotHeld when ctx carries no live leadership.
func (e *Election) Term(ctx context.Context) (int64, error) {
	if err := e.usable(ctx); err != nil {
		return 0, notHeld(err)
	}
	h, err := e.holdFrom(ctx)
	switch {
	case err != nil:
		return 0, err
	case h == nil:
		return 0, ErrNotHeld
	}
	return h.Token(ctx)
}

// Leadership is an election's leadership as Redis has it, or, in a view
// Observe sends, the news that the election has no leader (Term 0).
type Leadership struct {
	Election   string    // the election's name
	Value      string    // the leader's value; "" when there is no leader
	Term       int64     // the fencing token of the leadership's grant; 0 when there is no leader
	Since      time.Time // when it began, by Redis's clock (ms); zero when there is no leader
	Client     string    // ID of the leader's Client (see Client.ID)
	ClientName string    // that Client's name (WithName), "" when it has none
}

// HasLeader reports whether l is a leadership, not the news that the
// election has none.
func (l Leadership) HasLeader() bool { return l.Term != 0 }

// same reports whether l and o are one view: the same leadership with the
// same value, and its Client known by the same name (a Client writes its
// name at its first call, so a reading may come before it).
func (l Leadership) same(o Leadership) bool {
	return l.Term == o.Term && l.Value == o.Value && l.ClientName == o.ClientName
}

// Leader returns the election's leadership as Redis has it when it
// answers: its value, term, since when, and the ID and name of the
// leader's Client. With no leader it returns ErrNoLeader. A reading that
// may be out of date as soon as it returns: the leader itself learns that
// it leads from Campaign, and that it no longer does from the end of its
// context. When ctx ends first, Leader returns ctx's error at once.
func (e *Election) Leader(ctx context.Context) (Leadership, error) {
	if err := e.usable(ctx); err != nil {
		return Leadership{}, err
	}
	l, err := e.read(ctx, nil)
	if err == nil && !l.HasLeader() {
		return l, fmt.Errorf("%w: election %q", ErrNoLeader, e.name)
	}
	return l, err
}

// read reads the leadership (a Leadership without a term when there is
// none), naming its Client from names, a cache of Client names by ID,
// when not nil.
func (e *Election) read(ctx context.Context, names map[string]string) (Leadership, error) {
	l, _, err := e.readLease(ctx, names)
	return l, err
}

// readLease is read, which also returns the lease the leadership has left.
func (e *Election) readLease(ctx context.Context, names map[string]string) (Leadership, time.Duration, error) {
	lead, ok, err := e.lock.Leader(ctx)
	if err != nil || !ok {
		return Leadership{Election: e.name}, 0, err
	}
	l := Leadership{Election: e.name, Value: lead.Value, Term: lead.Term, Since: lead.Since, Client: queue.TagOf(lead.Entry)}
	if l.Client == "" {
		return l, lead.TTL, nil
	}
	if name, known := names[l.Client]; known {
		l.ClientName = name
		return l, lead.TTL, nil
	}
	got, err := e.c.names(ctx, []string{l.Client})
	if err != nil {
		return l, 0, err
	}
	l.ClientName = got[l.Client]
	if names != nil && l.ClientName != "" {
		names[l.Client] = l.ClientName // a Client without a name yet may write it later
	}
	return l, lead.TTL, nil
}

// errNilElection is returned by the methods of a nil Election, or one of
// a nil Client.
var errNilElection = errors.New("fairlock: nil Election, or one of a nil Client")
