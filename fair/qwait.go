package fair

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/fairlock/fairlock/internal/errs"
	"github.com/fairlock/fairlock/lua"
	"github.com/fairlock/fairlock/queue"
)

// qview is what a Lock call or a hold knows of itself on one master.
type qview struct {
	held  bool
	token int64
	// until is when the hold there is known to last at least, on this
	// process's clock: the send time of the call that said so, plus the
	// span of the expiry it set (Quorum.span). For a pushed grant, the
	// send time of the latest call answered there (sent), or of the
	// first (first) when none was.
	until time.Time
	sent  time.Time
	first time.Time
	// ok is when the master last answered without an error.
	ok time.Time
	// yielded is the largest token given back there, floor the counter
	// of the latest answer that found no hold: a push at or below either
	// is stale.
	yielded, floor int64
	lower          bool // a smaller key waits there while we hold it
	gone           bool // the Lock call is buried there
	yielding       bool // a yield is on its way
	joined         bool // a join was answered there
}

// stale reports whether a pushed grant under token is older than what v
// knows.
func (v *qview) stale(token int64) bool {
	return token <= v.yielded || token <= v.floor || (v.held && token <= v.token)
}

// counted returns how many views hold with until after at, and the q-th
// latest until among the views that hold (zero when fewer hold).
func counted(views []qview, at time.Time, q int) (int, time.Time) {
	n := 0
	var untils []time.Time
	for _, v := range views {
		if v.held && !v.yielding {
			untils = append(untils, v.until)
			if v.until.After(at) {
				n++
			}
		}
	}
	return n, kthLatest(untils, q)
}

// minAccept is how much validity a grant must have left to count: a
// third of min(lease, waiter TTL), as for a pushed hand-over of a Mutex.
func (qm *Quorum) minAccept(lease time.Duration) time.Duration {
	return min(lease, qm.cfg.WaiterTTL) / 3
}

// Lock takes the lock for req.Owner on a majority of the masters (see
// Mutex.Lock for the contract). Without req.Wait it makes one round and
// fails with errs.ErrLocked when no majority is free. Fewer than a
// majority answering the first round fails it with errs.ErrNoQuorum.
func (l *QMutex) Lock(ctx context.Context, req Request) (*QHold, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	qm := l.qm
	if err := qm.begin(); err != nil {
		return nil, err
	}
	defer qm.ops.Done()
	start := time.Now()
	var h *QHold
	var err error
	var call string // the call id of the latest attempt, which every event of the call carries
	for {
		w := l.newWaiter(req)
		call = queue.WaiterIDOf(w.entry)
		if qm.cfg.Observe != nil {
			qm.observe(ctx, Event{Kind: EventWaitStarted, Lock: l.keys.Name, Owner: req.Owner, Call: call, Wait: req.Wait})
		}
		var again bool
		h, again, err = w.run(ctx)
		if !again {
			break
		}
		qm.log.Warn("fairlock: a quorum waiter lost its majority; it starts over", callAttrs(l.keys.Name, kindQuorumMutex, req.Owner, start)...)
	}
	if qm.cfg.Observe != nil {
		ev := Event{Lock: l.keys.Name, Owner: req.Owner, Call: call, Wait: req.Wait, Waited: time.Since(start)}
		if err != nil {
			ev.Kind, ev.Err = EventWaitEnded, err
		} else {
			ev.Kind, ev.Grant, ev.Token = EventGranted, GrantFresh, h.grantToken()
			if h.waited {
				ev.Grant = GrantHandOver
			}
		}
		qm.observe(ctx, ev)
	}
	return h, err
}

// qwaiter is one attempt of a Lock call: one entry, one ticket.
type qwaiter struct {
	l     *QMutex
	req   Request
	entry string
	start time.Time

	// ord orders the calls of the attempt, and then of its hold, on each
	// master (see order).
	ord *order

	changed chan struct{}   // capacity 1: a view changed
	stop    chan struct{}   // closed when the attempt is over
	kicks   []chan struct{} // per master, capacity 1: send a yield now

	mu       sync.Mutex
	views    []qview // guarded by mu
	ticket   int64
	joinSent time.Time // when the first join was sent
	over     bool      // guarded by mu
	queued   bool      // guarded by mu: EventQueued was reported
}

