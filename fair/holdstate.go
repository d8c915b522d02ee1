package fair

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/fairlock/fairlock/internal/errs"
)

// holdState is the state machine every hold of this process runs, a
// Hold's (one deployment) or a QHold's (a quorum): the owner and lease it
// was granted for, the levels this process holds, and the context that
// ends with it. A hold is live from its grant until it ends once, with a
// cause (nil: its last level was unlocked; errs.ErrLeaseLost;
// errs.ErrClosed); each Unlock gives up one level, and the last ends it.
// The engines differ in what they send to Redis, not in these steps.
type holdState struct {
	owner  string
	shared bool   // the owner id is shared (see Request.Shared)
	entry  string // the waiter entry of the Lock call that took it
	lease  time.Duration
	fixed  bool
	ctx    context.Context         // cancelled when the hold ends, with its cause
	cancel context.CancelCauseFunc // cancels ctx
	took   time.Time               // when it was granted in this process

	mu      sync.Mutex
	levels  int       // levels this process holds; guarded by mu
	ended   bool      // guarded by mu
	cause   error     // why the hold ended (nil: unlocked); guarded by mu
	endedAt time.Time // when it ended; guarded by mu
	// closing says that Close ended the hold with levels left, and has
	// not had the answer to their release yet: its lease is renewed
	// until then, as it was while it lived (see Close in closing.go).
	// Guarded by mu.
	closing bool
	// atEnd run when the hold ends, after its context is cancelled (see
	// onEnd); guarded by mu.
	atEnd []func()
}

// init sets up the state of a fresh hold of one level, granted to req
// under entry.
func (s *holdState) init(req Request, entry string) {
	s.owner, s.shared, s.entry, s.lease, s.fixed = req.Owner, req.Shared, entry, req.Lease, req.Fixed
	s.ctx, s.cancel = context.WithCancelCause(context.Background())
	s.took = time.Now()
	s.levels = 1
}

// heldFor is how long the hold lasted: from its grant to its end, or to
// now while it lasts.
func (s *holdState) heldFor() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return s.endedAt.Sub(s.took)
	}
	return time.Since(s.took)
}

// Context returns a context that is cancelled when the hold ends: with
// cause errs.ErrLeaseLost when the lease was lost, errs.ErrClosed when
// the Client was closed, and context.Canceled after the last Unlock.
func (s *holdState) Context() context.Context { return s.ctx }

// Owner returns the owner id of the hold.
func (s *holdState) Owner() string { return s.owner }

// callLease is the lease a call made for the hold sets: its lease, or 0
// for a fixed lease, which no later call extends.
func (s *holdState) callLease() time.Duration {
	if s.fixed {
		return 0
	}
	return s.lease
}

// endedErr says why the hold is over. Requires mu.
func (s *holdState) endedErr() error {
	if s.cause == nil {
		return errs.ErrNotHeld
	}
	return fmt.Errorf("%w: %w", errs.ErrNotHeld, s.cause)
}

// gone returns nil while the hold is live, else why it is not: the cause
// it ended with, or errs.ErrNotHeld once it was unlocked (or its last
// level's release is under way). Requires mu.
func (s *holdState) gone() error {
	if !s.ended && s.levels > 0 {
		return nil
	}
	if s.cause != nil {
		return s.cause
	}
	return errs.ErrNotHeld
}

// over reports whether the hold has ended or its last level's release is
// under way.
func (s *holdState) over() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ended || s.levels == 0
}

// stage reports whether the hold is over (see over), and whether Close
// ended it and still waits for the answer to its release (closing).
func (s *holdState) stage() (over, closing bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ended || s.levels == 0, s.closing
}

// released says that Close has had the answer to the hold's release (or
// gave up waiting for it): its lease is no longer renewed.
func (s *holdState) released() {
	s.mu.Lock()
	s.closing = false
	s.mu.Unlock()
}

// leave gives up one level in the process, for an Unlock: it reports
// whether that was the last, or the error of a hold that is over
// (endedErr). Requires mu.
func (s *holdState) leave() (last bool, err error) {
	if s.ended || s.levels == 0 {
		return false, s.endedErr()
	}
	s.levels--
	return s.levels == 0, nil
}

// finish ends the hold once, with cause: it records the end, runs also
// (if not nil) under mu to read what the engine keeps beside the state,
// and cancels the context. It returns the levels the process still held,
// and false when the hold had already ended. closing says that Close
// ends it: when it has levels left, it is marked closing, renewed until
// their release is answered (see released).
func (s *holdState) finish(cause error, closing bool, also func()) (int, bool) {
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		return 0, false
	}
	s.ended, s.cause, s.endedAt = true, cause, time.Now()
	levels := s.levels
	s.levels = 0
	s.closing = closing && levels > 0
	if also != nil {
		also()
	}
	atEnd := s.atEnd
	s.atEnd = nil
	s.mu.Unlock()
	s.cancel(cause)
	for _, f := range atEnd {
		f()
	}
	return levels, true
}

// onEnd has f run when the hold ends, on the goroutine that ends it, or
// now when it has ended. f must not block. Unlike context.AfterFunc on the
// hold's context, it starts no goroutine: an Unlock pays for none.
func (s *holdState) onEnd(f func()) {
	s.mu.Lock()
	if !s.ended {
		s.atEnd = append(s.atEnd, f)
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	f()
}
