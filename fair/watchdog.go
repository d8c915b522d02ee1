package fair

import (
	"container/heap"
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/fairlock/fairlock/lua"
	"github.com/fairlock/fairlock/queue"
)

// watchdog keeps every hold of an engine alive with one goroutine, however
// many holds there are. A hold with a watchdog lease is renewed every
// lease/3, the first time when a third of the span known at its grant has
// passed (h.span from the send time of the call that made it): for a
// fresh grant a third of the lease; for a grant by hand-over, whose
// expiry may be the waiter's deadline, or one answered late, possibly at
// once; for a short hold never, as it is released first. A fixed lease is
// never renewed; the hold ends when it runs out.
//
// Holds wait in a heap by the time of their next renewal. Renewals that
// fall due together (within a thirtieth of their lease, at most
// coalesce) go out in pipelines per server (see byServer) of up to
// renewBatch each, so holds cost one goroutine in all and about
// holds/(lease/3) renewals per second, in fewer round trips.
//
// h.valid is a time until which the hold is known to last: the send time
// of the last call that set the expiry, plus the expiry it set (h.span).
// When renewals keep failing (Redis unreachable), the hold is declared
// lost a sixth of that span before that time, so the holder learns it
// before another owner can be granted.
type watchdog struct {
	e    *Engine
	kick chan struct{} // capacity 1: the earliest renewal moved up
	// halted is closed when the goroutine must stop: once Close has had
	// the answers to the releases of the holds it ended (see
	// Engine.closeHolds), which it renews until then.
	halted   chan struct{}
	haltOnce sync.Once

	mu      sync.Mutex
	due     dueHeap // guarded by mu: holds waiting for their next renewal, earliest first
	running bool    // guarded by mu: the goroutine was started
	// wakeAt is guarded by mu: when the goroutine wakes next by itself.
	// Only a hold due before then needs to wake it (a kick): a hold
	// taken as another is released, the common case, does not.
	wakeAt time.Time
}

// coalesce bounds how early a renewal is sent to join others in one
// pipeline.
const coalesce = 50 * time.Millisecond

func newWatchdog(e *Engine) *watchdog {
	return &watchdog{e: e, kick: make(chan struct{}, 1), halted: make(chan struct{})}
}

// halt stops the goroutine (see halted). It is idempotent.
func (w *watchdog) halt() {
	w.haltOnce.Do(func() { close(w.halted) })
}

// byDue sorts holds by the time of their next renewal, earliest first: the
// order in which their leases would lapse unrenewed. A hold whose renewal
// is under way counts as due now.
func (w *watchdog) byDue(holds []*Hold) {
	w.mu.Lock()
	due := make(map[*Hold]time.Time, len(holds))
	for _, h := range holds {
		due[h] = h.next
		if h.slot < 0 {
			due[h] = time.Time{}
		}
	}
	w.mu.Unlock()
	slices.SortStableFunc(holds, func(a, b *Hold) int { return due[a].Compare(due[b]) })
}

// watch schedules a new hold's first renewal (or, for a fixed lease, its
// end). It must be called within an operation of the engine.
func (w *watchdog) watch(h *Hold) {
	next := h.valid.Add(-h.span + h.span/3)
	if h.fixed {
		next = h.valid.Add(-h.fixedMargin)
	}
	w.schedule(h, next)
}

// schedule puts h back in line for time next, unless it has ended.
func (w *watchdog) schedule(h *Hold, next time.Time) {
	w.mu.Lock()
	if h.unwatched {
		w.mu.Unlock()
		return
	}
	if h.again {
		h.again = false
		next = time.Now()
	}
	h.next = next
	heap.Push(&w.due, h)
	first := w.due[0] == h && next.Before(w.wakeAt)
	start := !w.running
	w.running = true
	w.mu.Unlock()
	if start {
		w.e.wg.Go(w.run)
	}
	if first {
		select {
		case w.kick <- struct{}{}:
		default:
		}
	}
}