func (l *QMutex) newWaiter(req Request) *qwaiter {
	n := len(l.qm.masters)
	w := &qwaiter{
		l:       l,
		req:     req,
		entry:   queue.Entry(queue.NewID()+l.qm.tag+entryVersion(req), req.Lease, req.Owner),
		start:   time.Now(),
		changed: make(chan struct{}, 1),
		stop:    make(chan struct{}),
		kicks:   make([]chan struct{}, n),
		views:   make([]qview, n),
		ord:     newOrder(n),
	}
	for i := range w.kicks {
		w.kicks[i] = make(chan struct{}, 1)
	}
	return w
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// run makes the attempt: the doorway round, then, when it must wait,
// the joins and pushes until a majority holds for it, ctx ends or the
// Quorum closes. again says the attempt lost its majority for a waiter
// TTL and the call should start over with a fresh entry.
func (w *qwaiter) run(ctx context.Context) (h *QHold, again bool, err error) {
	qm := w.l.qm
	lease := w.req.Lease
	var (
		maxC, maxNow      int64
		answered, replied int
	)
	// The doorway asks a majority first (see doorwayMasters), and the
	// other masters only when those do not decide it: at once when the
	// round ends undecided, and meanwhile when it takes longer than
	// doorwayHedge (a master that hangs before it is known to be down
	// delays the doorway by that much, not by a call timeout).
	first := w.doorwayMasters()
	var (
		doorway = make(chan struct{}) // closed once the first round is decided or over
		closed  bool                  // doorway is closed; guarded by mu
		hedged  = make([]bool, len(qm.masters))
	)
	decide := func() { // requires mu
		if !closed {
			closed = true
			close(doorway)
		}
	}
	hedge := make(chan struct{})
	hedger := time.AfterFunc(doorwayHedge, func() { close(hedge) })
	took := func(a answer) bool {
		if errors.Is(a.err, errNotAsked) {
			return false
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		w.tried(a)
		replied++
		if a.err == nil {
			answered++
			maxC, maxNow = max(maxC, a.rep.Ticket), max(maxNow, a.rep.Now)
		}
		n, _ := counted(w.views, time.Now().Add(qm.minAccept(lease)), qm.q)
		// Decided: granted; or a majority answered (the doorway read),
		// and a waiting call goes on to join (a try granted late counts
		// there), or the masters that have not answered, asked or not,
		// cannot make a majority.
		if n >= qm.q || answered >= qm.q && (w.req.Wait && n == 0 || n+len(qm.masters)-replied < qm.q) {
			decide()
			return true
		}
		return false
	}
	late := func(a answer) {
		if errors.Is(a.err, errNotAsked) {
			return
		}
		w.mu.Lock()
		w.tried(a)
		w.mu.Unlock()
		signal(w.changed)
	}
	call := queue.NewID()
	send := func(cctx context.Context, i int) (lua.QReply, error) {
		return qm.run(cctx, i, func(s *lua.Scripts) lua.Call {
			return s.QTry(w.l.keys, call, w.req.Owner, w.entry, ms(lease), ms(qm.cfg.WaiterTTL), queue.ModeTry, qm.receiptTTL(), qm.skew(i)).WithValue(w.req.Value)
		}, lua.ReadQTry)
	}
	qm.round(ctx, w.ord, func(cctx context.Context, i int) (lua.QReply, error) {
		if !first[i] {
			select {
			case <-doorway:
				return lua.QReply{}, errNotAsked
			case <-cctx.Done():
				return lua.QReply{}, errNotAsked
			case <-hedge:
			}
			w.mu.Lock()
			if closed {
				w.mu.Unlock()
				return lua.QReply{}, errNotAsked
			}
			hedged[i] = true
			w.mu.Unlock()
		}
		return send(cctx, i)
	}, took, late)
	hedger.Stop()
	w.mu.Lock()
	decide()
	n, _ := counted(w.views, time.Now().Add(qm.minAccept(lease)), qm.q)
	rest := make([]bool, len(first)) // the masters the doorway has not asked
	unasked := 0
	for i := range first {
		if !first[i] && !hedged[i] {
			rest[i] = true
			unasked++
		}
	}
	decided := n >= qm.q || answered >= qm.q && (w.req.Wait && n == 0 || n+unasked < qm.q)
	w.mu.Unlock()
	if !decided && ctx.Err() == nil && unasked > 0 {
		// A master asked failed, or some granted and the others may make
		// a majority: the doorway asks the rest.
		second := rest
		rest = make([]bool, len(first))
		qm.round(ctx, w.ord, func(cctx context.Context, i int) (lua.QReply, error) {
			if !second[i] {
				return lua.QReply{}, errNotAsked
			}
			return send(cctx, i)
		}, took, late)
	}

	if err := ctx.Err(); err != nil {
		// The caller gave up during the doorway: a grant that raced with
		// it is given back, as every place the call took.
		w.giveUp(ctx)
		return nil, false, err
	}
	w.mu.Lock()
	n, valid := counted(w.views, time.Now().Add(qm.minAccept(lease)), qm.q)
	enough := answered >= qm.q
	if n >= qm.q {
		w.over = true
		views := append([]qview(nil), w.views...)
		w.mu.Unlock()
		close(w.stop)
		w.tryRest(ctx, rest)
		return w.l.newHold(ctx, w.req, w.entry, views, valid, false, w.ord), false, nil
	}
	w.ticket = max(maxC+1, maxNow)
	w.mu.Unlock()
	switch {
	case !enough:
		w.giveUp(ctx)
		return nil, false, qm.noQuorum(ctx, answered, "")
	case !w.req.Wait:
		w.giveUp(ctx)
		return nil, false, errs.ErrLocked
	}
	for i := range qm.masters {
		qm.wg.Go(func() { w.poll(ctx, i) })
	}
	return w.wait(ctx)
}

// doorwayHedge is how long the doorway's first round waits for the
// majority it asked before it asks the other masters too: far above a
// round trip to a master that answers, far below a call timeout.
const doorwayHedge = 50 * time.Millisecond

// doorwayMasters returns the masters the doorway asks first: a majority,
// from a random master on, skipping those in an outage while there are
// others. The ticket needs a majority's C (any two majorities share a
// master), and a grant a majority's tries; the other masters are asked
// only when those do not decide the doorway (a master failed, or the
// tries were split), and after a grant (see tryRest). A waiting call
// joins the line on every master all the same.
func (w *qwaiter) doorwayMasters() []bool {
	qm := w.l.qm
	n := len(qm.masters)
	ask := make([]bool, n)
	start := rand.IntN(n)
	picked := 0
	for pass := 0; pass < 2 && picked < qm.q; pass++ {
		for k := range n {
			i := (start + k) % n
			if picked == qm.q || ask[i] || pass == 0 && qm.masters[i].reach.isDown() {
				continue
			}
			ask[i] = true
			picked++
		}
	}
	return ask
}

// tryRest sends the doorway's try to the masters it did not ask (rest),
// once a majority granted: so that every master holds the hold, and it
// outlives the loss of one. Each try takes its turn on its master now,
// before any later call of the hold. As a try of the doorway answered
// after the grant, a grant there is not taken into the hold's views,
// whose token and validity stay those of the grant: the hold's first
// renewal, which asks every master, counts it.
func (w *qwaiter) tryRest(ctx context.Context, rest []bool) {
	qm := w.l.qm
	for i, r := range rest {
		if !r {
			continue
		}
		turn, next := w.ord.turn(i)
		qm.wg.Go(func() {
			<-turn
			defer next()
			cctx, cancel := qm.detached(ctx)
			_, _ = qm.run(cctx, i, func(s *lua.Scripts) lua.Call {
				return s.QTry(w.l.keys, queue.NewID(), w.req.Owner, w.entry, ms(w.req.Lease), ms(qm.cfg.WaiterTTL), queue.ModeTry, qm.receiptTTL(), qm.skew(i)).WithValue(w.req.Value)
			}, lua.ReadQTry)
			cancel()
		})
	}
}

// tried takes a doorway answer into the views. Requires mu.
func (w *qwaiter) tried(a answer) {
	v := &w.views[a.i]
	if v.first.IsZero() {
		v.first = a.sent
	}
	if a.err != nil {
		return
	}
	v.sent, v.ok = a.sent, time.Now()
	switch a.rep.State {
	case lua.QHeld:
		v.held, v.token = true, a.rep.Token
		v.until = a.sent.Add(w.l.qm.span(w.req.Lease))
	case lua.QGone:
		v.gone = true
	default:
		v.floor = max(v.floor, a.rep.Counter)
	}
}

// wait is the main loop of a waiting attempt.
func (w *qwaiter) wait(ctx context.Context) (*QHold, bool, error) {
	qm := w.l.qm
	lease := w.req.Lease
	ttl := qm.cfg.WaiterTTL
	tick := time.NewTicker(max(min(lease, ttl)/10, 10*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			w.giveUp(ctx)
			return nil, false, ctx.Err()
		case <-qm.closing:
			w.giveUp(ctx)
			return nil, false, errs.ErrClosed
		case <-w.changed:
		case <-tick.C:
		}
		if ctx.Err() != nil {
			continue // the select above gives up
		}
		now := time.Now()
		w.mu.Lock()
		n, valid := counted(w.views, now.Add(qm.minAccept(lease)), qm.q)
		if n >= qm.q {
			w.over = true
			views := append([]qview(nil), w.views...)
			w.mu.Unlock()
			close(w.stop)
			return w.l.newHold(ctx, w.req, w.entry, views, valid, true, w.ord), false, nil
		}
		joined, live, gone := 0, 0, 0
		for i := range w.views {
			v := &w.views[i]
			if v.held && v.lower && !v.yielding {
				// A smaller key waits there, and we have no majority:
				// give that master back (Maekawa's yield), keeping our
				// ticket's place.
				v.held, v.yielding = false, true
				signal(w.kicks[i])
			}
			if v.joined {
				joined++
			}
			if now.Sub(v.ok) < ttl {
				live++
			}
			if v.gone {
				gone++
			}
		}
		report := !w.queued && joined >= qm.q
		if report {
			w.queued = true
		}
		sent := w.joinSent
		lost := gone > len(qm.masters)-qm.q || (live < qm.q && now.Sub(w.start) > ttl)
		w.mu.Unlock()
		if report && qm.cfg.Observe != nil {
			qm.observe(ctx, Event{Kind: EventQueued, Lock: w.l.keys.Name, Owner: w.req.Owner, Call: queue.WaiterIDOf(w.entry), Wait: true, Sent: sent, Answered: now})
		}
		if lost {
			w.giveUp(ctx)
			return nil, true, nil
		}
	}
}

// poll keeps the attempt's place on master i: it watches the Client's
// wake channel of the lock there, joins, and joins again at the hint,
// at a push that is no grant (an inquiry), or to yield when the main loop
// asks, until the attempt is over.
func (w *qwaiter) poll(ctx context.Context, i int) {
	qm := w.l.qm
	e := qm.masters[i]
	wctx, cancel := qm.detached(ctx)
	watcher, err := e.hub.Watch(wctx, w.l.wake, w.entry)
	cancel()
	var sig <-chan struct{}
	if err != nil {
		qm.log.Warn("fairlock: a quorum master refused the wake channel; its grants are found by polls",
			"lock", w.l.keys.Name, "kind", kindQuorumMutex, "owner", w.req.Owner, "master", i, "err", err)
	} else {
		defer watcher.Stop()
		sig = watcher.C()
	}
	var pushed int64
	for {
		w.mu.Lock()
		if w.over {
			w.mu.Unlock()
			return
		}
		v := &w.views[i]
		var yield int64
		if v.yielding {
			yield = v.token
		}
		if w.joinSent.IsZero() {
			w.joinSent = time.Now()
		}
		ticket := w.ticket
		w.mu.Unlock()

		turn, next := w.ord.turn(i)
		<-turn
		sent := time.Now()
		cctx, cancel := qm.detached(ctx)
		rep, err := qm.run(cctx, i, func(s *lua.Scripts) lua.Call {
			return s.QJoin(w.l.keys, w.req.Owner, w.entry, ms(w.req.Lease), ms(qm.cfg.WaiterTTL), ticket, yield, qm.skew(i)).WithValue(w.req.Value)
		}, lua.ReadQJoin)
		cancel()
		next()
		if publishRefused(err) {
			err = nil // the wake message is lost; the state is in rep's place
			rep = lua.QReply{State: lua.QWaiting, Hint: 1}
		}
		w.joined(i, sent, yield, rep, err)

		delay := time.Duration(rep.Hint) * time.Millisecond
		if err != nil {
			delay = retryMin
			if !errors.Is(err, errs.ErrClosed) {
				qm.log.Debug("fairlock: a quorum join failed", "lock", w.l.keys.Name, "kind", kindQuorumMutex, "owner", w.req.Owner, "master", i, "err", err)
			}
		}
		t := time.NewTimer(max(delay, time.Millisecond))
	waiting:
		for {
			select {
			case <-w.stop:
				t.Stop()
				return
			case <-w.kicks[i]:
			case <-t.C:
			case <-sig:
				if tok, ok := watcher.Grant(); ok && tok != pushed {
					pushed = tok
					if w.push(i, tok) {
						continue waiting
					}
				}
			}
			break
		}
		t.Stop()
	}
}

// joined takes a join's answer into master i's view.
func (w *qwaiter) joined(i int, sent time.Time, yield int64, rep lua.QReply, err error) {
	w.mu.Lock()
	v := &w.views[i]
	if v.first.IsZero() {
		v.first = sent
	}
	if yield != 0 {
		v.yielding = false
		v.yielded = max(v.yielded, yield)
	}
	if err == nil {
		v.sent, v.ok, v.joined = sent, time.Now(), true
		switch {
		case rep.State == lua.QHeld && v.yielding:
			// A join that crossed the main loop's decision to yield: the
			// master stays uncounted until the yield has been answered.
			v.token = rep.Token
		case rep.State == lua.QHeld:
			v.held, v.token, v.lower = true, rep.Token, rep.Lower
			v.until = sent.Add(w.l.qm.span(min(w.req.Lease, w.l.qm.cfg.WaiterTTL)))
		case rep.State == lua.QGone:
			v.held, v.gone = false, true
		default:
			v.held, v.lower = false, false
			v.floor = max(v.floor, rep.Counter)
		}
	}
	w.mu.Unlock()
	signal(w.changed)
}

// push takes a pushed grant under token on master i into its view, and
// reports whether it did (false: stale, a yield is on its way, or the
// master does not count: see distinct).
func (w *qwaiter) push(i int, token int64) bool {
	if !w.l.qm.ids.counts(i) {
		return false // a master not known to be a server of its own
	}
	w.mu.Lock()
	v := &w.views[i]
	if v.stale(token) || v.yielding {
		w.mu.Unlock()
		return false
	}
	from := v.sent
	if from.IsZero() {
		from = v.first
	}
	v.held, v.token, v.lower = true, token, false
	v.until = from.Add(w.l.qm.span(min(w.req.Lease, w.l.qm.cfg.WaiterTTL)))
	w.mu.Unlock()
	signal(w.changed)
	return true
}

// giveUp ends the attempt: the pollers stop, and the entry leaves the
// line of every master (a grant that raced goes to the next waiter
// there). It waits for a majority of the masters, or the call timeout,
// or a quarter of a second after ctx ended (see graceAfter); the others
// are told in the background.
func (w *qwaiter) giveUp(ctx context.Context) {
	w.mu.Lock()
	already := w.over
	w.over = true
	w.mu.Unlock()
	if !already {
		close(w.stop)
	}
	gctx, cancel := graceAfter(ctx)
	defer cancel()
	w.l.bury(gctx, w.ord, w.entry)
}
