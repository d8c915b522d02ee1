package fair

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock/fairlock/internal/pause"
	"github.com/fairlock/fairlock/lua"
	"github.com/fairlock/fairlock/queue"
)

// Close ends every live hold at once (its context cancelled with
// errs.ErrClosed) and then releases what each held in Redis, as its last
// Unlock would: the lock goes to the next live waiter, who is woken. The
// releases of all the holds go out together, in pipelines per server, the
// holds whose leases would lapse first first; until the answer to its
// release comes, each hold's lease is still renewed, as while it lived,
// so that none lapses while the releases ahead of it go out. A release
// that gets no answer is sent again under the same call id, which counts
// once; every call is given up at the bound of Close.

// closeBatch is how many releases go out in one pipeline at Close, and
// closeInFlight how many of those pipelines each server is sent at once:
// a server runs a pipeline's scripts one after another, blocking its
// other clients meanwhile, so a batch stays short (a few ms of the
// server's time), and a few of them at once keep the server busy while
// the client writes the next and reads the last.
const (
	closeBatch    = 500
	closeInFlight = 4
)

// turnPoll is how often Close looks again for releases whose turn came,
// when none is ready to go.
const turnPoll = 5 * time.Millisecond

// closeStep is what the release of a hold needs after a reply.
type closeStep int

const (
	closeDone  closeStep = iota // over: released, found gone, or refused
	closeNext                   // another call at once: the next level
	closeAgain                  // unanswered: the same call again, after a pause
)

// A closeRelease is the release of one hold that Close ended, on one
// engine: the calls that give up its levels there, one at a time.
type closeRelease struct {
	key  string          // a key of its lock: the server it lives on
	turn <-chan struct{} // closed when its calls may go out; nil: at once
	// call builds the call to send now, from the engine's set of scripts;
	// the same one until took has moved on.
	call func(s *lua.Scripts) lua.Call
	// took acts on the reply to that call and says what comes next, with
	// the error of a call that got none or was refused.
	took func(cmd *redis.Cmd) (closeStep, error)
	done func() // called once, when the release is over or given up

	// wrote is the key of the receipt of a call that changed the hold,
	// once one did ("": none yet): the replicas are asked to acknowledge
	// it. Set by took.
	wrote string
	over  bool // done was called
}

// finish calls done once.
func (r *closeRelease) finish() {
	if !r.over {
		r.over = true
		r.done()
	}
}

// closeHolds is the Engine's part of Close for the holds live when it
// started: it ends each (see Hold.endClosing) and releases its levels.
// It returns when every release is over or given up at the bound of
// Close; the watchdog, which renewed the holds until then, stops.
func (e *Engine) closeHolds(holds []*Hold) {
	defer e.dog.halt()
	e.dog.byDue(holds)
	rs := make([]*closeRelease, 0, len(holds))
	for _, h := range holds {
		if levels, ok := h.endClosing(); ok && levels > 0 {
			rs = append(rs, h.closeRelease(levels))
		}
	}
	ctx, cancel := e.closeContext()
	defer cancel()
	e.closeAll(ctx, rs)
}

// closeRelease is the release of the levels a hold had when Close ended
// it: release.lua (wrelease.lua for a weighted lock) once per level, as
// releaseLevels sends them, stopping when Redis says the owner keeps no
// more.
func (h *Hold) closeRelease(levels int) *closeRelease {
	r := &closeRelease{key: h.l.keys.Lock, done: h.releasedOnClose}
	call, ttl := queue.NewID(), h.l.e.receiptTTL()
	r.call = func(s *lua.Scripts) lua.Call { return h.l.releaseScript(s, call, h.owner, 0, ttl) }
	r.took = func(cmd *redis.Cmd) (closeStep, error) {
		rep, err := lua.ReadRelease(cmd)
		err = refusal(err)
		switch {
		case publishRefused(err):
			return closeDone, err // released and handed over; only the push was refused
		case unsettled(err):
			return closeAgain, err
		case err != nil:
			return closeDone, err
		}
		h.l.handOff(rep)
		if rep.Count < 0 {
			return closeDone, nil // gone already
		}
		r.wrote = h.l.keys.Call(call)
		if levels--; rep.Count > 0 && levels > 0 {
			call = queue.NewID()
			return closeNext, nil
		}
		return closeDone, nil
	}
	return r
}

