package fairlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/internal/redistest"
)

// IsLocked and TTL read what Redis has: the lease left of whoever holds,
// nothing once that lease has run out.
func TestIsLockedAndTTLReadTheLeaseRedisHas(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	const lease = 30 * time.Second
	holder, reader := e.client(fairlock.WithLease(lease)), e.client()

	held, err := holder.Mutex("kept").Lock(ctx)
	require.NoError(t, err)
	locked, err := reader.Mutex("kept").IsLocked(ctx)
	require.NoError(t, err)
	assert.True(t, locked)
	ttl, err := reader.Mutex("kept").TTL(ctx)
	require.NoError(t, err)
	assert.Greater(t, ttl, time.Duration(0))
	assert.LessOrEqual(t, ttl, lease, "the watchdog's lease, whoever reads it")
	require.NoError(t, holder.Mutex("kept").Unlock(held))
	ttl, err = reader.Mutex("kept").TTL(ctx)
	require.NoError(t, err)
	assert.Zero(t, ttl, "free")

	// A fixed lease that runs out: the hold is gone for IsLocked and TTL
	// alike (its lease is cut short here rather than waited for).
	fixed := holder.Mutex("fixed", fairlock.WithFixedLease(time.Minute))
	_, err = fixed.Lock(ctx)
	require.NoError(t, err)
	require.NoError(t, e.rdb.PExpire(ctx, e.keys("fixed").Lock, time.Millisecond).Err())
	require.Eventually(t, func() bool {
		locked, err := reader.Mutex("fixed").IsLocked(ctx)
		return err == nil && !locked
	}, 5*time.Second, 5*time.Millisecond)
	ttl, err = reader.Mutex("fixed").TTL(ctx)
	require.NoError(t, err)
	assert.Zero(t, ttl)

	ended, cancel := context.WithCancel(ctx)
	cancel()
	_, err = reader.Mutex("kept").IsLocked(ended)
	assert.ErrorIs(t, err, context.Canceled)
	_, err = reader.Mutex("kept").TTL(ended)
	assert.ErrorIs(t, err, context.Canceled)
}

// On a quorum Client, TTL of a hold's own context is its validity left,
// measured by the Client without asking the masters (it answers with
// every master down); anyone else reads the majority's.
func TestQuorumTTLOfItsOwnHoldIsItsValidityWithoutACall(t *testing.T) {
	t.Parallel()
	servers := redistest.Masters(t, 3)
	const lease = 20 * time.Second
	c := quorumOf(t, servers, fairlock.WithLease(lease))
	ctx := context.Background()
	held, err := c.Mutex("q").Lock(ctx)
	require.NoError(t, err)

	other := quorumOf(t, servers)
	locked, err := other.Mutex("q").IsLocked(ctx)
	require.NoError(t, err)
	assert.True(t, locked, "one owner holds on a majority")
	ttl, err := other.Mutex("q").TTL(ctx)
	require.NoError(t, err)
	assert.Greater(t, ttl, time.Duration(0))
	assert.Less(t, ttl, lease, "less the drift")

	for _, s := range servers {
		s.Kill()
	}
	ttl, err = c.Mutex("q").TTL(held)
	require.NoError(t, err, "no master needed")
	assert.Greater(t, ttl, time.Duration(0))
	assert.Less(t, ttl, lease, "the validity: the lease less the drift")
	for _, s := range servers {
		require.NoError(t, s.Restart()) // empty, for Close to end the hold at once
	}
}
