package fairlock_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/internal/redistest"
)

func TestKilledHolderProcessLosesTheLockWithinItsLease(t *testing.T) {
	redistest.Slow(t)
	t.Parallel()
	e := newEnv(t)
	const lease = time.Second
	holder := e.spawnHelper("hold", "crash", "lease="+lease.String())
	holder.awaitGrant(t, 10*time.Second)
	held := e.client().Mutex("crash")
	locked, err := held.IsLocked(context.Background())
	require.NoError(t, err)
	require.True(t, locked)

	// The next owner is another process; it polls when the hold's lease
	// would run out, since expiry publishes nothing.
	next := e.spawnHelper("wait", "crash")
	e.waitQueued("crash", 1)
	holder.kill(t)
	killed := time.Now()

	granted := next.awaitGrant(t, lease+5*time.Second)
	waited := granted.Sub(killed)
	t.Logf("next process granted %v after the holder was killed (lease %v)", waited, lease)
	assert.Less(t, waited, lease+time.Second, "the crashed holder kept the lock past its lease")
	e.requireClean("crash")
}

func TestKilledHeadWaiterDelaysSurvivorsAtMostTheWaiterTTLInOrder(t *testing.T) {
	redistest.Slow(t)
	t.Parallel()
	e := newEnv(t)
	const ttl = time.Second
	opts := []fairlock.Option{fairlock.WithWaiterTTL(ttl)}
	holder := e.client(opts...).Mutex("dead-head")
	hctx, err := holder.Lock(context.Background())
	require.NoError(t, err)

	head := e.spawnHelper("wait", "dead-head", "waiterTTL="+ttl.String())
	e.waitQueued("dead-head", 1)

	// Three survivors join behind it, one after the other, each on a
	// Client of its own; each gives the lock back as soon as it has it.
	const survivors = 3
	order := make(chan int, survivors)
	granted := make(chan time.Time, survivors)
	var wg sync.WaitGroup
	for i := range survivors {
		m := e.client(opts...).Mutex("dead-head")
		wg.Go(func() {
			ctx, err := m.Lock(context.Background())
			if !assert.NoError(t, err, "survivor %d", i) {
				return
			}
			granted <- time.Now()
			order <- i
			assert.NoError(t, m.Unlock(ctx))
		})
		e.waitQueued("dead-head", i+2)
	}
	t.Cleanup(wg.Wait)

	// The head dies while it is still first in line, with a deadline up
	// to a waiter TTL ahead: the release hands the lock to the dead
	// process, which never renews it.
	head.kill(t)
	released := time.Now()
	require.NoError(t, holder.Unlock(hctx))

	got := collect(t, order, survivors, ttl+10*time.Second)
	assert.Equal(t, seq(survivors), got, "survivors must be granted in the order they joined")
	first := (<-granted).Sub(released)
	t.Logf("first survivor granted %v after the release (waiter TTL %v)", first, ttl)
	assert.Less(t, first, ttl+time.Second, "the dead head delayed the line past its waiter TTL")
	wg.Wait()
	e.requireClean("dead-head")
}
