// Package pause waits for a while unless a context ends first: the one
// sleep that retry loops of the module (the notify hub's reconnects, the
// stress command's settling, the test helpers' polls) share.
package pause

import (
	"context"
	"time"
)

// For waits for d and reports true, or returns false as soon as ctx ends
// first. It leaves no timer behind.
func For(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
