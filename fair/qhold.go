package fair

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fairlock/fairlock/internal/errs"
	"github.com/fairlock/fairlock/lua"
	"github.com/fairlock/fairlock/queue"
)

// QHold is one owner's hold of a quorum lock in this process. It counts
// while a majority of the masters hold it with validity left: its
// validity is the q-th latest time until which a master is known to keep
// it (see qview.until). Unless its lease is fixed, the Quorum's watchdog
// renews it on every master every third of the lease.
type QHold struct {
	holdState // owner, lease, levels, end; its mu guards the fields below too
	l         *QMutex
	waited    bool            // granted after waiting in line
	octx      context.Context // the values of the Lock call, for the observer
	// ord orders the hold's calls on each master, after those of the
	// Lock call that took it (see order).
	ord *order

	views     []qview   // guarded by mu
	validity  time.Time // guarded by mu
	committed int64     // guarded by mu: the token committed to a majority, 0 before
	next      time.Time // guarded by mu: the next renewal
	renewing  bool      // guarded by mu
	// proclaims numbers the hold's Proclaim calls, an election's (see
	// QMutex.Proclaim).
	proclaims atomic.Int64
}

// newHold returns the hold of a grant whose views count a majority until
// validity, and hands it to the watchdog.
func (l *QMutex) newHold(ctx context.Context, req Request, entry string, views []qview, validity time.Time, waited bool, ord *order) *QHold {
	h := &QHold{l: l, waited: waited, octx: context.WithoutCancel(ctx), views: views, validity: validity, ord: ord}
	h.init(req, entry)
	// A fresh hold is renewed a third of its lease after its grant. One
	// granted by joins and pushes is known for min(lease, waiter TTL)
	// from the latest join on each master: it is renewed when a third of
	// that has passed, at once if its grant came later (a short hold is
	// released first). A fixed lease is never renewed: it ends at the
	// validity known at its grant, which is never later than the expiry
	// its masters set.
	now := time.Now()
	known := l.qm.span(min(req.Lease, l.qm.cfg.WaiterTTL))
	switch {
	case req.Fixed:
		h.next = now.Add(100 * 365 * 24 * time.Hour)
	case !waited:
		h.next = now.Add(req.Lease / 3)
	default:
		h.next = validity.Add(-known * 2 / 3)
	}
	if !l.qm.addHold(h) {
		h.abandon(errs.ErrClosed)
		return h
	}
	l.qm.dog.watch()
	if entry != "" {
		for _, e := range l.qm.masters {
			heedRevocation(l.qm, &h.holdState, e.hub, l.wake, entry, h.look)
		}
	}
	return h
}

// Validity returns the time until which the hold counts.
func (h *QHold) Validity() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.validity
}

// grantToken is the largest token among the masters that hold at the
// grant: what the observer is told before any commit.
func (h *QHold) grantToken() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.heldToken()
}

// eventToken is the token the observer is told of the hold: the
// committed one, or else the grant's.
func (h *QHold) eventToken() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.committed != 0 {
		return h.committed
	}
	return h.heldToken()
}

// heldToken is the largest token among the masters known to hold.
// Requires mu.
func (h *QHold) heldToken() int64 {
	var t int64
	for _, v := range h.views {
		if v.held {
			t = max(t, v.token)
		}
	}
	return t
}

// live returns an error when the hold has ended or its validity passed:
// the cause it ended with (errs.ErrLeaseLost, errs.ErrClosed), or
// errs.ErrNotHeld after its last Unlock. Requires mu.
func (h *QHold) live() error {
	if err := h.gone(); err != nil {
		return err
	}
	if !time.Now().Before(h.validity) {
		return errs.ErrLeaseLost
	}
	return nil
}

