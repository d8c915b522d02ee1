package fairlock_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/queue"
)

// keysUnder returns every key under the test's prefix.
func (e *env) keysUnder() []string {
	keys, err := e.rdb.Keys(context.Background(), e.prefix+"*").Result()
	require.NoError(e.t, err)
	return keys
}

func TestBadInputGetsAClearErrorAndChangesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	_, err := fairlock.New(nil)
	require.ErrorIs(t, err, fairlock.ErrInvalidOption, "nil client")
	var nilClient *redis.Client
	_, err = fairlock.New(nilClient)
	require.ErrorIs(t, err, fairlock.ErrInvalidOption, "typed nil client")

	options := map[string]fairlock.Option{
		"empty prefix":        fairlock.WithPrefix(""),
		"prefix with {":       fairlock.WithPrefix("a{b"),
		"prefix with }":       fairlock.WithPrefix("a}b"),
		"zero lease":          fairlock.WithLease(0),
		"negative lease":      fairlock.WithLease(-time.Second),
		"sub-ms lease":        fairlock.WithLease(time.Microsecond),
		"zero waiter TTL":     fairlock.WithWaiterTTL(0),
		"negative waiter TTL": fairlock.WithWaiterTTL(-time.Minute),
		"nil logger":          fairlock.WithLogger(nil),
		"negative queue":      fairlock.WithObserverQueue(-1),
		"nil option":          nil,
	}
	for name, opt := range options {
		_, err := fairlock.New(e.rdb, opt)
		require.ErrorIs(t, err, fairlock.ErrInvalidOption, name)
	}

	c := e.client()
	names := map[string]string{
		"empty":         "",
		"closing brace": "job}1",
		"only braces":   "{}",
		"invalid UTF-8": "bad\xff\xfe",
		"1 MiB":         strings.Repeat("n", 1<<20),
	}
	for what, name := range names {
		m := c.Mutex(name)
		_, err := m.Lock(ctx)
		require.ErrorIs(t, err, fairlock.ErrInvalidName, what)
		_, err = m.TryLock(ctx)
		require.ErrorIs(t, err, fairlock.ErrInvalidName, what)
		require.ErrorIs(t, m.Unlock(ctx), fairlock.ErrInvalidName, what)
		_, err = m.IsLocked(ctx)
		require.ErrorIs(t, err, fairlock.ErrInvalidName, what)
		_, err = m.ForceUnlock(ctx)
		require.ErrorIs(t, err, fairlock.ErrInvalidName, what)
	}
	for _, d := range []time.Duration{0, -time.Second, time.Millisecond} {
		_, err := c.Mutex("ok", fairlock.WithFixedLease(d)).Lock(ctx)
		require.ErrorIs(t, err, fairlock.ErrInvalidOption, "fixed lease %v", d)
	}
	_, err = c.Mutex("ok", nil).Lock(ctx)
	require.ErrorIs(t, err, fairlock.ErrInvalidOption, "nil mutex option")
	for _, owner := range []string{"", "a b", "x\ny", "bad\xff", strings.Repeat("o", 257)} {
		_, err := c.Mutex("ok").Lock(fairlock.ContextWithOwner(ctx, owner))
		require.ErrorIs(t, err, fairlock.ErrInvalidOwner, "owner %.20q", owner)
	}
	done, cancel := context.WithCancel(ctx)
	cancel()
	_, err = c.Mutex("ok").Lock(done)
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorIs(t, c.Mutex("ok").Unlock(ctx), fairlock.ErrNotHeld, "Unlock without Lock")
	//lint:ignore SA1012 a nil context is bad input this test feeds on purpose
	_, err = c.Mutex("ok").Lock(nil)
	require.Error(t, err, "nil context")

	var nilMutex *fairlock.Mutex
	_, err = nilMutex.Lock(ctx)
	require.Error(t, err, "nil Mutex")
	var nilLocks *fairlock.Client
	_, err = nilLocks.Mutex("x").Lock(ctx)
	require.Error(t, err, "Mutex of a nil Client")
	require.NoError(t, nilLocks.Close())

	require.Empty(t, e.keysUnder(), "bad input must change nothing in Redis")
}

func TestAcceptedNamesKeepEveryKeyInOneSlot(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := e.client()
	for _, name := range []string{"orders:42", "with space", "new\nline", "a{b", "ünï", strings.Repeat("x", queue.MaxNameLen)} {
		m := c.Mutex(name)
		ctx, err := m.Lock(context.Background())
		require.NoError(t, err, "%.20q", name)
		k := e.keys(name)
		slot := e.rdb.ClusterKeySlot(context.Background(), k.Lock).Val()
		for _, key := range []string{k.Queue, k.Deadline, k.Token, k.Call("x")} {
			require.Equal(t, slot, e.rdb.ClusterKeySlot(context.Background(), key).Val(), "%.20q: %q", name, key)
		}
		require.NoError(t, m.Unlock(ctx))
	}
}

