package fair

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/fairlock/fairlock/internal/errs"
	"github.com/fairlock/fairlock/internal/pause"
	"github.com/fairlock/fairlock/lua"
	"github.com/fairlock/fairlock/notify"
	"github.com/fairlock/fairlock/queue"
)

// Mutex is one named lock of an engine. It is a cheap handle, safe for
// concurrent use.
type Mutex struct {
	e           *Engine
	keys        queue.Keys
	wakeChannel string // the engine's wake channel of the lock: keys.ClientWake(e.tag)
	// w is nil for a Mutex; for a weighted lock (see weighted.go) what
	// its handles share, and level what this handle's calls ask for.
	w     *Weights
	level lua.Level
	kind  string // what the lock is, for the log (see log.go)
}

// Request is one attempt to take a lock.
type Request struct {
	Owner string        // owner id of the hold
	Lease time.Duration // the hold's lease
	Fixed bool          // the lease is fixed: no watchdog renews it
	Wait  bool          // wait in line; false: fail with errs.ErrLocked at once
	// Shared: the owner id may be used by other calls too, here or in
	// other processes (fairlock.ContextWithOwner); false: it is this
	// call's own.
	Shared bool
	// Value is an Election candidate's value: the call's entry is then a
	// candidate's (queue.CandidateVersion), whose grant is a leadership
	// with that value (see lua/lib.lua). "" for every other lock.
	Value string
}

// Lock takes the lock for req.Owner. Without req.Wait it makes one
// attempt and fails with errs.ErrLocked when the lock is held or anyone waits.
// With req.Wait it joins the queue and waits, in FIFO order, until the
// lock is handed to it or ctx ends.
//
// When ctx ends first, Lock takes its entry out of the queue (giving
// back a hand-over that raced with the cancellation) and returns ctx's
// error, joined with errs.ErrUnavailable when Redis was not serving the
// call (see unavailable.go): the caller then holds nothing and Redis
// keeps nothing of it.
func (l *Mutex) Lock(ctx context.Context, req Request) (*Hold, error) {
	return lockIn[*Hold](l, ctx, req)
}

// lockIn is Lock in the line ln: one lock's, or the lines of several
// locks that one ticket waits in. Its grant makes a G.
func lockIn[G any](ln line[G], ctx context.Context, req Request) (G, error) {
	var none G
	if err := ctx.Err(); err != nil {
		return none, err
	}
	e := ln.engine()
	if err := e.begin(); err != nil {
		return none, err
	}
	defer e.ops.Done()
	e.announce()
	// Fast path: one attempt, no subscription. Its entry is the one the
	// caller waits under if it must, so that a grant whose reply was lost
	// is claimed by the first poll, not counted again.
	entry := ln.entry(req)
	start := time.Now()
	if e.observing() {
		e.observe(ctx, Event{Kind: EventWaitStarted, Lock: ln.name(), Locks: ln.names(), Owner: req.Owner, Call: queue.WaiterIDOf(entry), Wait: req.Wait})
	}
	checked := time.Now()
	if err := e.checkServer(ctx); err != nil {
		err = unansweredFor(ctx, err, checked)
		ln.observeEnd(ctx, req, entry, start, none, err)
		return none, err
	}
	g, err := take(ln, ctx, req, entry, start)
	if err != nil && !errors.Is(err, errs.ErrLocked) {
		// Whatever the call left in Redis is a trace once it returns.
		ln.ended(req, entry)
	}
	ln.observeEnd(ctx, req, entry, start, g, err)
	return g, err
}

// entry returns the queue entry of one Lock call: a fresh waiter id that
// ends with the engine's tag.
func (l *Mutex) entry(req Request) string {
	if l.w != nil {
		return queue.WeightedEntry(queue.NewID()+l.e.tag+queue.WakeVersion, req.Lease, l.level.Weight, l.level.Excl, req.Owner)
	}
	return queue.Entry(queue.NewID()+l.e.tag+entryVersion(req), req.Lease, req.Owner)
}

// entryVersion is the version that ends the waiter id of req's entry,
// after the tag: an election candidate's, or the wake format's.
func entryVersion(req Request) string {
	if req.Value != "" {
		return queue.CandidateVersion
	}
	return queue.WakeVersion
}

