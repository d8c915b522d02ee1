package fairlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/fairlock/fairlock/queue"
)

// Inspect shows every kind of lock: a Semaphore's capacity and use, its
// holders with their weights, Clients, tokens and times held, and its
// line with the permits each waiter asks for and how long it has waited.
func TestInspectShowsASemaphoresHoldersAndLine(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	a, b := e.client(fairlock.WithName("alpha")), e.client(fairlock.WithName("beta"))
	const name = "pool"
	first, err := a.Semaphore(name, 3).Acquire(ctx, 2)
	require.NoError(t, err)
	time.Sleep(50 * time.Millisecond)
	second, err := b.Semaphore(name, 3).Acquire(ctx, 1)
	require.NoError(t, err)
	w1 := lockAsync(ctx, permitsOf{b.Semaphore(name, 3), 2})
	e.waitWeightedQueued(name, queue.KindSemaphore, 1)
	time.Sleep(50 * time.Millisecond)
	w2 := lockAsync(ctx, permitsOf{a.Semaphore(name, 3), 1})
	e.waitWeightedQueued(name, queue.KindSemaphore, 2)

	for _, inspect := range []func() (fairlock.LockState, error){
		func() (fairlock.LockState, error) { return e.client().Inspect(ctx, name) },
		func() (fairlock.LockState, error) { return e.client().Semaphore(name, 3).Inspect(ctx) },
	} {
		s, err := inspect()
		require.NoError(t, err)
		assert.Equal(t, fairlock.KindSemaphore, s.Kind)
		assert.Equal(t, int64(3), s.Capacity)
		assert.Equal(t, int64(3), s.Used)
		assert.False(t, s.Held, "Held is a Mutex's")
		require.Len(t, s.Holders, 2)
		tok1, err := a.Semaphore(name, 3).Token(first)
		require.NoError(t, err)
		tok2, err := b.Semaphore(name, 3).Token(second)
		require.NoError(t, err)
		h1, h2 := s.Holders[0], s.Holders[1]
		assert.Equal(t, []int64{2, 1}, []int64{h1.Weight, h2.Weight})
		assert.Equal(t, []int64{tok1, tok2}, []int64{h1.Token, h2.Token})
		assert.Equal(t, []string{a.ID(), b.ID()}, []string{h1.Client, h2.Client}, "in the order of their grants")
		assert.Equal(t, []string{"alpha", "beta"}, []string{h1.ClientName, h2.ClientName})
		assert.GreaterOrEqual(t, h1.HeldFor, h2.HeldFor+40*time.Millisecond, "the first was granted 50 ms before")
		assert.Positive(t, h2.HeldFor)
		assert.Positive(t, h1.LeaseLeft)
		require.Len(t, s.Waiters, 2)
		assert.Equal(t, []int64{2, 1}, []int64{s.Waiters[0].Weight, s.Waiters[1].Weight})
		assert.Equal(t, fairlock.WaitsPermits, s.Waiters[0].Kind)
		assert.Equal(t, []string{b.ID(), a.ID()}, []string{s.Waiters[0].Client, s.Waiters[1].Client})
		assert.GreaterOrEqual(t, s.Waiters[0].WaitedFor, s.Waiters[1].WaitedFor+40*time.Millisecond)
		assert.Positive(t, s.Waiters[1].WaitedFor)
	}

	require.NoError(t, a.Semaphore(name, 3).Release(first))
	r := await(t, w1, 5*time.Second)
	require.NoError(t, r.err)
	require.NoError(t, b.Semaphore(name, 3).Release(second))
	r2 := await(t, w2, 5*time.Second)
	require.NoError(t, r2.err)
	require.NoError(t, b.Semaphore(name, 3).Release(r.ctx))
	require.NoError(t, a.Semaphore(name, 3).Release(r2.ctx))
	s, err := e.client().Inspect(ctx, name)
	require.NoError(t, err)
	assert.Empty(t, s.Holders)
	assert.Empty(t, s.Waiters)
}

