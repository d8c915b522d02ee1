package fair

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/fairlock/fairlock/queue"
)

// A quorum counts each master once: two masters that are one server (the
// same address under two names, a Cluster given twice) would let one
// server make a majority on its own. So no answer of a master counts
// before the master is known to be a server of its own: its run_id and
// its boot id (see bootKey) differ from those of every master checked
// before it. Check asks every master at once when the Client is made; a
// master that does not answer then is asked again before its first
// answer counts (distinct), and a master found to be another one's twin
// is refused for good: each of its calls fails with the
// SameServerError, and its pushes are ignored.

// identities is what a Quorum knows of its masters' servers.
type identities struct {
	checking []sync.Mutex // per master: one check at a time

	mu      sync.Mutex
	seen    map[string]int // "run:<run_id>" and "boot:<boot id>" -> the master checked with it; guarded by mu
	checked []bool         // per master: found a server of its own; guarded by mu
	refused []error        // per master: why it never counts (a twin); guarded by mu
}

func newIdentities(n int) *identities {
	return &identities{checking: make([]sync.Mutex, n), seen: map[string]int{}, checked: make([]bool, n), refused: make([]error, n)}
}

// SameServerError says that two masters of a quorum are one server.
type SameServerError struct {
	First, Second int    // the masters' indexes
	ID            string // "run:<run_id>" or "boot:<boot id>"
}

func (e *SameServerError) Error() string {
	return fmt.Sprintf("masters %d and %d are the same server (%s)", e.First, e.Second, e.ID)
}

// bootKey is the key of a master's boot id: a random id written once
// (SET NX) by the first quorum Client that meets the master, and lost
// with the rest of its keys. Two masters with one boot id are one.
func bootKey(prefix string) string { return prefix + ":boot" }

// bootScript answers the boot id at KEYS[1], writing ARGV[1] there when
// there is none.
const bootScript = "local v = redis.call('GET', KEYS[1]) if v then return v end " +
	"redis.call('SET', KEYS[1], ARGV[1]) return ARGV[1]"

// bootOf returns the boot id of the server behind rdb (writing one when
// it has none) and its run_id ("" when INFO is refused).
func bootOf(ctx context.Context, rdb Redis, prefix string) (boot, run string, err error) {
	got, err := rdb.Eval(ctx, bootScript, []string{bootKey(prefix)}, queue.NewID()).Text()
	if err != nil {
		return "", "", err
	}
	info, ierr := rdb.Info(ctx, "server").Result()
	if ierr == nil {
		run = infoField(info, "run_id")
	}
	return got, run, nil
}

// Check asks every master at once which server it is, each bounded by
// ctx and the call timeout, and returns a SameServerError when two of
// those that answered are one server. The masters that did not answer
// are left to be checked before their first answer counts; their errors
// are joined in the second result.
func (qm *Quorum) Check(ctx context.Context) (same error, unanswered error) {
	errs := make([]error, len(qm.masters))
	var wg sync.WaitGroup
	for i := range qm.masters {
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, qm.cfg.CallTimeout)
			defer cancel()
			errs[i] = qm.distinct(cctx, i)
		})
	}
	wg.Wait()
	var left []error
	for i, err := range errs {
		var twin *SameServerError
		switch {
		case errors.As(err, &twin):
			return twin, nil
		case err != nil:
			left = append(left, fmt.Errorf("master %d: %w", i, err))
		}
	}
	return nil, errors.Join(left...)
}

// distinct returns nil once master i is known to be a server of its own,
// asking it (bounded by ctx) when it has not been checked yet; the
// SameServerError of a master that is another one's twin; or the error
// that kept the question from being answered, in which case the master's
// answer must not count.
func (qm *Quorum) distinct(ctx context.Context, i int) error {
	ids := qm.ids
	if done, err := ids.known(i); done {
		return err
	}
	ids.checking[i].Lock()
	defer ids.checking[i].Unlock()
	if done, err := ids.known(i); done {
		return err
	}
	boot, run, err := bootOf(ctx, qm.masters[i].rdb, qm.cfg.Prefix)
	if err != nil {
		return fmt.Errorf("fairlock: which server the master is could not be asked: %w", err)
	}
	// Every master loads the library before its first script, so that a
	// master which has it and one which does not answer the first calls
	// alike (see lua.Runner).
	if s, err := qm.masters[i].scripts(ctx); err == nil {
		qm.masters[i].runner.Preload(ctx, qm.masters[i].rdb, s.Library)
	}
	ids.mu.Lock()
	defer ids.mu.Unlock()
	for _, id := range []string{"run:" + run, "boot:" + boot} {
		if id == "run:" {
			continue
		}
		if j, dup := ids.seen[id]; dup && j != i {
			twin := &SameServerError{First: min(i, j), Second: max(i, j), ID: id}
			ids.refused[i] = twin
			qm.log.Error("fairlock: two masters of the quorum are one server; the second never counts", "err", twin)
			return twin
		}
	}
	for _, id := range []string{"run:" + run, "boot:" + boot} {
		if id != "run:" {
			ids.seen[id] = i
		}
	}
	ids.checked[i] = true
	return nil
}

// known reports whether master i's check is over, and its verdict.
func (ids *identities) known(i int) (bool, error) {
	ids.mu.Lock()
	defer ids.mu.Unlock()
	return ids.checked[i] || ids.refused[i] != nil, ids.refused[i]
}

// counts reports whether master i's answers count: it was checked, and
// is a server of its own.
func (ids *identities) counts(i int) bool {
	ids.mu.Lock()
	defer ids.mu.Unlock()
	return ids.checked[i]
}