// renewNow moves h's next renewal to now, to learn at once whether Redis
// still has it (see revoke.go); renewals that fall due together still go
// out in one pipeline per server. A hold whose renewal is under way is
// renewed again as soon as that one is settled (it may have been sent
// before what made the caller ask); one that ended is left as it is. It
// never blocks.
func (w *watchdog) renewNow(h *Hold) {
	w.mu.Lock()
	if h.unwatched {
		w.mu.Unlock()
		return
	}
	if h.slot < 0 {
		h.again = true
		w.mu.Unlock()
		return
	}
	now := time.Now()
	h.next = now
	heap.Fix(&w.due, h.slot)
	wake := now.Before(w.wakeAt)
	w.mu.Unlock()
	if wake {
		select {
		case w.kick <- struct{}{}:
		default:
		}
	}
}

// unwatch takes an ended hold out of line for good.
func (w *watchdog) unwatch(h *Hold) {
	w.mu.Lock()
	defer w.mu.Unlock()
	h.unwatched = true
	if h.slot >= 0 {
		heap.Remove(&w.due, h.slot)
	}
}

// run sends the renewals as they fall due, until it is halted: once the
// engine has closed and released its holds.
func (w *watchdog) run() {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		renew, end, wait := w.takeDue(time.Now())
		for _, h := range end {
			// The fixed lease has run out: the hold ends, and what is
			// left of it in Redis (the key outlives our end by the call's
			// transit time) is released, so the next waiter is handed
			// the lock now rather than when its poll finds the key gone.
			h.lose(true, "the fixed lease ran out before Unlock", nil)
		}
		if len(renew) > 0 {
			w.e.wg.Go(func() { w.renew(renew) })
		}
		timer.Reset(wait)
		select {
		case <-w.halted:
			return
		case <-w.kick:
		case <-timer.C:
		}
	}
}

// takeDue takes out of line, once the earliest renewal is due, every hold
// whose renewal is due soon enough to join it, and the fixed holds whose
// lease has run out. It returns how long to wait for the next.
func (w *watchdog) takeDue(now time.Time) (renew, end []*Hold, wait time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	defer func() { w.wakeAt = now.Add(wait) }()
	if len(w.due) > 0 && w.due[0].next.After(now) {
		return nil, nil, w.due[0].next.Sub(now)
	}
	for len(w.due) > 0 {
		h := w.due[0]
		if at := h.next.Add(-h.early()); at.After(now) {
			return renew, end, h.next.Sub(now)
		}
		heap.Pop(&w.due)
		if h.fixed {
			end = append(end, h)
		} else {
			renew = append(renew, h)
		}
	}
	return renew, end, time.Hour
}

// early is how long before its time h's renewal may go out with others.
func (h *Hold) early() time.Duration {
	if h.fixed {
		return 0 // a fixed lease ends on time
	}
	return min(h.lease/30, coalesce)
}

// renew renews holds, the holds of each server they live on on their own
// (see byServer), and settles each one's outcome.
func (w *watchdog) renew(holds []*Hold) {
	groups := byServer(w.e, holds, func(h *Hold) string { return h.l.keys.Lock })
	for _, g := range groups[min(1, len(groups)):] {
		w.e.wg.Go(func() { w.renewServer(g) })
	}
	if len(groups) > 0 {
		w.renewServer(groups[0])
	}
}

// renewBatch bounds a pipeline of renewals, and renewInFlight how many of
// one server's pipelines go out at once.
const (
	renewBatch    = 1000
	renewInFlight = 4
)