// take is Lock, begun at start, once the engine's checks passed, under
// entry.
func take[G any](ln line[G], ctx context.Context, req Request, entry string, start time.Time) (G, error) {
	var none G
	e := ln.engine()
	if req.Wait && e.hub.Subscribed(ln.wake()) {
		// Other waiters of this Client keep its wake channel of the lock
		// subscribed: the lock is contended. Joining them costs no round
		// trip, and the first wait-mode poll grants a free lock as a try
		// would, or else takes a place in line: one round trip where a try
		// first would make two.
		return wait(ln, ctx, req, entry, start, nil)
	}
	sent := time.Now()
	// answered receives the outcome of an attempt that ctx cut short, once
	// Redis answers it (or it fails).
	answered := make(chan error, 1)
	rep, err := callWithin(ln, ctx, req, entry, queue.ModeTry, func(rep queue.Reply, err error) {
		giveBackIfGranted(ln, ctx, req)(rep, err)
		answered <- err
	})
	switch {
	case unacked(err) && rep.Count > 1:
		// Granted, but as one more level of a hold that the owner (an id
		// shared by several callers) already had: a re-entry. Polling
		// again would count another level, so it is given back instead.
		return none, dropUnacked(ln, ctx, req, err)
	case err != nil && req.Wait && retryable(err) && ctx.Err() == nil && !errors.Is(err, errs.ErrClosed):
		// Redis unreachable, or failing over, or a grant that the
		// replicas did not acknowledge: wait in line, which keeps trying
		// (and claims such a grant without counting it again), bounded
		// by ctx.
		e.log.Log(ctx, failLevel(err), "fairlock: lock attempt failed, waiting", lineAttrs(ln, req.Owner, start, "err", err)...)
		var pending error
		if unacked(err) {
			pending = err
		}
		return wait(ln, ctx, req, entry, start, pending)
	case unacked(err):
		// Granted, not acknowledged, and not to be waited for (TryLock,
		// a context that ended, a WAIT refused): give it back.
		return none, dropUnacked(ln, ctx, req, err)
	case ctxEnded(ctx, err):
		// ctx ended while the attempt was out; callWithin waited a grace
		// for its answer.
		select {
		case last := <-answered:
			if failedRound(last) {
				return none, withUnavailable(err, last)
			}
			return none, err
		default:
			return none, withUnavailable(err, nil)
		}
	case publishRefused(err):
		// The server refused a message of the call (see acquire.lua):
		// the call handed the lock to the head of the line, or granted
		// it to this very call when it is an election's candidate whose
		// news to the observers was refused. Leaving the line gives
		// such a grant back.
		return none, errors.Join(err, giveUp(ln, ctx, req.Owner, entry))
	case err != nil:
		return none, err
	case rep.Granted && !late(req, sent):
		return ln.grant(ctx, req, entry, rep, sent, req.Lease, handing{})
	case rep.Granted && req.Wait:
		return wait(ln, ctx, req, entry, start, nil) // its first poll claims the grant
	case rep.Granted:
		return claimTry(ln, ctx, req, entry)
	case !req.Wait:
		return none, errs.ErrLocked
	}
	return wait(ln, ctx, req, entry, start, nil)
}

// dropUnacked gives back a level that a call granted but the replicas did
// not acknowledge (err), and returns the error for the caller: err, with
// ctx's error when it ended, and the give-back's failure if any. The
// give-back waits for no replicas (see giveBackUnacked), and the caller
// waits for it: when the call returns, the level has been given back on
// the primary, unless the primary did not answer before ctx ended (then
// at most cleanupGrace later, and the error says the give-back is still
// under way). Must run within an operation of the engine (begin).
func dropUnacked[G any](ln line[G], ctx context.Context, req Request, err error) error {
	return errors.Join(ctx.Err(), err, ln.engine().awaitCleanup(ctx, func() error { return ln.giveBackUnacked(ctx, req) }))
}

// lateClaims bounds how often a grant that was answered late is claimed
// again before it is taken as it is (its watchdog then renews it at once,
// and declares it lost if that fails in time).
const lateClaims = 3

