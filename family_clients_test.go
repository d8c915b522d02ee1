package fairlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/fairlock/fairlock/queue"
)

// The family's promises about other Clients: a hold taken through one
// Client counts through another Client of the same deployment, for every
// primitive (doc.go: "a hold taken through another Client counts only if
// that Client's Redis has it"). These cases run on one server here, and
// on a Cluster and a failover client in TestTopologies; the quorum's in
// TestQuorumHoldsCountThroughAnotherClient.

// familyCases are run by runCoreCases on every topology.
var familyCases = []struct {
	name string
	run  func(t *testing.T, e *env, lock string)
}{
	{"MutexHoldCountsThroughAnotherClient", mutexHoldCountsThroughAnotherClient},
	{"RWMutexHoldsCountThroughAnotherClient", rwMutexHoldsCountThroughAnotherClient},
	{"SemaphoreHoldCountsThroughAnotherClient", semaphoreHoldCountsThroughAnotherClient},
	{"MultiLockUnlocksThroughAnotherClient", multiLockUnlocksThroughAnotherClient},
	{"UnlockThroughAnotherClientWithACanceledDerivedContext", unlockThroughAnotherClientWithACanceledDerivedContext},
	{"RefusedInnerUnlockThenTheOuterUnlockFreesTheLock", refusedInnerUnlockThenTheOuterUnlockFreesTheLock},
	{"ForcedUnlockEndsTheHoldersContextAtOnce", forcedUnlockEndsTheHoldersContextAtOnce},
	{"ForcedReleaseEndsAWeightedHoldersContextAtOnce", forcedReleaseEndsAWeightedHoldersContextAtOnce},
	{"ElectionObserversSeeEveryChangeAcrossClients", electionObserversSeeEveryChangeAcrossClients},
	{"ElectionLeaseLostEndsTheLeadershipAndElectsTheNext", electionLeaseLostEndsTheLeadershipAndElectsTheNext},
}

func TestFamilyCasesOnOneServer(t *testing.T) {
	t.Parallel()
	for _, c := range familyCases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.run(t, newEnv(t), "family")
		})
	}
}

