package fair

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock/internal/errs"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/fairlock/fairlock/queue"
)

// An Unlock that comes after the hold's validity passed, before the
// watchdog ended it (a process paused past its validity), reports the
// lease lost, not a release: no majority was known to keep the hold.
func TestQuorumUnlockPastTheValidityIsALostLease(t *testing.T) {
	servers := redistest.Masters(t, 3)
	var masters []Redis
	for _, s := range servers {
		masters = append(masters, s.Client(t))
	}
	qm, err := NewQuorum(masters, Config{WaiterTTL: 10 * time.Second, CallTimeout: 5 * time.Second}, QuorumConfig{Drift: 0.01})
	require.NoError(t, err)
	t.Cleanup(func() { _ = qm.Close() })
	keys, err := queue.Quorum(redistest.Prefix(t), "paused")
	require.NoError(t, err)
	l := qm.Mutex(keys)
	h, err := l.Lock(context.Background(), Request{Owner: "o", Lease: 30 * time.Second, Wait: true})
	require.NoError(t, err)

	h.mu.Lock()
	h.validity = time.Now().Add(-time.Millisecond) // as if paused past it
	h.mu.Unlock()
	err = h.Unlock(context.Background())
	require.True(t, errors.Is(err, errs.ErrLeaseLost), "Unlock: %v", err)
	require.ErrorIs(t, context.Cause(h.Context()), errs.ErrLeaseLost)
	// What was left of the hold is released in the background.
	other, err := l.Lock(context.Background(), Request{Owner: "p", Lease: 30 * time.Second, Wait: true})
	require.NoError(t, err)
	require.NoError(t, other.Unlock(context.Background()))
}