// late reports whether a grant answered now to a call sent at sent came so
// late (a server that was stopped, a network that stalled while the call
// was out) that what is known of the hold's expiry, a lease from sent, is
// mostly spent: less than a third is left, so the watchdog could not renew
// it in time and would declare it lost at once. Such a grant is claimed
// with one more call under the same entry, which sets the full lease from
// a send time that is known and counts no level twice.
func late(req Request, sent time.Time) bool {
	return !time.Now().Before(sent.Add(req.Lease - req.Lease/3))
}

// claimTry claims a late grant of a TryLock (see late).
func claimTry[G any](ln line[G], ctx context.Context, req Request, entry string) (G, error) {
	var none G
	var rep queue.Reply
	var sent time.Time
	for range lateClaims {
		sent = time.Now()
		var err error
		rep, err = callWithin(ln, ctx, req, entry, queue.ModeTry, giveBackIfGranted(ln, ctx, req))
		switch {
		case err != nil && !unacked(err) && (ctx.Err() != nil || errors.Is(err, errs.ErrClosed)):
			return none, err // the orphan gives a grant back
		case unacked(err):
			return none, dropUnacked(ln, ctx, req, err)
		case err != nil:
			return none, errors.Join(err, ln.engine().soon(func() error { return ln.giveBack(ctx, req) }))
		case !rep.Granted:
			return none, errs.ErrLocked // the late grant expired meanwhile
		case !late(req, sent):
			return ln.grant(ctx, req, entry, rep, sent, req.Lease, handing{})
		}
	}
	return ln.grant(ctx, req, entry, rep, sent, req.Lease, handing{})
}

// retryable reports whether a call that failed with err may succeed when
// sent again: a network error, or a reply of a server in a failover. A
// primary with fewer replicas connected than the engine waits for (see
// acknowledged) is not waited for.
func retryable(err error) bool {
	if errors.As(err, new(tooFewReplicas)) || errors.Is(err, errs.ErrLayout) {
		return false
	}
	return !redisError(err) || transient(err)
}

// poll runs one acquire on a context detached from ctx.
//
// A TryLock's attempt and a re-entry that get no answer (a connection
// refused or cut: a restart, a failover under way) are sent again, with
// the backoff of a waiting Lock's polls, until Redis answers or the
// call's bound passes (the call timeout): under the same entry, so that
// a try's grant whose answer was lost is claimed, not granted twice, and
// under the same call id, so that a re-entry counts once. A waiting
// Lock's attempts are not: its wait sends them again itself, and keeps
// its place in line meanwhile.
func (l *Mutex) poll(ctx context.Context, req Request, entry, mode string) (queue.Reply, error) {
	if entry == "" {
		entry = l.entry(req)
	}
	cctx, cancel := l.e.detached(ctx)
	defer cancel()
	call := queue.NewID()
	if mode == queue.ModeWait || (mode == queue.ModeTry && req.Wait) {
		return l.acquireCall(cctx, call, req, entry, mode)
	}
	return untilAnswered(cctx, func() (queue.Reply, error) { return l.acquireCall(cctx, call, req, entry, mode) })
}

// untilAnswered runs f, and again, with the backoff of a waiting Lock's
// polls, while Redis does not answer it (see unanswered), until it
// answers or ctx ends: for a call that may run twice, sent under the same
// id or writing the same thing.
func untilAnswered[T any](ctx context.Context, f func() (T, error)) (T, error) {
	for retry := retryMin; ; retry = min(2*retry, retryMax) {
		v, err := f()
		if !unanswered(err) || ctx.Err() != nil || !pause.For(ctx, retry) {
			return v, err
		}
	}
}

// unanswered reports whether a call failed without an answer from Redis
// (a network error), which sending it again may get past.
func unanswered(err error) bool {
	return err != nil && !redisError(err) && !unacked(err) && !errors.Is(err, errs.ErrClosed) && !errors.Is(err, errs.ErrLayout) &&
		!errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}