// renewServer renews the holds of one server, those that must be
// declared lost first (giveUp) first, in pipelines of at most renewBatch
// holds whose times left differ by less than a factor of two,
// renewInFlight at once. Each pipeline is bounded by its own holds (see
// renewOn): when renewals fall due together (after the process or the
// server stalled), the few that are short of time do not cut short the
// wait for the answers of all the others, which would then fail together
// and fall due together again, shorter of time still.
func (w *watchdog) renewServer(holds []*Hold) {
	slices.SortFunc(holds, func(a, b *Hold) int { return a.giveUp().Compare(b.giveUp()) })
	now := time.Now()
	left := func(h *Hold) time.Duration { return h.giveUp().Sub(now) }
	var batches [][]*Hold
	for _, h := range holds {
		n := len(batches)
		if n == 0 || len(batches[n-1]) == renewBatch || left(h) > 2*max(left(batches[n-1][0]), coalesce) {
			batches = append(batches, nil)
			n++
		}
		batches[n-1] = append(batches[n-1], h)
	}
	if len(batches) == 1 {
		w.renewOn(batches[0])
		return
	}
	slots := make(chan struct{}, renewInFlight)
	var wg sync.WaitGroup
	for _, batch := range batches {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			w.renewOn(batch)
		})
	}
	wg.Wait()
}

// renewOn renews holds of one server in one pipeline, and settles each
// one's outcome. It waits for the pipeline's answer at most the call
// timeout, and no later than the earliest time at which one of its holds
// must be declared lost: go-redis bounds a read by its own ReadTimeout,
// not by the context's deadline, so a pipeline on a silent connection
// could otherwise keep a loss from being declared in time. A pipeline
// still out then goes on in the background, and its answers are dropped.
// A hold whose time ran out before the pipeline went is declared lost
// without it.
func (w *watchdog) renewOn(holds []*Hold) {
	sent := time.Now()
	live := holds[:0]
	for _, h := range holds {
		if !h.giveUp().After(sent) {
			w.settle(h, sent, false, context.DeadlineExceeded)
			continue
		}
		live = append(live, h)
	}
	if len(live) == 0 {
		return
	}
	holds = live
	budget := w.e.cfg.CallTimeout
	for _, h := range holds {
		budget = min(budget, h.giveUp().Sub(sent))
	}
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel() // once we stop waiting, go-redis need not retry
	stop := context.AfterFunc(w.e.stopped, cancel)
	defer stop()

	done := make(chan outcomes, 1)
	w.e.wg.Go(func() { done <- w.send(ctx, holds) })
	var out outcomes
	select {
	case out = <-done:
	case <-ctx.Done():
		select {
		case out = <-done: // answered at the deadline: the answers count
		default:
			out = outcomes{oks: make([]bool, len(holds)), errs: make([]error, len(holds))}
			for i := range out.errs {
				out.errs[i] = ctx.Err()
			}
		}
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		// Our own bound, not Close: what it cut short, Redis did not
		// answer in time.
		var timedOut error
		for i, err := range out.errs {
			if errors.Is(err, context.DeadlineExceeded) {
				out.errs[i] = noAnswer{err}
				timedOut = out.errs[i]
			}
		}
		if timedOut != nil {
			w.e.called(sent, timedOut)
		}
	}
	for i, h := range holds {
		w.settle(h, sent, out.oks[i], out.errs[i])
	}
}

// outcomes are the answers of renewals: per hold, whether the owner still
// held the lock, or the error of its call.
type outcomes struct {
	oks  []bool
	errs []error
}

// send runs renew.lua for each hold in one pipeline (see
// Engine.pipelined), until ctx ends.
func (w *watchdog) send(ctx context.Context, holds []*Hold) outcomes {
	out := outcomes{oks: make([]bool, len(holds)), errs: make([]error, len(holds))}
	calls := make([]lua.Call, len(holds))
	for i, h := range holds {
		calls[i] = h.l.renewCall(h.owner, h.lease)
	}
	for i, cmd := range w.e.pipelined(ctx, calls) {
		ok, err := lua.ReadFlag(cmd)
		out.oks[i], out.errs[i] = ok, refusal(err)
	}
	return out
}