// A RWMutex shows its readers and its writer, and each waiter's kind.
func TestInspectShowsARWMutexsReadersWriterAndLine(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	c, cw, cr := e.client(), e.client(), e.client()
	rw := c.RWMutex("doc")
	r1, err := rw.RLock(ctx)
	require.NoError(t, err)
	r2, err := rw.RLock(ctx)
	require.NoError(t, err)
	w := lockAsync(ctx, cw.RWMutex("doc"))
	e.waitWeightedQueued("doc", queue.KindRWMutex, 1)
	r3 := lockAsync(ctx, readerOf{cr.RWMutex("doc")})
	e.waitWeightedQueued("doc", queue.KindRWMutex, 2)

	s, err := c.Inspect(ctx, "doc")
	require.NoError(t, err)
	assert.Equal(t, fairlock.KindRWMutex, s.Kind)
	assert.Equal(t, 2, s.Readers)
	assert.False(t, s.Writer)
	require.Len(t, s.Holders, 2)
	assert.False(t, s.Holders[0].Write)
	assert.Equal(t, int64(1), s.Holders[0].Weight)
	require.Len(t, s.Waiters, 2)
	assert.Equal(t, []fairlock.WaiterKind{fairlock.WaitsWrite, fairlock.WaitsRead}, []fairlock.WaiterKind{s.Waiters[0].Kind, s.Waiters[1].Kind})
	assert.Equal(t, []string{cw.ID(), cr.ID()}, []string{s.Waiters[0].Client, s.Waiters[1].Client})

	require.NoError(t, rw.RUnlock(r1))
	require.NoError(t, rw.RUnlock(r2))
	wr := await(t, w, 5*time.Second)
	require.NoError(t, wr.err)
	s, err = rw.Inspect(ctx)
	require.NoError(t, err)
	assert.True(t, s.Writer)
	assert.Zero(t, s.Readers)
	require.Len(t, s.Holders, 1)
	assert.True(t, s.Holders[0].Write)
	assert.Equal(t, cw.ID(), s.Holders[0].Client)
	require.NoError(t, cw.RWMutex("doc").Unlock(wr.ctx))
	rr := await(t, r3, 5*time.Second)
	require.NoError(t, rr.err)
	require.NoError(t, cr.RWMutex("doc").RUnlock(rr.ctx))
}

// A MultiLock's ticket shows in the line of each of its locks as a
// ticket, with every name it waits for and the time it has waited, both
// read from the ticket's one key.
func TestInspectShowsAMultiLockTicketWithItsOtherLocks(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	c := e.client()
	held, err := c.Mutex("b").Lock(ctx)
	require.NoError(t, err)
	ticket := lockAsync(fairlock.ContextWithOwner(ctx, "batch"), e.client().MultiLock([]string{"a", "b", "c"}))
	e.waitQueued("b", 1)
	time.Sleep(50 * time.Millisecond) // for a time waited to show

	for _, name := range []string{"a", "b", "c"} {
		s, err := c.Inspect(ctx, name)
		require.NoError(t, err, name)
		require.Len(t, s.Waiters, 1, name)
		w := s.Waiters[0]
		assert.Equal(t, fairlock.WaitsTicket, w.Kind, name)
		assert.Equal(t, "batch", w.Owner, name)
		assert.Equal(t, []string{"a", "b", "c"}, w.Locks, name)
		// The ticket's time of joining is read from its key.
		assert.GreaterOrEqual(t, w.WaitedFor, 50*time.Millisecond, name)
		assert.Less(t, w.WaitedFor, time.Minute, name)
	}
	require.NoError(t, c.Mutex("b").Unlock(held))
	r := await(t, ticket, 5*time.Second)
	require.NoError(t, r.err)
	require.NoError(t, e.client().MultiLock([]string{"a", "b", "c"}).Unlock(r.ctx))
}

// The time held is counted from the grant, through re-entries, and
// starts again at a hand-over; the time waited from the join, through
// every poll that keeps the waiter's place.
func TestInspectCountsHeldForAndWaitedForByTheServersClock(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	c := e.client()
	m := c.Mutex("timed")
	held, err := m.Lock(ctx)
	require.NoError(t, err)
	waiter := e.client(fairlock.WithWaiterTTL(300 * time.Millisecond)) // polls every 100 ms
	w := lockAsync(ctx, waiter.Mutex("timed"))
	e.waitQueued("timed", 1)
	time.Sleep(400 * time.Millisecond)
	_, err = m.Lock(held) // a re-entry
	require.NoError(t, err)
	time.Sleep(300 * time.Millisecond)

	s, err := c.Inspect(ctx, "timed")
	require.NoError(t, err)
	assert.GreaterOrEqual(t, s.HeldFor, 700*time.Millisecond, "from the grant, not the re-entry")
	assert.Equal(t, 2, s.Count)
	require.Len(t, s.Waiters, 1)
	assert.GreaterOrEqual(t, s.Waiters[0].WaitedFor, 700*time.Millisecond, "from the join, not the last poll")
	assert.Less(t, s.Waiters[0].TimeLeft, 300*time.Millisecond+time.Millisecond)

	require.NoError(t, m.Unlock(held))
	require.NoError(t, m.Unlock(held))
	r := await(t, w, 5*time.Second)
	require.NoError(t, r.err)
	s, err = c.Inspect(ctx, "timed")
	require.NoError(t, err)
	assert.Less(t, s.HeldFor, 500*time.Millisecond, "the hand-over's grant starts it again")
	require.NoError(t, waiter.Mutex("timed").Unlock(r.ctx))
}

