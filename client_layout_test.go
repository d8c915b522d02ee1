package fairlock_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/queue"
)

// The first Client that uses a prefix writes the layout version of its
// keys; a Client that finds another version there refuses the prefix with
// ErrLayout, naming both, and writes nothing under it.
func TestAClientRefusesKeysOfAnotherLayout(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	key := queue.LayoutKey(e.prefix)

	c := e.client()
	held, err := c.Mutex("a").Lock(ctx)
	require.NoError(t, err)
	require.NoError(t, c.Mutex("a").Unlock(held))
	v, err := e.rdb.Get(ctx, key).Result()
	require.NoError(t, err)
	assert.Equal(t, queue.LayoutVersion, v, "the first Client wrote its version")

	other := e.prefix + "-other"
	otherKey := queue.LayoutKey(other)
	require.NoError(t, e.rdb.Set(ctx, otherKey, "0", 0).Err())
	t.Cleanup(func() { e.rdb.Del(context.Background(), otherKey) })
	old, err := fairlock.New(e.rdb, fairlock.WithPrefix(other))
	require.NoError(t, err)
	t.Cleanup(func() { _ = old.Close() })

	_, err = old.Mutex("a").Lock(ctx)
	require.ErrorIs(t, err, fairlock.ErrLayout)
	assert.Contains(t, err.Error(), `"0"`, "the version found")
	assert.Contains(t, err.Error(), `"`+queue.LayoutVersion+`"`, "the Client's version")
	_, err = old.Semaphore("s", 2).TryAcquire(ctx, 1)
	require.ErrorIs(t, err, fairlock.ErrLayout)
	_, err = old.Inspect(ctx, "a")
	require.ErrorIs(t, err, fairlock.ErrLayout, "a read too")
	_, err = old.Mutex("a").IsLocked(ctx)
	require.ErrorIs(t, err, fairlock.ErrLayout)

	keys, err := e.rdb.Keys(ctx, other+":*").Result()
	require.NoError(t, err)
	assert.Equal(t, []string{otherKey}, keys, "nothing written under the refused prefix")
	v, err = e.rdb.Get(ctx, otherKey).Result()
	require.NoError(t, err)
	assert.Equal(t, "0", v, "the other version's key is left as it was")
}