// unsettled reports whether a call of Close's releases got no answer:
// Redis did not answer (see unanswered), or the call was cut short at
// the bound of Close. It is sent again while the bound allows.
func unsettled(err error) bool {
	return unanswered(err) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// closeAll sends releases on the engine's client, the releases of each
// server (see byServer) on their own, in the order given, until each is
// over or ctx ends; each one's done is called either way.
func (e *Engine) closeAll(ctx context.Context, rs []*closeRelease) {
	var wg sync.WaitGroup
	for _, group := range byServer(e, rs, func(r *closeRelease) string { return r.key }) {
		wg.Go(func() { e.closeOn(ctx, group) })
	}
	wg.Wait()
}

// closeOn sends the releases of one server: those whose turn has come in
// pipelines of closeBatch, closeInFlight of them at once, in the order
// given; then the next levels, again after a pause those that got no
// answer, and those whose turn came meanwhile, until each is over or ctx
// ends. What went wrong is logged once for them all.
func (e *Engine) closeOn(ctx context.Context, rs []*closeRelease) {
	var out closeTally
	all := rs
	defer func() {
		for _, r := range all {
			if !r.over {
				out.givenUp++
				r.finish()
			}
		}
		if out.lastErr == nil {
			out.lastErr = ctx.Err() // not sent before the bound
		}
		out.log(e.log)
	}()
	retry := retryMin
	for len(rs) > 0 && ctx.Err() == nil {
		s, err := e.scripts(ctx)
		if err != nil {
			out.lastErr = err
			return
		}
		// Those whose turn has not come (a call of their hold still out
		// there) wait for a later round, not the others.
		ready, later := rs[:0:0], []*closeRelease(nil)
		for _, r := range rs {
			if turnCame(r.turn) {
				ready = append(ready, r)
			} else {
				later = append(later, r)
			}
		}
		if len(ready) == 0 {
			pause.For(ctx, turnPoll) // the calls still out are answered within ms, or the bound ends them
			continue
		}
		var (
			mu          sync.Mutex
			next, again []*closeRelease
			wg          sync.WaitGroup
		)
		slots := make(chan struct{}, closeInFlight)
		for batch := range slices.Chunk(ready, closeBatch) {
			select {
			case slots <- struct{}{}:
			case <-ctx.Done():
			}
			if ctx.Err() != nil {
				break
			}
			wg.Go(func() {
				defer func() { <-slots }()
				calls := make([]lua.Call, len(batch))
				for i, r := range batch {
					calls[i] = r.call(s)
				}
				cmds := e.pipelined(ctx, calls)
				mu.Lock()
				defer mu.Unlock()
				for i, r := range batch {
					step, err := r.took(cmds[i])
					switch step {
					case closeNext:
						next = append(next, r)
					case closeAgain:
						again = append(again, r)
						out.lastErr = err
					default:
						out.settled(err)
						r.finish()
					}
				}
			})
		}
		wg.Wait()
		if len(again) > 0 {
			if !pause.For(ctx, retry) {
				return
			}
			retry = min(2*retry, retryMax)
		}
		rs = append(append(next, again...), later...)
	}
	if ctx.Err() == nil {
		e.acknowledgeClose(ctx, all, &out)
	}
}

// turnCame reports whether turn is closed (nil: no turn to wait for).
func turnCame(turn <-chan struct{}) bool {
	if turn == nil {
		return true
	}
	select {
	case <-turn:
		return true
	default:
		return false
	}
}

// acknowledgeClose asks the replicas, when the engine waits for them, to
// acknowledge the releases of one server, once they are all answered:
// one WAIT after a write that follows them all (the receipt of one of
// them kept again), rather than one after each pipeline, which could
// keep the releases behind it waiting for the replicas.
func (e *Engine) acknowledgeClose(ctx context.Context, rs []*closeRelease, out *closeTally) {
	if e.repl == nil {
		return
	}
	receipt := ""
	for _, r := range rs {
		if r.wrote != "" {
			receipt = r.wrote
			break
		}
	}
	if receipt == "" {
		return
	}
	node, err := e.primaryFor(ctx, receipt)
	if err != nil {
		out.unacked = err
		return
	}
	pipe := node.Pipeline()
	pipe.PExpire(ctx, receipt, time.Duration(e.receiptTTL())*time.Millisecond)
	wait := redis.NewIntCmd(ctx, "wait", e.repl.n, max(e.repl.timeout, minWait).Milliseconds())
	_ = pipe.Process(ctx, wait)
	_, _ = pipe.Exec(ctx)
	out.unacked = e.acknowledged(ctx, waited{wait: wait, node: node})
}

// closeTally is what became of the releases of one server at Close, for
// the log.
type closeTally struct {
	refused      int   // refused (an error reply): they expire after their lease
	firstRefusal error // the first of those
	pushRefused  int   // released, but the wake message was refused
	givenUp      int   // unanswered at the bound of Close (or never sent)
	lastErr      error // the last error of those (the bound's, for those never sent)
	unacked      error // the replicas did not acknowledge the releases
}

// settled counts a release that is over, with the error of its last call.
func (t *closeTally) settled(err error) {
	switch {
	case err == nil:
	case publishRefused(err):
		t.pushRefused++
	default:
		t.refused++
		if t.firstRefusal == nil {
			t.firstRefusal = err
		}
	}
}

// log logs what went wrong, one record for each kind.
func (t *closeTally) log(log *slog.Logger) {
	if t.refused > 0 {
		log.Log(context.Background(), failLevel(t.firstRefusal), "fairlock: Close could not release holds it ended; they expire after their lease",
			"holds", t.refused, "err", t.firstRefusal)
	}
	if t.givenUp > 0 {
		log.Warn("fairlock: Close gave up releasing holds it ended at its bound; they expire after their lease",
			"holds", t.givenUp, "err", t.lastErr)
	}
	if t.pushRefused > 0 {
		log.Warn("fairlock: Close released holds, but the wake messages were refused; their next holders learn it at their next poll",
			"holds", t.pushRefused)
	}
	if t.unacked != nil {
		log.Warn("fairlock: Close released the holds it ended, but the replicas did not acknowledge it", "err", t.unacked)
	}
}
