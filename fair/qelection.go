package fair

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fairlock/fairlock/internal/errs"
	"github.com/fairlock/fairlock/lua"
	"github.com/fairlock/fairlock/notify"
	"github.com/fairlock/fairlock/queue"
)

// Elector is one election as the root package uses it, whichever engine
// runs it: a Mutex of an Engine whose holds are leaderships (see
// election.go), or a QMutex of a Quorum whose holds on a majority are.
type Elector interface {
	Locker
	// Leader reads the leadership; ok is false when there is none.
	Leader(ctx context.Context) (lead Leadership, ok bool, err error)
	// Proclaim makes value the value of the leadership held; false when
	// Redis no longer has it.
	Proclaim(ctx context.Context, held Held, value string) (bool, error)
	// WatchLeader subscribes to the changes of the leadership.
	WatchLeader(ctx context.Context) (LeaderWatch, error)
}

// LeaderWatch is a subscription to the changes of an election's
// leadership: a value on C means "read the leadership now" (a change was
// told, or messages may have been lost). Stop ends it.
type LeaderWatch interface {
	C() <-chan struct{}
	Stop()
}

var (
	_ Elector     = (*Mutex)(nil)
	_ Elector     = (*QMutex)(nil)
	_ LeaderWatch = (*notify.Waiter)(nil)
)

// Election returns the election of this Quorum called name, its keys on
// each master made with prefix (see queue.QuorumElection): a QMutex whose
// holds, on a majority of the masters, are leaderships.
func (qm *Quorum) Election(prefix, name string) (queue.Keys, Elector, error) {
	keys, err := queue.QuorumElection(prefix, name)
	if err != nil {
		return keys, nil, err
	}
	return keys, qm.Mutex(keys), nil
}

// Leader reads the leadership on every master: the hold of the owner that
// holds on a majority, its term the one its commit wrote (field term: a
// commit reaches a majority, so every majority's reading has a master of
// it), its value the latest proclaimed there (the largest vseq), and its
// lease the validity that majority keeps. A majority's hold whose term
// is not committed yet (its Campaign has not returned) is no leadership
// yet. When the masters that answered decide nothing (no owner holds on
// a majority of them, but one could with those that did not), it fails
// with errs.ErrNoQuorum. Errors as for IsLocked.
func (l *QMutex) Leader(ctx context.Context) (Leadership, bool, error) {
	reads, err := l.readAll(ctx, l.settled)
	if err != nil {
		return Leadership{}, false, err
	}
	owner, _, ttl := l.majorityOwner(reads)
	if owner == "" {
		if err := l.undecided(reads); err != nil {
			return Leadership{}, false, err
		}
		return Leadership{}, false, nil
	}
	lead := Leadership{Owner: owner, TTL: max(ttl, 0)}
	vseq := int64(-1)
	var since int64
	for _, r := range reads {
		if !r.ok || r.owner != owner {
			continue
		}
		lead.Entry = r.entry
		lead.Term = max(lead.Term, r.term)
		if r.vseq > vseq {
			vseq, lead.Value = r.vseq, r.value
		}
		if since == 0 || (r.since > 0 && r.since < since) {
			since = r.since
		}
	}
	if lead.Term == 0 {
		return Leadership{}, false, nil // elected, its term not committed yet
	}
	lead.Since = time.UnixMilli(since)
	return lead, true, nil
}

// undecided returns errs.ErrNoQuorum when reads, in which no owner holds
// on a majority, leave that open: an owner holds on so many of them that
// with the masters that did not answer it could hold on a majority.
func (l *QMutex) undecided(reads []holdRead) error {
	if answered, most := tally(reads); most+len(reads)-answered >= l.qm.q {
		return fmt.Errorf("%w: %d of %d masters answered, which do not decide who leads", errs.ErrNoQuorum, answered, len(reads))
	}
	return nil
}

// Proclaim makes value the value of the leadership held on every master,
// under the next sequence number of the hold's Proclaim calls, so that a
// reading of any majority finds it (Leader takes the largest). It reports
// false when fewer than a majority still have the hold; errs.ErrNoQuorum
// when fewer than a majority answered.
func (l *QMutex) Proclaim(ctx context.Context, held Held, value string) (bool, error) {
	h, ok := held.(*QHold)
	if !ok {
		return false, errs.ErrNotHeld
	}
	if err := l.qm.begin(); err != nil {
		return false, err
	}
	defer l.qm.ops.Done()
	seq := h.proclaims.Add(1)
	var (
		mu            sync.Mutex
		done, counted int
		refused       error
	)
	n := l.qm.round(ctx, h.ord, func(ctx context.Context, i int) (lua.QReply, error) {
		ok, err := l.flag(ctx, i, func(s *lua.Scripts) lua.Call { return s.QProclaim(l.keys, h.owner, h.entry, value, seq) })
		if publishRefused(err) {
			mu.Lock()
			refused = err
			mu.Unlock()
			ok, err = true, nil
		}
		if ok {
			mu.Lock()
			done++
			mu.Unlock()
		}
		return lua.QReply{}, err
	}, func(a answer) bool {
		if a.err == nil {
			counted++
		}
		mu.Lock()
		defer mu.Unlock()
		return done >= l.qm.q || counted-done > len(l.qm.masters)-l.qm.q
	}, nil)
	mu.Lock()
	defer mu.Unlock()
	switch {
	case done >= l.qm.q && refused != nil:
		return true, fmt.Errorf("fairlock: the value was proclaimed, but %w", refusal(refused))
	case done >= l.qm.q:
		return true, nil
	case n < l.qm.q:
		return false, l.qm.noQuorum(ctx, n, "")
	}
	return false, nil
}

// WatchLeader listens to the leader channel of the election on every
// master, through each master's hub: C is signalled at every change told
// on any of them, and when messages may have been lost there. It returns
// at once, without waiting for the masters to confirm (a master that is
// down is listened to once it is back); a subscription a master refuses
// goes untold there.
func (l *QMutex) WatchLeader(ctx context.Context) (LeaderWatch, error) {
	w := &qLeaderWatch{c: make(chan struct{}, 1)}
	tell := func() {
		select {
		case w.c <- struct{}{}:
		default:
		}
	}
	for _, e := range l.qm.masters {
		sub, _, err := e.hub.Listen(ctx, l.keys.Leader, leaderID, tell)
		if err != nil {
			w.Stop()
			return nil, refusal(err)
		}
		w.subs = append(w.subs, sub)
	}
	return w, nil
}

// qLeaderWatch is the LeaderWatch of a quorum's election: one listener
// per master, signalling one channel.
type qLeaderWatch struct {
	c    chan struct{}
	subs []*notify.Waiter
	once atomic.Bool
}

func (w *qLeaderWatch) C() <-chan struct{} { return w.c }

func (w *qLeaderWatch) Stop() {
	if w.once.Swap(true) {
		return
	}
	for _, s := range w.subs {
		s.Stop()
	}
}
