package fair

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock/fairlock/internal/errs"
)

// reach follows whether the engine reaches Redis, from the outcome of
// every call the engine makes (see Engine.called) and from the failures
// and rebuilds of its notify hub's connections, so that an outage is
// logged twice, whatever the number of calls that meet it: once at Warn
// when the first failure is noticed, and once at Info when Redis answers
// again, with how long it did not. The calls that fail meanwhile log at
// Debug only (see failLevel).
//
// An outage starts at a failure that says Redis was not reached, or
// cannot serve now (see unavailable). On one server it ends at the first
// answer to a call sent after it started; a failure of a call sent before
// Redis last answered starts none (it was in flight across the answer, as
// calls out when a server restarts are). On a Cluster or a Ring, where
// one master may be down while the others answer, it ends only at an
// answer that comes quiet after the last failure, so that the answers of
// the live masters do not end it while calls to the dead one keep
// failing.
type reach struct {
	log   *slog.Logger
	quiet time.Duration // 0 for one server; else see above
	back  func()        // called when an outage ends, not under mu; must not block

	mu       sync.Mutex
	down     bool      // guarded by mu: an outage is under way
	since    time.Time // guarded by mu: when it was noticed
	failed   time.Time // guarded by mu: when its last failure was noticed
	failures int       // guarded by mu: the failures noticed during it
	answered time.Time // guarded by mu: when Redis last answered a call
}

// quietOnMany is reach.quiet for a Cluster or a Ring: longer than a
// waiter's or a renewal's pause between two calls to a master that does
// not answer, with the redis client's own retries.
const quietOnMany = 5 * time.Second

// newReach returns the reach of an engine over one server (many: a
// Cluster or a Ring), which logs to log and calls back at the end of
// each outage.
func newReach(log *slog.Logger, many bool, back func()) *reach {
	r := &reach{log: log, back: back}
	if many {
		r.quiet = quietOnMany
	}
	return r
}

// called notes the outcome of one call to Redis sent at sent (err nil:
// answered). It is where the engine notices failures: every call it makes
// ends here.
func (e *Engine) called(sent time.Time, err error) {
	e.topo.failed(err)
	switch {
	case unavailable(err):
		e.reach.failure(sent, err)
	case err == nil || redisError(err) || errors.Is(err, errs.ErrUnexpectedReply):
		e.reach.answer(sent)
	}
	// Anything else (the caller's context ended, the Client closed) says
	// nothing of Redis.
}

// unavailable reports whether err says that Redis was not reached (a
// network error, a timeout of the redis client or of the engine's own
// (noAnswer), no sentinel answering) or
// cannot serve now: it is loading its data, busy in a script, or in a
// failover (LOADING, BUSY, CLUSTERDOWN, MASTERDOWN). The end of a
// caller's context and a closed client are not.
func unavailable(err error) bool {
	switch {
	case err == nil:
		return false
	case errors.As(err, new(noAnswer)):
		return true
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, redis.ErrClosed), errors.Is(err, errs.ErrClosed), errors.Is(err, errs.ErrLayout),
		errors.Is(err, errs.ErrNotReplicated), errors.Is(err, errs.ErrUnexpectedReply):
		return false
	case redisError(err):
		return replyStarts(err, "LOADING", "BUSY", "CLUSTERDOWN", "MASTERDOWN")
	}
	return true
}

// noAnswer is the error of a call that the engine stopped waiting for,
// at a bound of its own, before Redis answered it: Redis is not reached,
// although the error is a context's.
type noAnswer struct{ err error }

func (n noAnswer) Error() string { return "fairlock: no answer from Redis in time: " + n.err.Error() }
func (n noAnswer) Unwrap() error { return n.err }

// failLevel is the level of a record about a call that failed with err
// and is tried again: Debug when Redis is unavailable (reach logs the
// outage once) or the reply is a routine step of a slot migration or a
// failover (MOVED, ASK, TRYAGAIN, READONLY), else Warn.
func failLevel(err error) slog.Level {
	if unavailable(err) || replyStarts(err, "MOVED", "ASK", "TRYAGAIN", "READONLY") {
		return slog.LevelDebug
	}
	return slog.LevelWarn
}

// failure notes a failure that says Redis is unavailable, of a call sent
// at sent. A nil reach notes nothing.
func (r *reach) failure(sent time.Time, err error) {
	if r == nil {
		return
	}
	now := time.Now()
	r.mu.Lock()
	if r.down {
		r.failed = now
		r.failures++
		r.mu.Unlock()
		return
	}
	if r.quiet == 0 && sent.Before(r.answered) {
		r.mu.Unlock()
		return // in flight while Redis answered: stale
	}
	r.down, r.since, r.failed, r.failures = true, now, now, 1
	// Logged under mu, so that the record of its end cannot come first.
	r.log.Warn("fairlock: Redis unreachable; calls are retried until it answers", "err", err)
	r.mu.Unlock()
}

// answer notes an answer of Redis to a call sent at sent. A nil reach
// notes nothing.
func (r *reach) answer(sent time.Time) {
	if r == nil {
		return
	}
	now := time.Now()
	r.mu.Lock()
	r.answered = now
	if !r.down || sent.Before(r.since) || now.Sub(r.failed) < r.quiet {
		r.mu.Unlock()
		return
	}
	r.down = false
	r.log.Info("fairlock: Redis answers again", "unreachable_for", now.Sub(r.since), "failures", r.failures)
	r.mu.Unlock()
	if r.back != nil {
		r.back()
	}
}

// isDown reports whether an outage is under way: the latest failure
// noticed has not been followed by an answer.
func (r *reach) isDown() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.down
}