// Token returns the hold's fencing token. The first call commits it to a
// majority of the masters (one round): the largest token of the masters
// known to hold, written into the hold and the counter of each, so that
// every later grant on a master of that majority has a larger one,
// whatever the timing. The round asks the masters known to hold, and
// every master when those are not enough. Later calls return it at once.
func (h *QHold) Token(ctx context.Context) (int64, error) {
	qm := h.l.qm
	if err := qm.begin(); err != nil {
		return 0, fmt.Errorf("%w: %w", errs.ErrNotHeld, err)
	}
	defer qm.ops.Done()
	h.mu.Lock()
	if h.ended || h.levels == 0 {
		defer h.mu.Unlock()
		return 0, h.endedErr()
	}
	if err := h.live(); err != nil {
		h.mu.Unlock()
		h.lose(false, "its validity passed", nil)
		return 0, err
	}
	if h.committed != 0 {
		defer h.mu.Unlock()
		return h.committed, nil
	}
	t := h.heldToken()
	held := make([]bool, len(h.views))
	same := 0 // masters known to hold under t itself
	for i, v := range h.views {
		held[i] = v.held
		if v.held && v.token == t {
			same++
		}
	}
	if same >= qm.q && h.l.keys.Values == "" {
		// A majority drew t for this hold (their counters were equal:
		// draw_token in lua/qlib.lua), so each holds it under t with K at
		// t or above: what a commit would make of them. t is committed
		// without a call. (Not an election's: its commit writes the term
		// where readers look for it, see qcommit.lua.)
		defer h.mu.Unlock()
		h.committed = t
		return t, nil
	}
	h.mu.Unlock()
	lease := h.callLease()
	for range 4 {
		// took runs on this goroutine, one answer at a time (see round).
		// The commit goes first to the masters known to hold, which
		// are a majority; the others only when those did not all take it.
		var (
			ok, n, asked int
			above        int64
		)
		qm.round(ctx, h.ord, func(cctx context.Context, i int) (lua.QReply, error) {
			if !held[i] {
				return lua.QReply{}, errNotAsked
			}
			return qm.run(cctx, i, func(s *lua.Scripts) lua.Call {
				return s.QCommit(h.l.keys, h.owner, t, ms(lease), ms(qm.cfg.WaiterTTL), qm.skew(i))
			}, lua.ReadQCommit)
		}, func(a answer) bool {
			if a.err == nil || !errors.Is(a.err, errNotAsked) {
				asked++
			}
			if a.err != nil {
				return false
			}
			n++
			switch a.rep.State {
			case lua.QHeld:
				// The commit leaves the hold's expiry there as it was:
				// the view's until stays that of the grant or the latest
				// renewal.
				ok++
				h.mu.Lock()
				if h.views[a.i].held {
					h.views[a.i].token = t
				}
				h.mu.Unlock()
			case lua.QAbove:
				above = max(above, a.rep.Token)
			}
			// A master whose hold has a larger token does not take t;
			// a majority that took it is enough (Claim T rests on the
			// masters that did).
			return ok >= qm.q
		}, nil)
		switch {
		case ok >= qm.q:
			h.mu.Lock()
			defer h.mu.Unlock()
			if err := h.live(); err != nil {
				return 0, err
			}
			h.committed = t
			return t, nil
		case above > t:
			t = above // a master's hold has a larger token: commit that one
			allMasters(held)
			continue
		case ctx.Err() != nil || asked == len(held) && n < qm.q:
			// The hold's end (its context is often the one given) says
			// more than the context's.
			h.mu.Lock()
			err := h.live()
			h.mu.Unlock()
			if err != nil {
				return 0, err
			}
			return 0, qm.noQuorum(ctx, n, " the commit")
		case asked < len(held):
			allMasters(held) // ask every master
			continue
		}
		h.lose(false, "fewer than a majority of the masters hold it (found by Token)", nil)
		return 0, errs.ErrLeaseLost
	}
	return 0, fmt.Errorf("%w: the hold's token kept moving while it was committed", errs.ErrLeaseLost)
}

// errNotAsked is the answer of a master a round did not call.
var errNotAsked = errors.New("fairlock: not asked")

// allMasters marks every master to be asked.
func allMasters(ask []bool) {
	for i := range ask {
		ask[i] = true
	}
}