// wait is the slow path of Lock, begun at start: subscribe, then poll in
// wait mode until granted, sleeping on the hub's signal or the script's
// hint in between.
//
// pending is the error of the fast path's attempt when it granted the lock
// to entry but the replicas did not acknowledge it: the first poll claims
// that grant (the count stays) and waits for the replicas again.
func wait[G any](ln line[G], ctx context.Context, req Request, entry string, start time.Time, pending error) (G, error) {
	var none G
	e := ln.engine()
	watched := time.Now()
	w, err := e.hub.Watch(ctx, ln.wake(), entry)
	if err != nil {
		if !errors.Is(err, errs.ErrClosed) {
			err = unansweredFor(ctx, refusal(err), watched)
		}
		if pending != nil {
			// The unacknowledged grant is entry's: leaving the queue gives
			// it back.
			return none, errors.Join(err, pending, e.soon(func() error { return giveUp(ln, ctx, req.Owner, entry) }))
		}
		return none, err
	}
	defer w.Stop()
	shared := watchShared(ln, ctx, entry)
	var sharedC <-chan struct{} // nil when not watched: never ready
	if shared != nil {
		defer shared.Stop()
		sharedC = shared.C()
	}

	timer := time.NewTimer(time.Hour)
	timer.Stop() // armed by each poll's answer; no stale tick can follow (Go 1.23 timers)
	defer timer.Stop()
	retry := retryMin
	failing := false         // the last poll failed: the next failure is logged at Debug
	var polled time.Time     // send time of the last poll that Redis answered
	claims := 0              // polls that claimed a grant answered late
	queued := false          // a poll left the caller in line: a grant is a hand-over
	var joinSent time.Time   // send time of the first poll, which may have joined the line
	joinSeen := false        // the join was reported (EventQueued)
	var clock serverClock    // the last poll that left the caller in line, on both clocks
	var pushed time.Duration // the latency of a timed hand-over that was pushed, else 0
	// unackedErr is the error of the last poll when it granted the lock
	// but the replicas did not acknowledge it (nil otherwise): the reason
	// the wait goes on, reported if it ends before a grant counts.
	unackedErr := pending
	// failed is the error of the last poll when Redis did not serve it
	// (see failedRound), nil when it answered.
	var failed error
	withUnacked := func(err error) error {
		if unackedErr == nil {
			return err
		}
		return errors.Join(err, unackedErr)
	}
	for {
		sent := time.Now()
		if joinSent.IsZero() {
			joinSent = sent
		}
		left := make(chan struct{}) // closed once the poll's orphan, if any, left the queue
		var leftErr error           // the orphan's error of leaving; set before left is closed
		var lateErr error           // the poll's own error, told to the orphan; set before left is closed
		leave := leaveQueue(ln, ctx, req, entry)
		rep, err := callWithin(ln, ctx, req, entry, queue.ModeWait, func(rep queue.Reply, err error) {
			lateErr = err
			leftErr = leave(rep, err)
			close(left)
		})
		if err == nil && rep.Granted && !polled.IsZero() && !pushedTo(shared) {
			w.Missed() // a hand-over since an answered poll: was it pushed?
		}
		if err == nil {
			polled = sent
		}
		if failedRound(err) {
			failed = err
		} else {
			failed = nil
		}
		switch {
		case err != nil && !unacked(err) && (ctx.Err() != nil || errors.Is(err, errs.ErrClosed)):
			// The caller gave up, or the Client closed, during the poll;
			// the poll's orphan leaves the queue once it is answered. As
			// for a give-up between polls (see soon), the error of leaving
			// is the caller's when the orphan is done within the grace
			// that callWithin waits for it; otherwise it goes on in the
			// background.
			if unackedErr == nil {
				select {
				case <-left:
					err = errors.Join(err, leftErr)
					if ctxEnded(ctx, err) && failedRound(lateErr) {
						err = withUnavailable(err, lateErr)
					} else if ctxEnded(ctx, err) && failedRound(leftErr) {
						err = withUnavailable(err, nil)
					}
					return none, err
				default:
					// Neither the poll nor the leaving was answered
					// within the grace.
					if ctxEnded(ctx, err) {
						err = withUnavailable(err, nil)
					}
					return none, err
				}
			}
			// The error says ErrNotReplicated: the grant it names is
			// given back when Lock returns, or the error says that is
			// still under way. The orphan leaves the queue (which gives
			// the grant back); a poll that was answered has none.
			orphaned := err == ctx.Err() || err == errs.ErrClosed
			return none, errors.Join(withUnacked(err), e.awaitCleanup(ctx, func() error {
				if !orphaned {
					return giveUp(ln, ctx, req.Owner, entry)
				}
				select {
				case <-left:
					return leftErr
				case <-e.stopped.Done():
					// The poll never went out (Close had started), or
					// Close's bound passed: nothing more is waited for.
					return errs.ErrClosed
				}
			}))
		case unacked(err) && rep.Count > 1:
			// A re-entry of a hold the owner id already had (see Lock),
			// not a claim of entry's own grant: give it back. The poll
			// took entry out of the queue.
			return none, dropUnacked(ln, ctx, req, err)
		case err == nil && rep.Granted && (!late(req, sent) || claims >= lateClaims):
			return ln.grant(ctx, req, entry, rep, sent, req.Lease, handing{waited: queued, handOver: pushed})
		case err == nil && rep.Granted:
			// Answered late (see late): claim it with one more poll now.
			claims++
			timer.Reset(0)
		case err == nil:
			answered := time.Now()
			queued, failing = true, false
			clock = serverClock{sent: sent, answered: answered, server: rep.ServerTime}
			if e.observing() {
				ev := Event{Lock: ln.name(), Locks: ln.names(), Owner: req.Owner, Call: queue.WaiterIDOf(entry), Wait: true, Sent: sent, Answered: answered}
				switch {
				case rep.Joined:
					ev.Kind, ev.Position = EventQueued, rep.Position
					e.observe(ctx, ev)
				case !joinSeen:
					// The entry is in line, but no answer said it joined:
					// the poll that joined was answered to nobody (its
					// reply lost with a connection, a restart), and this
					// one found the entry there. The join happened since
					// the first poll was sent; where in line is unknown.
					ev.Kind, ev.Sent, ev.Position = EventQueued, joinSent, 0
					e.observe(ctx, ev)
					ev.Sent = sent
				}
				joinSeen = true
				ev.Kind, ev.Position = EventPolled, 0
				e.observe(ctx, ev)
			}
			retry = retryMin
			timer.Reset(time.Duration(rep.Hint) * time.Millisecond)
		case !retryable(err):
			// The server refused the script (wrong key type, ...), or the
			// WAIT after a grant: waiting longer will not help. Leaving
			// the queue gives back a grant to entry.
			return none, errors.Join(err, giveUp(ln, ctx, req.Owner, entry))
		default:
			// Connection trouble, or a server that is loading, failing
			// over or moving slots, or a grant to entry that the replicas
			// did not acknowledge: keep our place (or the grant, which the
			// next poll claims) by polling again soon; the caller's
			// context bounds the wait.
			unackedErr = nil
			if unacked(err) {
				unackedErr = err
			}
			level := slog.LevelDebug
			if !failing {
				level = failLevel(err) // the first of a stretch, unless Redis is unreachable (see reach)
			}
			failing = true
			e.log.Log(ctx, level, "fairlock: poll failed, retrying", lineAttrs(ln, req.Owner, start, "err", err, "retry", retry)...)
			timer.Reset(retry)
			retry = min(2*retry, retryMax)
		}

		var signalled *notify.Waiter
		select {
		case <-w.C():
			signalled = w
		case <-sharedC:
			signalled = shared
		case <-timer.C:
		case <-ctx.Done():
			leave := func() error { return giveUp(ln, ctx, req.Owner, entry) }
			if unackedErr != nil {
				// The error says ErrNotReplicated: the grant it names
				// is given back (leaving the queue does it) when Lock
				// returns, or the error says that is still under way.
				return none, errors.Join(withUnacked(ctx.Err()), e.awaitCleanup(ctx, leave))
			}
			leftErr, done := graced(e.background(leave))
			err := errors.Join(ctx.Err(), leftErr)
			switch {
			case failed != nil:
				err = withUnavailable(err, failed)
			case !done || failedRound(leftErr):
				err = withUnavailable(err, nil)
			}
			return none, err
		case <-e.closing:
			return none, errors.Join(withUnacked(errs.ErrClosed), giveUp(ln, ctx, req.Owner, entry))
		}
		if signalled != nil {
			timer.Stop() // no stale tick can follow (Go 1.23 timers)
			if token, ok := signalled.Grant(); ok {
				if e.observing() { // only the Observer is told the latency
					pushed = clock.latency(signalled.GrantTime())
				}
				rep, whole := ln.pushed(token, signalled.Tokens())
				if span, trusted := pushedSpan(ln, req, polled); trusted && whole {
					return ln.grant(ctx, req, entry, rep, polled, span, handing{waited: queued, handOver: pushed})
				}
				// Claim the hold with one more poll, which answers
				// granted and sets the full lease from now.
			}
		}
	}
}

