package fair

import (
	"container/heap"
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock/fairlock/internal/pause"
	"github.com/fairlock/fairlock/internal/shortly"
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
// coalesce) go out in one pipeline per server (see byServer), so holds
// cost one goroutine in all and about holds/(lease/3) renewals per
// second, in fewer round trips.
//
// h.valid is a time until which the hold is known to last: the send time
// of the last call that set the expiry, plus the expiry it set (h.span).
// When renewals keep failing (Redis unreachable), the hold is declared
// lost a sixth of that span before that time, so the holder learns it
// before another owner can be granted.
type watchdog struct {
	e    *Engine
	kick chan struct{} // capacity 1: the earliest renewal moved up

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
	return &watchdog{e: e, kick: make(chan struct{}, 1)}
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

// run sends the renewals as they fall due, until the engine closes.
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
		case <-w.e.closing:
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

// renew renews holds, one pipeline per server they live on, and settles
// each one's outcome. It waits for each pipeline's answer at most the call
// timeout, and no later than the earliest time at which one of its holds
// must be declared lost: go-redis bounds a read by its own ReadTimeout,
// not by the context's deadline, so a pipeline on a silent connection
// could otherwise keep a loss from being declared in time. A pipeline
// still out then goes on in the background, and its answers are dropped.
func (w *watchdog) renew(holds []*Hold) {
	sent := time.Now()
	live := holds[:0]
	for _, h := range holds {
		if !h.giveUp().After(sent) {
			w.settle(h, sent, false, context.DeadlineExceeded)
			continue
		}
		live = append(live, h)
	}
	groups := w.byServer(live)
	for _, g := range groups[min(1, len(groups)):] {
		w.e.wg.Go(func() { w.renewOn(sent, g) })
	}
	if len(groups) > 0 {
		w.renewOn(sent, groups[0])
	}
}

// byServer splits holds by the server their lock lives on: a Cluster's
// master, a Ring's shard; all of them together on one server, or when
// the client cannot tell. A Cluster's or a Ring's pipeline is answered
// only once every server in it has answered, so one pipeline for all
// would let a dead master hold up the renewals of the holds on live ones
// until those too were declared lost.
func (w *watchdog) byServer(holds []*Hold) [][]*Hold {
	if len(holds) < 2 || w.e.OneServer() {
		if len(holds) == 0 {
			return nil
		}
		return [][]*Hold{holds}
	}
	ctx, cancel := context.WithTimeout(context.Background(), w.e.cfg.CallTimeout)
	defer cancel()
	index := map[pipeliner]int{}
	var groups [][]*Hold
	for _, h := range holds {
		server, err := w.e.primaryFor(ctx, h.l.keys.Lock)
		if err != nil {
			server = nil // unknown: renewed together with the other unknown
		}
		i, ok := index[server]
		if !ok {
			i = len(groups)
			index[server] = i
			groups = append(groups, nil)
		}
		groups[i] = append(groups[i], h)
	}
	return groups
}

// renewOn renews holds of one server, sent at sent, in one pipeline, and
// settles each one's outcome.
func (w *watchdog) renewOn(sent time.Time, holds []*Hold) {
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

// send runs the renewal of each hold in one pipeline: again the way the
// engine's runner says for those the server did not run (it lacked the
// script or the library; see lua.Runner), and again after a pause for
// those it said it would be ready for shortly (see shortly), until ctx
// ends.
func (w *watchdog) send(ctx context.Context, holds []*Hold) outcomes {
	out := outcomes{oks: make([]bool, len(holds)), errs: make([]error, len(holds))}
	calls := make([]lua.Call, len(holds))
	sends := make([]lua.Sending, len(holds))
	pending := make([]int, len(holds))
	for i, h := range holds {
		calls[i] = h.l.renewCall(h.owner, h.lease)
		sends[i] = w.e.runner.Start(calls[i])
		pending[i] = i
	}
	wait := shortly.FirstPause
	for {
		pipe := w.e.rdb.Pipeline()
		cmds := make([]*redis.Cmd, len(pending))
		for j, i := range pending {
			cmds[j] = calls[i].Send(ctx, pipe, sends[i].Via)
		}
		sent := time.Now()
		_, _ = pipe.Exec(ctx) // every command carries its own outcome
		var again []int
		unrun := false // the server did not run some, and says how to send them
		for j, i := range pending {
			if w.e.runner.Again(ctx, w.e.rdb, calls[i], &sends[i], cmds[j].Err()) {
				again, unrun = append(again, i), true
				continue
			}
			ok, err := lua.ReadFlag(cmds[j])
			if shortly.Reply(err) && ctx.Err() == nil {
				again = append(again, i)
			}
			w.e.called(sent, err)
			out.oks[i], out.errs[i] = ok, refusal(err)
		}
		switch {
		case len(again) == 0:
			return out
		case unrun:
		case !pause.For(ctx, wait):
			return out // each keeps the refusal it got
		default:
			wait = min(2*wait, shortly.LongestPause)
		}
		pending = again
	}
}

// settle acts on the outcome of one hold's renewal sent at sent.
func (w *watchdog) settle(h *Hold, sent time.Time, ok bool, err error) {
	switch {
	case h.over():
		// The hold ended (Release, Close) or its last Release is under
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
