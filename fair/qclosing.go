package fair

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock/fairlock/lua"
	"github.com/fairlock/fairlock/queue"
)

// closeHolds is the Quorum's part of Close for the holds live when it
// started: it ends each (see QHold.endClosing) and releases its levels on
// every master at once, each master's releases sent as an Engine sends
// its own (see closing.go), in the order in which the holds' renewals
// fall due. On each master a hold's release waits for its turn after the
// hold's calls still out there (see order). It returns when every release
// is over or given up at the bound of Close; the watchdog, which renewed
// the holds until then, stops.
func (qm *Quorum) closeHolds(holds []*QHold) {
	defer qm.dog.halt()
	type ended struct {
		h         *QHold
		levels    int
		committed int64
		due       time.Time
	}
	var all []ended
	for _, h := range holds {
		levels, ok := h.endClosing()
		if !ok || levels == 0 {
			continue
		}
		h.mu.Lock()
		all = append(all, ended{h: h, levels: levels, committed: h.committed, due: h.next})
		h.mu.Unlock()
	}
	slices.SortStableFunc(all, func(a, b ended) int { return a.due.Compare(b.due) })

	// The turns are taken on every master before any release goes out.
	rs := make([][]*closeRelease, len(qm.masters))
	for _, x := range all {
		var left atomic.Int32 // masters whose release is not over
		left.Store(int32(len(qm.masters)))
		for i := range qm.masters {
			turn, next := x.h.ord.turn(i)
			done := func() {
				next()
				if left.Add(-1) == 0 {
					x.h.releasedOnClose()
				}
			}
			r := x.h.closeRelease(i, x.levels, x.committed, done)
			r.turn = turn
			rs[i] = append(rs[i], r)
		}
	}
	ctx, cancel := qm.closeContext()
	defer cancel()
	var wg sync.WaitGroup
	for i, e := range qm.masters {
		if len(rs[i]) == 0 {
			continue
		}
		wg.Go(func() {
			if err := qm.distinct(ctx, i); err != nil {
				// Its answers count for nothing: nothing is sent there.
				for _, r := range rs[i] {
					r.finish()
				}
				return
			}
			e.closeAll(ctx, rs[i])
		})
	}
	wg.Wait()
}

// closeRelease is the release, on master i, of the levels a hold had when
// Close ended it, its token committed (0: none): qrelease.lua once per
// level, the last one last, as Unlock sends them; then, under an owner id
// of the hold's own, once more for each level the master still counts
// (releases of inner levels still being sent again). done is called once
// it is over.
func (h *QHold) closeRelease(i, levels int, committed int64, done func()) *closeRelease {
	qm := h.l.qm
	lease := h.callLease()
	r := &closeRelease{key: h.l.keys.Lock, done: done}
	call := queue.NewID()
	level := levels // the level the call gives up: 1 is the last
	extra := -1     // further last releases to send; -1 before the last's answer
	r.call = func(s *lua.Scripts) lua.Call {
		return s.QRelease(h.l.keys, call, h.owner, h.entry, committed, ms(lease), level <= 1,
			ms(qm.cfg.WaiterTTL), qm.tombTTL(), qm.receiptTTL(), qm.skew(i))
	}
	r.took = func(cmd *redis.Cmd) (closeStep, error) {
		rep, err := lua.ReadQRelease(cmd)
		err = refusal(err)
		switch {
		case publishRefused(err):
			return closeDone, err // released at the last level; only the push was refused
		case unsettled(err):
			return closeAgain, err
		case err != nil:
			return closeDone, err
		}
		if level > 1 {
			level-- // the next one down
			call = queue.NewID()
			return closeNext, nil
		}
		switch {
		case extra >= 0:
			extra--
		case h.shared:
			extra = 0 // other callers' levels may be among those counted
		default:
			extra = rep.Count
		}
		if extra > 0 {
			call = queue.NewID()
			return closeNext, nil
		}
		return closeDone, nil
	}
	return r
}
