package fair

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fairlock/fairlock/internal/errs"
)

// A Lock call that ends because its context ended says whether Redis was
// serving it then: errs.ErrUnavailable is joined with the context's error
// when the call's last round with Redis failed (see failedRound) or went
// unanswered for cleanupGrace or more. A caller who gave up on a line
// that Redis kept answering gets the context's error alone. The caller's
// logs, and an Observer (the WaitEnded event carries the error), can tell
// an outage from a line that was too long.

// failedRound reports whether err is the failure of a round with Redis
// that sending it again may get past: no answer (a network error), or a
// reply of a server that cannot serve it now (see transient). A context's
// error, ErrClosed and a grant the replicas did not acknowledge are not.
func failedRound(err error) bool {
	return err != nil && retryable(err) && !unacked(err) && !errors.Is(err, errs.ErrClosed) &&
		!errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}

// withUnavailable joins errs.ErrUnavailable with err, the error of a call
// whose context ended; last, when not nil, is the failure of the call's
// last round, which it wraps.
func withUnavailable(err, last error) error {
	if last == nil {
		return errors.Join(err, errs.ErrUnavailable)
	}
	return errors.Join(err, fmt.Errorf("%w: %w", errs.ErrUnavailable, last))
}

// ctxEnded reports whether err is the error of ctx, which has ended.
func ctxEnded(ctx context.Context, err error) bool {
	cerr := ctx.Err()
	return cerr != nil && errors.Is(err, cerr)
}

// unansweredFor returns err, the error of a call that waited since since
// for a round with Redis (the server check, a subscription), joined with
// errs.ErrUnavailable when ctx ended while the round was out and it had
// been out for cleanupGrace or more.
func unansweredFor(ctx context.Context, err error, since time.Time) error {
	if ctxEnded(ctx, err) && time.Since(since) >= cleanupGrace {
		return withUnavailable(err, nil)
	}
	return err
}