// settle acts on the outcome of one hold's renewal sent at sent.
func (w *watchdog) settle(h *Hold, sent time.Time, ok bool, err error) {
	over, closing := h.stage()
	switch {
	case closing:
		w.settleClosing(h, sent, ok, err)
	case over:
		// The hold ended (Release, a loss) or its last Release is under
		// way while the renewal was out: no failure, and no more renewals.
	case err == nil && ok:
		if h.failing {
			level := slog.LevelDebug
			if h.failWarned {
				level = slog.LevelInfo // a recovery from what was logged at Warn
			}
			h.failing, h.failWarned = false, false
			h.l.e.log.Log(context.Background(), level, "fairlock: renewed the hold after failed renewals", h.logAttrs()...)
		}
		h.valid, h.span = sent.Add(h.lease), h.lease
		w.schedule(h, sent.Add(h.lease/3))
	case err == nil:
		h.endLost("a renewal found the hold gone in Redis (it expired, was removed, or the server lost it)", nil)
		h.l.e.rename() // the server may have lost its data
	case !time.Now().Before(h.giveUp()):
		h.observeRenewal(err)
		h.lose(false, "renewals failed until the lease nearly ran out", err)
	default:
		h.observeRenewal(err)
		retry := max(h.lease/12, 10*time.Millisecond)
		level := slog.LevelDebug
		if !h.failing {
			level = failLevel(err) // the first of a stretch, unless Redis is unreachable (see reach)
			h.failWarned = level >= slog.LevelWarn
		}
		h.failing = true
		h.l.e.log.Log(context.Background(), level, "fairlock: renewal failed, retrying",
			h.logAttrs("err", err, "retry", retry)...)
		w.schedule(h, time.Now().Add(retry))
	}
}

// settleClosing acts on the outcome of the renewal, sent at sent, of a
// hold that Close ended and whose release it has not had the answer to:
// renewed, it is renewed again on its schedule; failed, again soon, while
// its lease lasts. Nothing is logged or reported: the hold has ended for
// its holder, and Close's release says what became of it.
func (w *watchdog) settleClosing(h *Hold, sent time.Time, ok bool, err error) {
	switch {
	case err == nil && ok:
		h.valid, h.span = sent.Add(h.lease), h.lease
		w.schedule(h, sent.Add(h.lease/3))
	case err == nil:
		// Gone: the release took it first, or it was lost.
	case time.Now().Before(h.giveUp()):
		w.schedule(h, time.Now().Add(max(h.lease/12, 10*time.Millisecond)))
	}
}

// observeRenewal reports a failed renewal of h to the engine's observer.
func (h *Hold) observeRenewal(err error) {
	if o := h.observed; o != nil {
		h.l.e.observe(o.ctx, Event{Kind: EventRenewalFailed, Lock: h.l.keys.Name, Owner: h.owner,
			Call: queue.WaiterIDOf(h.entry), Token: h.token, Err: err})
	}
}

// giveUp is when a hold whose renewals keep failing is declared lost.
func (h *Hold) giveUp() time.Time {
	return h.valid.Add(-h.span / 6)
}

// dueHeap orders holds by the time of their next renewal. Each hold keeps
// its index (slot; -1 when out of line), so that an ended hold can be
// taken out.
type dueHeap []*Hold

func (d dueHeap) Len() int           { return len(d) }
func (d dueHeap) Less(i, j int) bool { return d[i].next.Before(d[j].next) }
func (d dueHeap) Swap(i, j int) {
	d[i], d[j] = d[j], d[i]
	d[i].slot, d[j].slot = i, j
}

func (d *dueHeap) Push(x any) {
	h := x.(*Hold)
	h.slot = len(*d)
	*d = append(*d, h)
}

func (d *dueHeap) Pop() any {
	old := *d
	h := old[len(old)-1]
	old[len(old)-1] = nil
	h.slot = -1
	*d = old[:len(old)-1]
	return h
}