// Enter takes one more level (a re-entry) on every master that holds:
// it counts when a majority does. The observer is told of it as of a
// Mutex's re-entry: WaitStarted, then Granted (GrantReentry) or
// WaitEnded.
func (h *QHold) Enter(ctx context.Context) error {
	qm := h.l.qm
	if qm.cfg.Observe == nil {
		return h.enter(ctx)
	}
	return reentered(ctx, qm.observe, h.l.keys.Name, h.owner, h.eventToken, h.enter)
}

// enter is Enter without its events.
func (h *QHold) enter(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	qm := h.l.qm
	if err := qm.begin(); err != nil {
		return err
	}
	defer qm.ops.Done()
	h.mu.Lock()
	if err := h.live(); err != nil {
		h.mu.Unlock()
		return err
	}
	h.mu.Unlock()
	lease := h.callLease()
	call := queue.NewID()
	// took runs on this goroutine; late on others, once the round is
	// decided: a level counted late stays when the re-entry counts, and
	// is given back when it does not.
	var (
		mu      sync.Mutex
		counted []int
		n       int
		decided bool
		kept    bool
	)
	qm.round(ctx, h.ord, func(cctx context.Context, i int) (lua.QReply, error) {
		return qm.run(cctx, i, func(s *lua.Scripts) lua.Call {
			return s.QTry(h.l.keys, call, h.owner, h.entry, ms(lease), ms(qm.cfg.WaiterTTL), queue.ModeReenter, qm.receiptTTL(), qm.skew(i))
		}, lua.ReadQTry)
	}, func(a answer) bool {
		mu.Lock()
		defer mu.Unlock()
		if a.err == nil {
			n++
			if a.rep.State == lua.QHeld {
				counted = append(counted, a.i)
			}
		}
		return len(counted) >= qm.q
	}, func(a answer) {
		if a.err != nil || a.rep.State != lua.QHeld {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		switch {
		case !decided:
			counted = append(counted, a.i) // settled below
		case !kept:
			h.giveBackLevel(a.i)
		}
	})
	mu.Lock()
	defer mu.Unlock()
	decided = true
	h.mu.Lock()
	err := h.live()
	if err == nil && len(counted) >= qm.q && ctx.Err() == nil {
		h.levels++
		h.mu.Unlock()
		kept = true
		return nil
	}
	h.mu.Unlock()
	for _, i := range counted {
		h.giveBackLevel(i)
	}
	switch {
	case err != nil:
		return err
	case ctx.Err() != nil:
		return ctx.Err()
	case n < qm.q:
		return qm.noQuorum(ctx, n, "")
	}
	h.lose(false, "fewer than a majority of the masters hold it (found by a re-entry)", nil)
	return errs.ErrLeaseLost
}

// giveBackLevel releases one level above the last on master i, in the
// background.
func (h *QHold) giveBackLevel(i int) {
	call := queue.NewID()
	h.l.qm.background(func() { h.sendRelease(i, call, false, 0) })
}

// Unlock gives up one level. At the last level the hold ends, and every
// master hands the lock to its next live waiter. It waits for a majority
// of the masters (or the call timeout); the release goes on to the others
// in the background, sent again until they answer or the lease is over.
// It fails with errs.ErrNoQuorum when fewer than a majority answered (the
// hold ends here all the same at the last level), and with
// errs.ErrLeaseLost when the hold's validity had passed (the process was
// paused past it before its watchdog could end the hold).
func (h *QHold) Unlock(ctx context.Context) error {
	qm := h.l.qm
	if err := qm.begin(); err != nil {
		return fmt.Errorf("%w: %w", errs.ErrNotHeld, err)
	}
	defer qm.ops.Done()
	h.mu.Lock()
	if h.ended || h.levels == 0 {
		defer h.mu.Unlock()
		return h.endedErr()
	}
	if !time.Now().Before(h.validity) {
		// The watchdog has not ended the hold yet (this process was
		// paused, or busy), but no majority is known to keep it: it was
		// lost, and what is left of it is released in the background.
		h.mu.Unlock()
		h.lose(false, "its validity passed before Unlock", nil)
		return errs.ErrLeaseLost
	}
	last, _ := h.leave() // live, as checked above
	committed := h.committed
	h.mu.Unlock()
	if last {
		h.end(nil)
	}
	// Only ctx's deadline bounds the release, not its cancellation: the
	// context an Unlock is given is often that of a hold that has just
	// ended.
	rctx, cancel := context.WithoutCancel(ctx), context.CancelFunc(func() {})
	if d, ok := ctx.Deadline(); ok {
		rctx, cancel = context.WithDeadline(rctx, d)
	}
	defer cancel()
	n := h.release(rctx, last, committed)
	switch {
	case n >= qm.q:
		return nil
	case rctx.Err() != nil:
		return fmt.Errorf("fairlock: unlock: %w (the release goes on in the background until the masters take it or the lease runs out)", rctx.Err())
	}
	return fmt.Errorf("%w: %d of %d masters answered the release, %d needed; it is sent again in the background", errs.ErrNoQuorum, n, len(qm.masters), qm.q)
}

// release sends one level's release to every master and returns how many
// answered within the round; those that did not are sent it again in the
// background.
func (h *QHold) release(ctx context.Context, last bool, committed int64) int {
	qm := h.l.qm
	call := queue.NewID()
	n := 0
	failed := func(a answer) {
		if a.err != nil {
			qm.background(func() { h.sendRelease(a.i, call, last, committed) })
		}
	}
	qm.round(ctx, h.ord, func(cctx context.Context, i int) (lua.QReply, error) {
		rep, err := h.releaseOn(cctx, i, call, last, committed)
		if err == nil && last && !h.shared {
			// The master counts levels this process no longer does:
			// releases of inner levels still being sent again. The owner
			// id is this hold's alone, so they are ours to end now, rather
			// than leave the master held until its lease runs out.
			for k := rep.Count; k > 0 && err == nil; k-- {
				rep, err = h.releaseOn(cctx, i, queue.NewID(), true, committed)
			}
		}
		return rep, err
	}, func(a answer) bool {
		if a.err == nil {
			n++
		}
		failed(a)
		return n >= qm.q
	}, failed)
	return n
}

// releaseOn runs qrelease on master i.
func (h *QHold) releaseOn(ctx context.Context, i int, call string, last bool, committed int64) (lua.QReply, error) {
	qm := h.l.qm
	lease := h.callLease()
	rep, err := qm.run(ctx, i, func(s *lua.Scripts) lua.Call {
		return s.QRelease(h.l.keys, call, h.owner, h.entry, committed, ms(lease), last, ms(qm.cfg.WaiterTTL), qm.tombTTL(), qm.receiptTTL(), qm.skew(i))
	}, lua.ReadQRelease)
	if publishRefused(err) {
		return lua.QReply{State: lua.QHeld}, nil // released; the next holder finds it by its poll
	}
	return rep, err
}

// sendRelease sends a release to master i again, with a backoff, until
// it answers, the lease is over or the Quorum closes.
func (h *QHold) sendRelease(i int, call string, last bool, committed int64) {
	qm := h.l.qm
	send := func() bool {
		turn, next := h.ord.turn(i)
		<-turn
		defer next()
		ctx, cancel := qm.detached(context.Background())
		defer cancel()
		_, err := h.releaseOn(ctx, i, call, last, committed)
		return err == nil
	}
	if until := time.Now().Add(h.lease); !send() {
		resend(qm.closing, until, send)
	}
}

// end ends the hold once with cause (nil: unlocked), and returns the
// levels it still had.
func (h *QHold) end(cause error) (int, bool) {
	return h.endFor(cause, false)
}

func (h *QHold) endFor(cause error, ranOut bool) (int, bool) {
	return h.endAs(cause, ranOut, false)
}

// endClosing ends the hold for Close, as end does with errs.ErrClosed,
// but the watchdog keeps renewing what levels it had until their release
// is answered on every master (see releasedOnClose).
func (h *QHold) endClosing() (int, bool) {
	return h.endAs(errs.ErrClosed, false, true)
}

// endAs is endFor; closing says that Close ends the hold (see
// holdState.finish).
func (h *QHold) endAs(cause error, ranOut, closing bool) (int, bool) {
	levels, ok := h.finish(cause, closing, nil)
	if !ok {
		return 0, false
	}
	qm := h.l.qm
	if !closing || levels == 0 {
		qm.dropHold(h)
	}
	if qm.cfg.Observe != nil {
		token := h.eventToken()
		qm.observe(h.octx, Event{Kind: EventHoldEnded, Lock: h.l.keys.Name, Owner: h.owner, Call: queue.WaiterIDOf(h.entry),
			Token: token, Held: time.Since(h.took), End: endKind(cause, ranOut), Err: cause})
	}
	return levels, true
}

// lose ends the hold with errs.ErrLeaseLost, logs the loss at Error (why
// says how it was found, err what failed if anything), and releases what
// is left of it on the masters in the background.
func (h *QHold) lose(ranOut bool, why string, err error) {
	levels, ok := h.endFor(errs.ErrLeaseLost, ranOut)
	if !ok {
		return
	}
	logLost(h.l.qm.log, why, err, h.logAttrs())
	if levels > 0 {
		h.mu.Lock()
		committed := h.committed
		h.mu.Unlock()
		h.l.qm.background(func() { h.releaseAll(levels, committed) })
	}
}

// releasedOnClose says that Close has had the answer of every master to
// the release of the hold it ended (or gave up waiting for it): the
// watchdog stops renewing it.
func (h *QHold) releasedOnClose() {
	h.released()
	h.l.qm.dropHold(h)
}

// abandon ends the hold with cause and releases its levels.
func (h *QHold) abandon(cause error) {
	levels, ok := h.end(cause)
	if ok && levels > 0 {
		h.mu.Lock()
		committed := h.committed
		h.mu.Unlock()
		h.releaseAll(levels, committed)
	}
}

// releaseAll releases levels levels, the last one last.
func (h *QHold) releaseAll(levels int, committed int64) {
	for k := levels; k > 0; k-- {
		h.release(context.Background(), k == 1, committed)
	}
}

// renew renews the lease on every master, and recomputes the validity
// from the answers. It is decided once a majority holds: a master that
// hangs does not hold up the hold's renewals, and its answer, when it
// comes, still counts in the views. The hold is lost when fewer than a
// majority can still hold it, or when its validity passes.
//
// Renewals are not ordered with the hold's other calls (see order): a
// renewal only extends the lease of the owner's hold where there is one,
// so one that lands late changes nothing that counts, and a master that
// hangs then keeps no queue of renewals behind the first.
func (h *QHold) renew() {
	qm := h.l.qm
	var (
		mu            sync.Mutex
		held, notHeld int
		failed        error
	)
	view := func(a answer) {
		h.mu.Lock()
		defer h.mu.Unlock()
		v := &h.views[a.i]
		switch {
		case a.err != nil:
			failed = a.err
		case a.rep.State == lua.QHeld:
			held++
			v.held, v.token, v.until = true, a.rep.Token, a.sent.Add(qm.span(h.lease))
		default:
			notHeld++
			v.held = false
		}
		if _, valid := counted(h.views, time.Time{}, qm.q); valid.After(h.validity) {
			h.validity = valid
		}
	}
	qm.round(context.Background(), nil, func(cctx context.Context, i int) (lua.QReply, error) {
		return qm.run(cctx, i, func(*lua.Scripts) lua.Call {
			return lua.QRenew(h.l.keys, h.owner, ms(h.lease))
		}, lua.ReadQRenew)
	}, func(a answer) bool {
		mu.Lock()
		defer mu.Unlock()
		view(a)
		return held >= qm.q
	}, func(a answer) {
		mu.Lock()
		defer mu.Unlock()
		view(a)
	})
	mu.Lock()
	lost := len(qm.masters)-notHeld < qm.q
	err, renewed := failed, held >= qm.q
	mu.Unlock()
	h.mu.Lock()
	h.renewing = false
	closing := h.closing
	_, valid := counted(h.views, time.Time{}, qm.q)
	h.validity = valid
	expired := !time.Now().Before(valid)
	switch {
	case closing && err != nil:
		// Ended by Close, its release not answered everywhere: renewed
		// on the masters that still hold it, whatever the majority's
		// validity (the masters that answered their release hold it no
		// more), again soon after a failure.
		h.next = time.Now().Add(max(h.lease/12, retryMin))
	case closing:
		h.next = time.Now().Add(h.lease / 3)
	case !renewed:
		// Try again soon, within what validity is left.
		h.next = time.Now().Add(max(min(h.lease/3, time.Until(valid)/3), retryMin))
	default:
		h.next = time.Now().Add(h.lease / 3)
	}
	h.mu.Unlock()
	if closing {
		qm.dog.watch()
		return
	}
	if err != nil && qm.cfg.Observe != nil {
		qm.observe(h.octx, Event{Kind: EventRenewalFailed, Lock: h.l.keys.Name, Owner: h.owner, Call: queue.WaiterIDOf(h.entry), Err: err})
	}
	switch {
	case lost:
		h.lose(false, "fewer than a majority of the masters can hold it", err)
		return
	case expired:
		h.lose(false, "renewals did not reach a majority before its validity passed", err)
		return
	}
	qm.dog.watch()
}

// qdog is a Quorum's one watchdog: it renews every hold that is due and
// ends those whose validity passed (or whose fixed lease ran out). Once
// Close has started, it renews the holds Close ended until their release
// is answered, and then it is halted.
type qdog struct {
	qm      *Quorum
	kick    chan struct{}
	halted  chan struct{} // closed when the goroutine must stop
	stop    sync.Once
	mu      sync.Mutex
	running bool
}

func newQdog(qm *Quorum) *qdog {
	return &qdog{qm: qm, kick: make(chan struct{}, 1), halted: make(chan struct{})}
}

// halt stops the goroutine. It is idempotent.
func (d *qdog) halt() {
	d.stop.Do(func() { close(d.halted) })
}

// watch makes sure the watchdog runs, and has it look at the holds again.
func (d *qdog) watch() {
	d.mu.Lock()
	start := !d.running
	d.running = true
	d.mu.Unlock()
	if start && !d.qm.background(d.run) {
		d.mu.Lock()
		d.running = false
		d.mu.Unlock()
		return
	}
	signal(d.kick)
}

func (d *qdog) run() {
	qm := d.qm
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		now := time.Now()
		next := now.Add(time.Hour)
		for _, h := range qm.liveHolds() {
			h.mu.Lock()
			// A hold that Close ended is renewed, on its schedule, until
			// its release is answered on every master, whatever its
			// validity: the masters that answered it no longer count
			// towards a majority, and the others must keep it meanwhile.
			closing := h.ended && h.closing
			end := h.validity // when it ends, unless renewed first
			if closing {
				end = now.Add(time.Hour)
			}
			switch {
			case h.ended && !h.closing:
			case !closing && !now.Before(h.validity):
				h.mu.Unlock()
				why := "its validity passed before a renewal reached a majority"
				if h.fixed {
					why = "the fixed lease ran out before Unlock"
				}
				h.lose(h.fixed, why, nil)
				continue
			case h.renewing:
				next = minTime(next, end)
			case !h.next.After(now):
				h.renewing = true
				qm.wg.Go(h.renew) // from a goroutine of wg: even once Close waits for it
				next = minTime(next, end)
			default:
				next = minTime(next, minTime(h.next, end))
			}
			h.mu.Unlock()
		}
		timer.Reset(time.Until(next))
		select {
		case <-d.halted:
			return
		case <-d.kick:
		case <-timer.C:
		}
	}
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