// soon bounds a call that must not wait: on failure it ends the call
// instead of hanging the test.
func soon(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// within returns held (a hold's context) bounded by a deadline, for a
// call through another Client that must re-enter at once.
func within(t *testing.T, held context.Context) context.Context {
	ctx, cancel := context.WithTimeout(held, 5*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func mutexHoldCountsThroughAnotherClient(t *testing.T, e *env, lock string) {
	a, b := e.client(), e.client()
	held := requireReenteredThroughAnother(t, a.Mutex(lock), b.Mutex(lock))
	require.NoError(t, b.Mutex(lock).Unlock(held))
	requireDone(t, held, 5*time.Second)
	e.requireLocked(false, lock)
}

// requireReenteredThroughAnother takes a hold through ma, re-enters it
// through mb (a Mutex of the same lock through another Client): the count
// is 2 and the token the hold's, and mb's Unlock gives the level back. It
// returns the hold, of one level.
func requireReenteredThroughAnother(t *testing.T, ma, mb *fairlock.Mutex) context.Context {
	held, err := ma.Lock(soon(t))
	require.NoError(t, err)
	token, err := ma.Token(held)
	require.NoError(t, err)
	inner, err := mb.Lock(within(t, held))
	require.NoError(t, err, "b re-enters a's hold")
	n, err := mb.HoldCount(inner)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	got, err := mb.Token(inner)
	require.NoError(t, err)
	require.Equal(t, token, got, "a re-entry keeps the hold's token")
	require.NoError(t, mb.Unlock(inner))
	return held
}

func rwMutexHoldsCountThroughAnotherClient(t *testing.T, e *env, lock string) {
	a, b := e.client(), e.client()
	ra, rb := a.RWMutex(lock), b.RWMutex(lock)

	// The write hold: b re-enters it, takes a read level under it, and
	// sees its token; b's Unlocks end it.
	w, err := ra.Lock(soon(t))
	require.NoError(t, err)
	token, err := ra.Token(w)
	require.NoError(t, err)
	w2, err := rb.Lock(within(t, w))
	require.NoError(t, err, "b re-enters a's write hold")
	r, err := rb.RLock(within(t, w2))
	require.NoError(t, err, "b takes a read level under a's write hold")
	got, err := rb.Token(r)
	require.NoError(t, err)
	require.Equal(t, token, got, "a read level under the write hold keeps its token")
	require.NoError(t, rb.RUnlock(r))
	require.NoError(t, rb.Unlock(w2))
	require.NoError(t, rb.Unlock(w))
	requireDone(t, w, 5*time.Second)
	e.requireWeightedGone(lock, queue.KindRWMutex)

	// The read hold: b re-enters it, refuses to upgrade it, and ends it.
	rd, err := ra.RLock(soon(t))
	require.NoError(t, err)
	rd2, err := rb.RLock(within(t, rd))
	require.NoError(t, err, "b re-enters a's read hold")
	_, err = rb.Lock(within(t, rd))
	require.ErrorIs(t, err, fairlock.ErrWouldDeadlock, "b refuses to upgrade a's read hold")
	_, err = rb.Token(rd)
	require.NoError(t, err)
	require.NoError(t, rb.RUnlock(rd2))
	require.NoError(t, rb.RUnlock(rd))
	requireDone(t, rd, 5*time.Second)
	e.requireWeightedGone(lock, queue.KindRWMutex)
}

func semaphoreHoldCountsThroughAnotherClient(t *testing.T, e *env, lock string) {
	a, b := e.client(), e.client()
	sa, sb := a.Semaphore(lock, 1), b.Semaphore(lock, 1)
	held, err := sa.Acquire(soon(t), 1)
	require.NoError(t, err)
	token, err := sa.Token(held)
	require.NoError(t, err)

	_, err = sb.Acquire(within(t, held), 1)
	require.ErrorIs(t, err, fairlock.ErrWouldDeadlock, "b's Acquire under a's hold would wait for ever")
	_, err = sb.TryAcquire(within(t, held), 1)
	require.ErrorIs(t, err, fairlock.ErrWouldDeadlock)
	got, err := sb.Token(held)
	require.NoError(t, err)
	require.Equal(t, token, got)
	require.NoError(t, sb.Release(held), "b releases a's hold")
	requireDone(t, held, 5*time.Second)
	e.requireWeightedGone(lock, queue.KindSemaphore)
}

func multiLockUnlocksThroughAnotherClient(t *testing.T, e *env, lock string) {
	a, b := e.client(), e.client()
	names := []string{lock + "-1", lock + "-2", lock + "-3"}
	held, err := a.MultiLock(names).Lock(soon(t))
	require.NoError(t, err)
	require.NoError(t, b.MultiLock(names).Unlock(held), "b releases every name of a's MultiLock")
	requireDone(t, held, 5*time.Second)
	e.requireLocked(false, names...)
}

// unlockThroughAnotherClientWithACanceledDerivedContext: a cancellation
// does not stop Unlock, through any Client.
func unlockThroughAnotherClientWithACanceledDerivedContext(t *testing.T, e *env, lock string) {
	a, b := e.client(), e.client()
	held, err := a.Mutex(lock).Lock(soon(t))
	require.NoError(t, err)
	derived, cancel := context.WithCancel(held)
	cancel()
	require.NoError(t, b.Mutex(lock).Unlock(derived))
	requireDone(t, held, 5*time.Second)
	e.requireLocked(false, lock)

	rw, err := a.RWMutex(lock).Lock(soon(t))
	require.NoError(t, err)
	derived, cancel = context.WithCancel(rw)
	cancel()
	require.NoError(t, b.RWMutex(lock).Unlock(derived))
	requireDone(t, rw, 5*time.Second)

	sem, err := a.Semaphore(lock, 2).Acquire(soon(t), 1)
	require.NoError(t, err)
	derived, cancel = context.WithCancel(sem)
	cancel()
	require.NoError(t, b.Semaphore(lock, 2).Release(derived))
	requireDone(t, sem, 5*time.Second)
	e.requireWeightedGone(lock, queue.KindRWMutex)
	e.requireWeightedGone(lock, queue.KindSemaphore)
}

// TestQuorumHoldsCountThroughAnotherClient: two quorum Clients over the
// same masters share their locks' holds, as two Clients of one server do.
func TestQuorumHoldsCountThroughAnotherClient(t *testing.T) {
	redistest.Slow(t)
	t.Parallel()
	servers := redistest.Masters(t, 3)
	a, b := quorumOf(t, servers), quorumOf(t, servers)
	ma, mb := a.Mutex("family"), b.Mutex("family")
	held := requireReenteredThroughAnother(t, ma, mb)
	derived, cancel := context.WithCancel(held)
	cancel()
	require.NoError(t, mb.Unlock(derived), "a cancellation does not stop Unlock")
	requireDone(t, held, 5*time.Second)
	locked, err := mb.IsLocked(soon(t))
	require.NoError(t, err)
	require.False(t, locked)

	// A quorum over other masters with the same prefix is another lock.
	other := quorumOf(t, redistest.Masters(t, 3))
	held, err = ma.Lock(soon(t))
	require.NoError(t, err)
	otherHeld, err := other.Mutex("family").Lock(within(t, held))
	require.NoError(t, err, "the same name on other masters is free")
	require.ErrorIs(t, other.Mutex("family").Unlock(held), fairlock.ErrNotHeld)
	require.NoError(t, other.Mutex("family").Unlock(otherHeld))
	require.NoError(t, ma.Unlock(held))
}
