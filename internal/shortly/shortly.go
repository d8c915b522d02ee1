// Package shortly rides out the replies by which a Redis server says that
// it cannot serve a command now but will shortly: it is loading its data
// set after a restart (LOADING), running a long script (BUSY), moving a
// slot (TRYAGAIN), waiting for a cluster failover (CLUSTERDOWN) or for its
// master (MASTERDOWN), has just been demoted to a replica (READONLY), or
// lacks the replicas it needs to take writes (NOREPLICAS). A command
// refused with one of these did not run, so sending it again is safe,
// even one that is not idempotent.
//
// It is a building block of the module: every call the library makes
// (scripts, reads, renewals, subscriptions) goes through it, so that a
// restart on an append-only file or a failover delays a call instead of
// failing it.
package shortly

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/fairlock/fairlock/internal/errs"
	"github.com/fairlock/fairlock/internal/pause"
)

// replies are the starts of the error replies that mean "ready shortly".
var replies = []string{"LOADING", "BUSY", "TRYAGAIN", "CLUSTERDOWN", "MASTERDOWN", "READONLY", "NOREPLICAS"}

// Backoff bounds: the first pause after such a reply, and the longest.
const (
	FirstPause   = 5 * time.Millisecond
	LongestPause = 200 * time.Millisecond
)

// Reply reports whether err is an error reply from the server that says
// it will be ready shortly (see the package doc), or the refusal of a
// transaction for such a reply.
func Reply(err error) bool {
	msg, ok := errs.Reply(err)
	if !ok {
		return false
	}
	// A transaction a queued command of which was refused so is refused
	// as a whole (Redis 6.2 and later name the reason).
	msg = strings.TrimPrefix(msg, "EXECABORT Transaction discarded because of: ")
	for _, p := range replies {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

// Do runs f until it returns anything but such a reply, pausing between
// runs (FirstPause, doubling up to LongestPause), or until ctx ends. It
// returns f's last result; when ctx ended while the server still refused,
// the error wraps both the reply and ctx's error.
func Do[T any](ctx context.Context, f func() (T, error)) (T, error) {
	wait := FirstPause
	var refused error // the last such reply
	for {
		v, err := f()
		switch {
		case refused != nil && err != nil && ctx.Err() != nil && !Reply(err):
			// Sent again as ctx ended, and failed for that: the reply is
			// what kept the call from running.
			return v, fmt.Errorf("%w; %w", refused, ctx.Err())
		case !Reply(err):
			return v, err
		}
		refused = err
		if ctx.Err() != nil || !pause.For(ctx, wait) {
			return v, fmt.Errorf("%w; %w", err, ctx.Err())
		}
		wait = min(2*wait, LongestPause)
	}
}

// Run is Do for a function with no result but its error.
func Run(ctx context.Context, f func() error) error {
	_, err := Do(ctx, func() (struct{}, error) { return struct{}{}, f() })
	return err
}