// serverClock is one poll's answer set beside the waiter's clock: it was
// sent at sent, answered at answered, and ran at server (µs on the
// server's clock; 0 when the server did not say).
type serverClock struct {
	sent, answered time.Time
	server         int64
}

// latency estimates how long a hand-over took to reach the waiter: from
// the time in Redis the wake message carried (at, µs on the server's
// clock; 0 when it carried none) to the time it was heard on this
// process's clock. The two clocks are set side by side by the last poll
// that left the waiter in line, taken to have run halfway between its
// send and its answer: the estimate is off by at most half that poll's
// round trip (and by the two clocks' drift since, which is small). It
// returns 0 when either time is unknown, and otherwise never less than
// a µs (an estimate below is within its error of 0), so that 0 always
// means unknown.
func (c serverClock) latency(at int64, heard time.Time) time.Duration {
	if at <= 0 || c.server <= 0 || heard.IsZero() {
		return 0
	}
	ran := c.sent.Add(c.answered.Sub(c.sent) / 2)
	handedAt := ran.Add(time.Duration(at-c.server) * time.Microsecond)
	return max(heard.Sub(handedAt), time.Microsecond)
}

// watchShared registers entry on the lock's shared wake channel too, on
// which clients from before tags publish every hand-over (their scripts
// know no tags), so that during a rolling upgrade a hand-over from such
// a client's release still reaches this waiter by push. It returns nil
// when the hub cannot watch the channel: the waiter then learns of such
// a hand-over at its next poll, as it would of any unheard one.
func watchShared[G any](ln line[G], ctx context.Context, entry string) *notify.Waiter {
	channel := ln.sharedWake()
	if channel == "" {
		return nil
	}
	e := ln.engine()
	w, err := e.hub.Watch(ctx, channel, entry)
	if err != nil {
		e.log.Debug("fairlock: not watching the shared wake channel", "lock", ln.name(), "kind", ln.lockKind(), "err", err)
		return nil
	}
	return w
}