// InspectAll gives every kind of lock in use under one name; List names
// the locks of every kind.
func TestInspectAllAndListSeeEveryKind(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	c := e.client()
	hm, err := c.Mutex("shared-name").Lock(ctx)
	require.NoError(t, err)
	hs, err := c.Semaphore("shared-name", 2).Acquire(ctx, 1)
	require.NoError(t, err)
	hr, err := c.RWMutex("rw-only").RLock(ctx)
	require.NoError(t, err)
	hq, err := c.Semaphore("sem-only", 1).Acquire(ctx, 1)
	require.NoError(t, err)

	all, err := c.InspectAll(ctx, "shared-name")
	require.NoError(t, err)
	require.Len(t, all, 2)
	assert.Equal(t, []fairlock.Kind{fairlock.KindMutex, fairlock.KindSemaphore}, []fairlock.Kind{all[0].Kind, all[1].Kind})
	all, err = c.InspectAll(ctx, "never-used")
	require.NoError(t, err)
	assert.Empty(t, all)
	s, err := c.Inspect(ctx, "never-used")
	require.NoError(t, err)
	assert.Equal(t, fairlock.KindMutex, s.Kind, "a name in no use reads as a free Mutex")

	names, err := c.List(ctx, "")
	require.NoError(t, err)
	assert.Equal(t, []string{"rw-only", "sem-only", "shared-name"}, names)

	require.NoError(t, c.Mutex("shared-name").Unlock(hm))
	require.NoError(t, c.Semaphore("shared-name", 2).Release(hs))
	require.NoError(t, c.RWMutex("rw-only").RUnlock(hr))
	require.NoError(t, c.Semaphore("sem-only", 1).Release(hq))
}

// A quorum Client's Inspect gives each master's view and the majority's:
// the holder and the waiter are there with a master down.
func TestQuorumInspectShowsEachMasterAndTheMajority(t *testing.T) {
	redistest.Slow(t) // a master killed and restarted, and a redial waited for
	t.Parallel()
	servers := redistest.Masters(t, 3)
	c := quorumOf(t, servers)
	ctx := context.Background()
	m := c.Mutex("q")
	held, err := m.Lock(fairlock.ContextWithOwner(ctx, "leader"))
	require.NoError(t, err)
	tok, err := m.Token(held)
	require.NoError(t, err)
	other := quorumOf(t, servers)
	w := lockAsync(fairlock.ContextWithOwner(ctx, "next"), other.Mutex("q"))
	require.Eventually(t, func() bool {
		s, err := c.Inspect(ctx, "q")
		return err == nil && len(s.Waiters) == 1
	}, 5*time.Second, 10*time.Millisecond)

	s, err := c.Inspect(ctx, "q")
	require.NoError(t, err)
	require.Len(t, s.Masters, 3)
	for i, ms := range s.Masters {
		require.NoError(t, ms.Err, "master %d", i)
		assert.Equal(t, "leader", ms.State.Owner, "master %d", i)
	}
	assert.True(t, s.Held)
	assert.Equal(t, "leader", s.Owner)
	assert.Equal(t, tok, s.Token)
	assert.Equal(t, c.ID(), s.Client)
	require.Len(t, s.Waiters, 1)
	assert.Equal(t, "next", s.Waiters[0].Owner)
	names, err := c.List(ctx, "")
	require.NoError(t, err)
	assert.Equal(t, []string{"q"}, names)

	servers[2].Kill()
	s, err = c.Inspect(ctx, "q")
	require.NoError(t, err)
	assert.Error(t, s.Masters[2].Err)
	assert.True(t, s.Held, "two of three still hold")
	assert.Equal(t, "leader", s.Owner)
	require.NoError(t, servers[2].Restart()) // empty: the other two still hold
	require.Eventually(t, func() bool {
		s, err := c.Inspect(ctx, "q")
		return err == nil && s.Masters[2].Err == nil && s.Held
	}, 10*time.Second, 100*time.Millisecond, "the master back, with nothing of the lock")
	// go-redis redials a server it could not reach once a second, in a
	// loop that ends at its first dial after the server is back.
	time.Sleep(1100 * time.Millisecond)

	require.NoError(t, m.Unlock(held))
	r := await(t, w, 10*time.Second)
	require.NoError(t, r.err)
	require.NoError(t, other.Mutex("q").Unlock(r.ctx))
}
