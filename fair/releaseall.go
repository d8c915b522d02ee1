package fair

import (
	"context"
	"fmt"
	"time"

	"github.com/fairlock/fairlock/lua"
)

// UnlockAll gives up one level of each hold of holds, as Unlock does for
// each, and returns each one's error, in the order of holds. When at
// least two of them are Mutex holds of one engine whose keys all live on
// one server (see Engine.OneServer), their releases go to Redis in one
// call of release.lua: one round trip, and every hold that ends there is
// ended before any lock is handed over, so that a MultiLock's ticket
// waiting for several of them is granted them all by the first hand-over
// that finds it. The others are unlocked one by one.
//
// Each release keeps its own call id and receipt, so whatever is not
// settled by the one call (no answer, a refused PUBLISH, replicas that
// did not acknowledge it) is settled as an Unlock's is: each release sent
// again alone under its call id, which answers what the one call did if
// it ran, and again in the background until Redis takes it. ctx's
// deadline bounds the call as it bounds Unlock.
func UnlockAll(ctx context.Context, holds []*Hold) []error {
	errs := make([]error, len(holds))
	var us []unlocking
	var at []int // at[j] is the index in holds of us[j]
	for i, h := range holds {
		u, err := h.unlocking()
		if err != nil {
			errs[i] = err
			continue
		}
		us, at = append(us, u), append(at, i)
	}
	if !together(us) {
		for j, u := range us {
			errs[at[j]] = u.run(ctx)
		}
		return errs
	}
	e := us[0].h.l.e
	settle := func(outs []released) {
		for j, u := range us {
			errs[at[j]] = u.h.settle(outs[j], u.last, u.call, u.lease)
		}
	}
	// As in Unlock: on a goroutine of the engine when ctx has a deadline,
	// so that UnlockAll returns by then even while Redis does not answer;
	// here when the redis client bounds its calls by the deadline.
	deadline, bounded := ctx.Deadline()
	if !bounded {
		settle(e.releaseAll(ctx, us))
		return errs
	}
	if e.inline {
		outs := e.releaseAll(withBound(ctx, deadline), us)
		cut := !time.Now().Before(deadline)
		for j, u := range us {
			if cut && outs[j].err != nil {
				errs[at[j]] = u.cutShort()
			} else {
				errs[at[j]] = u.h.settle(outs[j], u.last, u.call, u.lease)
			}
		}
		return errs
	}
	fl := launch(e, func() ([]released, error) { return e.releaseAll(ctx, us), nil })
	if fl == nil {
		settle(e.releaseAll(ctx, us))
		return errs
	}
	dctx, cancelWait := context.WithDeadline(context.Background(), deadline)
	defer cancelWait()
	outs, early := fl.wait(dctx, nil, func(outs []released, _ error) {
		for j, u := range us {
			if err := u.h.settle(outs[j], u.last, u.call, u.lease); err != nil {
				e.log.Warn("fairlock: an Unlock that returned at its deadline got its answer", u.h.logAttrs("err", err)...)
			}
		}
	})
	if early != nil {
		for j, u := range us {
			if u.last {
				u.h.end(nil)
			}
			errs[at[j]] = fmt.Errorf("fairlock: unlock: %w (the release goes on in the background until Redis takes it or the lease runs out)", early)
		}
		return errs
	}
	settle(outs)
	return errs
}

// together reports whether the releases us can go to Redis in one call:
// two or more, of Mutex holds (not weighted) of one engine on one server.
func together(us []unlocking) bool {
	if len(us) < 2 {
		return false
	}
	e := us[0].h.l.e
	if !e.OneServer() {
		return false
	}
	for _, u := range us {
		if u.h.l.e != e || u.h.l.w != nil {
			return false
		}
	}
	return true
}

// releaseAll sends the releases us in one call of release.lua, detached
// from ctx and bounded by the call timeout (and ctx's deadline), and
// returns each one's answer. When the call fails as a whole, each release
// is sent again alone under its call id (see Hold.release), whose
// receipt answers what the call did if it ran; a refused PUBLISH is
// then the answer of each release that ended its hold.
func (e *Engine) releaseAll(ctx context.Context, us []unlocking) []released {
	cctx, cancel := e.detached(ctx)
	defer cancel()
	outs, err := e.releaseAllOnce(cctx, us)
	if err == nil {
		return outs
	}
	outs = make([]released, len(us))
	for j, u := range us {
		outs[j] = u.h.release(ctx, u.call, u.lease)
		if publishRefused(err) && outs[j].err == nil && outs[j].n == 0 {
			outs[j].err = err
		}
	}
	return outs
}

// releaseAllOnce runs the one call of releaseAll: each release's answer
// (with the error of replicas that did not acknowledge the call, for
// those that changed a hold), or the call's error. The local hand-offs
// it answers are handed to their waiters.
func (e *Engine) releaseAllOnce(ctx context.Context, us []unlocking) ([]released, error) {
	s, err := e.scripts(ctx)
	if err != nil {
		return nil, err
	}
	rs := make([]lua.Releasing, len(us))
	for j, u := range us {
		rs[j] = lua.Releasing{Keys: u.h.l.keys, Call: u.call, Owner: u.h.owner, Lease: ms(u.lease),
			ReceiptTTL: u.h.releaseReceiptTTL()}
	}
	sent := time.Now()
	w := e.runScript(ctx, s.ReleaseAll(rs, e.tag), us[0].h.l.keys.Call(us[0].call), rs[0].ReceiptTTL)
	reps, err := lua.ReadReleaseAll(w.cmd, len(us))
	e.called(sent, err)
	if err != nil {
		return nil, refusal(err)
	}
	ack := e.acknowledged(ctx, w)
	outs := make([]released, len(us))
	for j, rep := range reps {
		us[j].h.l.handOff(rep)
		outs[j].n = rep.Count
		if rep.Count >= 0 {
			outs[j].err = ack
		}
	}
	return outs, nil
}