// pushedTo reports whether a grant reached w (nil: not watched).
func pushedTo(w *notify.Waiter) bool {
	if w == nil {
		return false
	}
	_, ok := w.Grant()
	return ok
}

// pushedSpan decides whether a grant that came by push can be taken as it
// is, with no round trip: it returns for how long, counted from the last
// answered poll (polled), the handed-over hold is known to last, and false
// when the waiter must claim the hold with one more poll instead.
//
// The release script gives a handed-over hold the waiter's lease, but no
// longer than the waiter's deadline, which the last answered poll set
// WaiterTTL ahead; the hand-over came after that poll, so the hold lasts
// at least span from polled. When most of that is spent (a short lease, a
// last poll long ago), the hold would have to be renewed at once or be
// declared lost, so it is claimed instead. A fixed lease is always
// claimed: it must last its full length from a grant whose time the
// holder knows, so that the holder's context and Redis end it together.
//
// With replicas to wait for, a push is never taken as it is either: the
// hand-over was made by another caller's script, and the waiter's grant
// counts only once a poll of its own has been acknowledged.
func pushedSpan[G any](ln line[G], req Request, polled time.Time) (time.Duration, bool) {
	e := ln.engine()
	if req.Fixed || e.repl != nil {
		return 0, false
	}
	span := min(req.Lease, e.cfg.WaiterTTL)
	return span, time.Until(polled.Add(span-span/3)) > 0
}

const (
	retryMin = 20 * time.Millisecond
	retryMax = time.Second
)

