package fair

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/fairlock/fairlock/internal/errs"
	"github.com/fairlock/fairlock/internal/shortly"
	"github.com/fairlock/fairlock/lua"
	"github.com/fairlock/fairlock/queue"
)

// Inspect reads the state of the lock in one transaction (queue.Inspect,
// queue.InspectElection for an election, or queue.InspectWeighted for a
// weighted handle of kind), as a read made for the caller (see read): it
// returns when ctx ends even while Redis does not answer. A refused
// command is reported as errs.ErrNoPermission.
func (l *Mutex) Inspect(ctx context.Context, kind string) (queue.Snapshot, error) {
	return read(l.e, ctx, func(ctx context.Context) (queue.Snapshot, error) {
		var s queue.Snapshot
		var err error
		switch kind {
		case queue.KindMutex:
			s, err = queue.Inspect(ctx, l.e.rdb, l.keys)
		case queue.KindElection:
			s, err = queue.InspectElection(ctx, l.e.rdb, l.keys)
		default:
			s, err = queue.InspectWeighted(ctx, l.e.rdb, l.keys, kind)
		}
		return s, txRefusal(err)
	})
}

// InspectAll reads every kind of lock of the name under prefix in one
// transaction (queue.InspectAll), as Inspect does.
func (e *Engine) InspectAll(ctx context.Context, prefix, name string) ([]queue.Snapshot, error) {
	return read(e, ctx, func(ctx context.Context) ([]queue.Snapshot, error) {
		ss, err := queue.InspectAll(ctx, e.rdb, prefix, name)
		return ss, txRefusal(err)
	})
}

// txRefusal is refusal for the reply of a transaction: Redis 7 reports an
// EXEC that the user may not run as an EXECABORT whose reason is the
// NOPERM.
func txRefusal(err error) error {
	if replyStarts(err, "EXECABORT Transaction discarded because of: NOPERM") {
		return fmt.Errorf("%w: %w", errs.ErrNoPermission, err)
	}
	return refusal(err)
}

// List returns the names of the locks under prefix that are held or
// waited on and match pattern (queue.List). It returns when ctx ends even
// while Redis does not answer (see within). The scan is bounded by ctx
// and by Close, not by the call timeout: it takes as many round trips as
// the keyspace needs. A refused command is reported as
// errs.ErrNoPermission.
func (e *Engine) List(ctx context.Context, prefix, pattern string) ([]string, error) {
	return within(e, ctx, func() ([]string, error) {
		sctx, cancel := context.WithCancel(ctx)
		defer cancel()
		defer context.AfterFunc(e.stopped, cancel)()
		names, err := shortly.Do(sctx, func() ([]string, error) { return queue.List(sctx, e.rdb, prefix, pattern) })
		return names, refusal(err)
	}, nil)
}

// MasterSnapshot is what QMutex.Inspect read on one master: its view of
// the lock, or why it has none.
type MasterSnapshot struct {
	queue.Snapshot
	Err error
}

// Inspect reads the lock on every master at once (queue.Inspect of its
// keys there), each read bounded by the call timeout, and returns each
// master's view in the order of the masters. It fails with
// errs.ErrNoQuorum, or ctx's error, when fewer than a majority answered.
func (l *QMutex) Inspect(ctx context.Context) ([]MasterSnapshot, error) {
	return l.InspectAs(ctx, queue.KindMutex)
}

// InspectAs is Inspect of the quorum lock read as kind on each master:
// queue.KindMutex, or queue.KindElection for a quorum's election.
func (l *QMutex) InspectAs(ctx context.Context, kind string) ([]MasterSnapshot, error) {
	if err := l.qm.begin(); err != nil {
		return nil, err
	}
	defer l.qm.ops.Done()
	views := make([]MasterSnapshot, len(l.qm.masters))
	var mu sync.Mutex // guards views: each master's call writes its own
	for i := range views {
		views[i].Err = errs.ErrNoQuorum // until it answers
	}
	n := l.qm.round(ctx, nil, func(ctx context.Context, i int) (lua.QReply, error) {
		if err := l.qm.distinct(ctx, i); err != nil {
			return lua.QReply{}, err
		}
		s, err := shortly.Do(ctx, func() (queue.Snapshot, error) {
			if kind == queue.KindElection {
				return queue.InspectElection(ctx, l.qm.masters[i].rdb, l.keys)
			}
			return queue.Inspect(ctx, l.qm.masters[i].rdb, l.keys)
		})
		mu.Lock()
		views[i] = MasterSnapshot{Snapshot: s, Err: txRefusal(err)}
		mu.Unlock()
		return lua.QReply{}, txRefusal(err)
	}, func(answer) bool { return false }, nil)
	mu.Lock()
	defer mu.Unlock()
	if n < l.qm.q {
		return nil, l.qm.noQuorum(ctx, n, "")
	}
	return slices.Clone(views), nil
}

// List returns the names of the quorum locks under prefix that some
// master holds or has a line for, matching pattern: the union of every
// master's List, each once, sorted. It fails when a master fails to
// answer: a lock held on that master alone would be missing.
func (qm *Quorum) List(ctx context.Context, prefix, pattern string) ([]string, error) {
	seen := map[string]bool{}
	for _, m := range qm.masters {
		names, err := m.List(ctx, prefix, pattern)
		if err != nil {
			return nil, err
		}
		for _, n := range names {
			seen[n] = true
		}
	}
	out := make([]string, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	slices.Sort(out)
	return out, nil
}