func TestMisuseOfHoldsGetsClearErrors(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := e.client(fairlock.WithLease(300 * time.Millisecond))
	m := c.Mutex("misuse")
	ctx, err := m.Lock(context.Background())
	require.NoError(t, err)
	require.NoError(t, m.Unlock(ctx))
	require.ErrorIs(t, m.Unlock(ctx), fairlock.ErrNotHeld, "Unlock twice")
	_, err = m.Token(ctx)
	require.ErrorIs(t, err, fairlock.ErrNotHeld)

	lost, err := m.Lock(context.Background())
	require.NoError(t, err)
	require.NoError(t, e.rdb.Del(context.Background(), e.keys("misuse").Lock).Err())
	requireDone(t, lost, 3*time.Second)
	err = m.Unlock(lost)
	require.ErrorIs(t, err, fairlock.ErrLeaseLost, "Unlock after the lease was lost")
	require.ErrorIs(t, err, fairlock.ErrNotHeld)

	require.NoError(t, c.Close())
	require.NoError(t, c.Close(), "Close twice")
	_, err = m.Lock(context.Background())
	require.ErrorIs(t, err, fairlock.ErrClosed, "Lock after Close")
	_, err = m.IsLocked(context.Background())
	require.ErrorIs(t, err, fairlock.ErrClosed)
}

func TestLockKeyOfAnotherTypeIsAnErrorNotAHang(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	k := e.keys("wrongtype")
	require.NoError(t, e.rdb.Set(ctx, k.Lock, "not a hash", 0).Err())
	m := e.client().Mutex("wrongtype")
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err := m.Lock(wctx)
	require.Error(t, err)
	require.Contains(t, err.Error(), "WRONGTYPE")
	_, err = m.TryLock(wctx)
	require.ErrorContains(t, err, "WRONGTYPE")
	v, err := e.rdb.Get(ctx, k.Lock).Result()
	require.NoError(t, err)
	require.Equal(t, "not a hash", v, "the foreign key is left as it was")
	e.requireClean("wrongtype")
}

// A server that loses fairlock's library and scripts between two calls
// (FUNCTION FLUSH, SCRIPT FLUSH, as a restart without persistence does)
// gets them again from the next call, which runs once.
func TestScriptsAndFunctionsFlushedBetweenCallsAreLoadedAgain(t *testing.T) {
	t.Parallel()
	e := newPrivateEnv(t)
	m := e.client().Mutex("flush")
	flush := func() {
		require.NoError(t, e.rdb.FunctionFlush(context.Background()).Err())
		require.NoError(t, e.rdb.ScriptFlush(context.Background()).Err())
	}
	for range 3 {
		ctx, err := m.Lock(context.Background())
		require.NoError(t, err)
		flush()
		require.NoError(t, m.Unlock(ctx))
		flush()
		n, err := m.HoldCount(ctx)
		require.NoError(t, err)
		require.Zero(t, n)
	}
	// The next call finds the library missing, goes as a script and has
	// the library loaded again, in the background.
	ctx, err := m.Lock(context.Background())
	require.NoError(t, err)
	require.NoError(t, m.Unlock(ctx))
	require.Eventually(t, func() bool {
		libs, err := e.rdb.FunctionList(context.Background(), redis.FunctionListQuery{}).Result()
		return err == nil && len(libs) == 1
	}, 5*time.Second, 10*time.Millisecond, "the library loaded again")
}

func TestUnsafeServerIsRefused(t *testing.T) {
	t.Parallel()
	e := newPrivateEnv(t)
	ctx := context.Background()
	require.NoError(t, e.rdb.ConfigSet(ctx, "maxmemory", "100mb").Err())
	require.NoError(t, e.rdb.ConfigSet(ctx, "maxmemory-policy", "allkeys-lru").Err())
	_, err := e.client().Mutex("unsafe").Lock(ctx)
	require.ErrorIs(t, err, fairlock.ErrUnsafeServer)
	require.ErrorContains(t, err, "allkeys-lru")
	require.Empty(t, e.keysUnder(), "a refused Lock writes nothing")

	require.NoError(t, e.rdb.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err())
	lctx, err := e.client().Mutex("unsafe").Lock(ctx)
	require.NoError(t, err, "a new Client checks again")
	require.NoError(t, e.client().Mutex("unsafe").Unlock(lctx))
}