// giveUp takes a waiter that stops waiting out of the queue; if the lock
// was handed to it meanwhile, the cancel script passes it on. The error is
// nil when Redis keeps nothing of the waiter.
func giveUp[G any](ln line[G], ctx context.Context, owner, entry string) error {
	e := ln.engine()
	cctx, cancel := e.detached(ctx)
	defer cancel()
	_, err := ln.cancel(cctx, owner, entry)
	if publishRefused(err) {
		return fmt.Errorf("fairlock: left the queue and handed the lock on, but %w", err)
	}
	if err != nil && retryable(err) && e.goUnlessClosed(func() { leaveLater(ln, owner, entry) }) {
		return fmt.Errorf("fairlock: leaving the queue: %w (sent again in the background until Redis answers)", err)
	}
	if err != nil {
		e.log.Warn("fairlock: could not leave the queue; the entry expires after the waiter TTL",
			"lock", ln.name(), "kind", ln.lockKind(), "owner", owner, "err", err)
		return fmt.Errorf("fairlock: leaving the queue: %w", err)
	}
	return nil
}

// leaveLater sends a waiter's cancel again, with backoff, until Redis
// answers it, until the waiter TTL has passed (the entry has expired by
// then: its last poll was before this give-up) or until the engine
// closes. A cancel may run twice: the second finds nothing to do.
func leaveLater[G any](ln line[G], owner, entry string) {
	e := ln.engine()
	done, closed := e.sendAgain(time.Now().Add(e.cfg.WaiterTTL), func(ctx context.Context) bool {
		_, err := ln.cancel(ctx, owner, entry)
		return err == nil || !retryable(err)
	})
	if !done && !closed {
		e.log.Debug("fairlock: could not leave the queue; the entry expired after the waiter TTL",
			"lock", ln.name(), "kind", ln.lockKind(), "owner", owner)
	}
}

// hold turns a grant into a Hold, unless ctx ended or the engine closed
// meanwhile: then the grant is given back and the caller gets the error.
//
// The grant is known to last span from the send time of the call that
// made it (from): the lease, or for a hand-over no more than the waiter
// deadline. The watchdog renews it from that (see watchdog).
func (l *Mutex) hold(ctx context.Context, req Request, entry string, token int64, from time.Time, span time.Duration, how handing) (*Hold, error) {
	h := newHold(l, req, entry, token, from, span)
	h.waited, h.handOver = how.waited, how.handOver
	fail := ctx.Err()
	if fail == nil && l.e.observing() {
		// Before the hold is visible to Close, which may end it at once.
		h.observed = &observedHold{took: time.Now(), ctx: context.WithoutCancel(ctx)}
	}
	if fail == nil && !l.e.addHold(h) {
		fail = errs.ErrClosed
	}
	if fail != nil {
		h.observed = nil // never handed out: nothing to report
		h.end(fail)
		return nil, errors.Join(fail, l.e.soon(func() error { return l.giveBack(ctx, req) }))
	}
	h.start()
	return h, nil
}

// giveBack releases one level that was granted to a caller who no longer
// wants it.
func (l *Mutex) giveBack(ctx context.Context, req Request) error {
	cctx, cancel := l.e.detached(ctx)
	defer cancel()
	_, err := l.release(cctx, req.Owner, 0)
	switch {
	case publishRefused(err):
		return fmt.Errorf("fairlock: gave back a grant and handed the lock on, but %w", err)
	case unacked(err):
		return fmt.Errorf("fairlock: gave back a grant on the primary, but %w", err)
	case err != nil:
		return fmt.Errorf("fairlock: giving back a grant: %w", err)
	}
	return nil
}

// giveBackUnacked releases one level that was granted, but not
// acknowledged by the replicas, to a caller who no longer wants it. The
// release waits for no replicas: the grant may be on no replica, so a
// failover can bring it back whether or not the release reached them, and
// waiting would only hold up the caller (a release acknowledged by the
// replicas whose grant they never had is no safer). What a failover
// brings back is a hold of an owner that is done with the lock: under an
// owner id of the call's own, the engine's audit (see audit.go) watches
// the ended call (Lock records it; a re-entry's hold, once it ends) and
// releases it; under a shared owner id it may stay until its lease runs
// out, as an unacknowledged release may.
func (l *Mutex) giveBackUnacked(ctx context.Context, req Request) error {
	cctx, cancel := l.e.detached(ctx)
	defer cancel()
	_, err := l.releaseUnwaited(cctx, req.Owner)
	switch {
	case publishRefused(err):
		return fmt.Errorf("fairlock: gave back a grant and handed the lock on, but %w", err)
	case err != nil:
		return fmt.Errorf("fairlock: giving back a grant: %w", err)
	}
	return nil
}
