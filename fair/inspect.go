package fair

import (
	"context"
	"fmt"

	"github.com/fairlock/fairlock/internal/errs"
	"github.com/fairlock/fairlock/internal/shortly"

	"github.com/fairlock/fairlock/queue"
)

// Inspect reads the state of the lock in one transaction (queue.Inspect),
// as a read made for the caller (see read): it returns when ctx ends even
// while Redis does not answer. A refused command is reported as
// errs.ErrNoPermission.
func (l *Mutex) Inspect(ctx context.Context) (queue.Snapshot, error) {
	return read(l.e, ctx, func(ctx context.Context) (queue.Snapshot, error) {
		s, err := queue.Inspect(ctx, l.e.rdb, l.keys)
		return s, txRefusal(err)
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
