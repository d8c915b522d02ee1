package queue

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The weighted model's steps on hand-made sequences: a Semaphore of
// capacity semCap and a RWMutex, on the constants of model_test.go.

const semCap = 3

// level is what one call asks for.
type level struct {
	weight int64
	excl   bool
}

var (
	rRead  = level{weight: 1}
	rWrite = level{weight: RWCapacity, excl: true}
)

func permitsOf(n int64) level { return level{weight: n} }

// wlock drives a WeightedModel with the entries of waiter ids "00..0<n>".
type wlock struct {
	t        *testing.T
	m        *WeightedModel
	capacity int64 // the callers' capacity: semCap, or 0 for a RWMutex
	call     func() string
}

func newWLock(t *testing.T, capacity int64) *wlock {
	return &wlock{t: t, m: NewWeightedModel(t0, mReceipt), capacity: capacity, call: callIDs()}
}

// entry returns the weighted entry of waiter n of owner at level v, with
// lease mLease.
func wEntry(n int, owner string, v level) string {
	id := strconv.Itoa(n)
	return WeightedEntry("0000000000000000"[len(id):]+id, mLease*time.Millisecond, v.weight, v.excl, owner)
}

func (l *wlock) acquire(n int, owner, mode string, v level) (Reply, error) {
	return l.m.Acquire(l.call(), owner, wEntry(n, owner, v), mLease, mTTL, mode, v.weight, v.excl, l.capacity)
}

// take requires that waiter n's call in mode is not refused.
func (l *wlock) take(n int, owner, mode string, v level) Reply {
	l.t.Helper()
	rep, err := l.acquire(n, owner, mode, v)
	require.NoError(l.t, err)
	return rep
}

func (l *wlock) release(owner string, v level) int {
	return l.m.Release(l.call(), owner, mLease, v.excl)
}

// wakeOf returns the wake message of a grant to waiter n under token.
func wakeOf(n int, owner string, v level, token int64) string {
	return wEntry(n, owner, v) + " " + itoa(token)
}

func TestWeightedModelGrantsWhatFitsInStrictOrder(t *testing.T) {
	l := newWLock(t, semCap)
	require.Equal(t, Reply{Granted: true, Token: tok0, Count: 1}, l.take(1, "a", ModeWait, permitsOf(2)))
	require.False(t, l.take(2, "b", ModeWait, permitsOf(2)).Granted)
	require.False(t, l.take(3, "c", ModeWait, permitsOf(1)).Granted, "c would fit, but b is ahead")
	require.Equal(t, Reply{}, l.take(4, "d", ModeTry, permitsOf(1)), "a try passes nobody")
	s := l.m.State()
	assert.Equal(t, []string{wEntry(2, "b", permitsOf(2)), wEntry(3, "c", permitsOf(1))}, s.Queue)
	assert.Equal(t, int64(2), s.Used)
	assert.Equal(t, int64(semCap), s.Capacity)

	l.m.Advance(5)
	require.Equal(t, 0, l.release("a", permitsOf(2)))
	assert.Equal(t, []string{
		wakeOf(2, "b", permitsOf(2), tokenAt(t0+5)),
		wakeOf(3, "c", permitsOf(1), tokenAt(t0+5)+1),
	}, l.m.Drain(), "both fit now, and are granted at once, in order")
	s = l.m.State()
	assert.Equal(t, int64(3), s.Used)
	assert.Empty(t, s.Queue)
	assert.Equal(t, Holder{Weight: 2, Shared: 1, Token: tokenAt(t0 + 5), Since: t0 + 5, Entry: wEntry(2, "b", permitsOf(2))}, s.Holders["b"])
	assert.Equal(t, int64(t0+mTTL), s.Leases["b"], "a hand-over lasts no longer than the waiter deadline")

	// b's poll claims its grant, for its full lease.
	assert.Equal(t, Reply{Granted: true, Token: tokenAt(t0 + 5), Count: 1}, l.take(2, "b", ModeWait, permitsOf(2)))
	assert.Equal(t, int64(t0+5+mLease), l.m.State().Leases["b"])
	assert.Equal(t, -1, l.release("a", permitsOf(2)), "a's hold is over")
	require.Equal(t, 0, l.release("b", permitsOf(2)))
	require.Equal(t, 0, l.release("c", permitsOf(1)))
	s = l.m.State()
	assert.Zero(t, s.Capacity, "nothing holds or waits: nothing is kept")
	assert.Empty(t, s.Holders)
	assert.Empty(t, s.Leases)
}

func TestWeightedModelRefusesAnotherCapacityTooMuchAndAHolder(t *testing.T) {
	l := newWLock(t, semCap)
	require.True(t, l.take(1, "a", ModeWait, permitsOf(1)).Granted)
	other := *l
	other.capacity = semCap + 1
	_, err := other.acquire(2, "b", ModeWait, permitsOf(1))
	assert.Equal(t, &Refusal{Reason: RefusePermits, Capacity: semCap}, err)
	_, err = l.acquire(3, "a", ModeWait, permitsOf(1))
	assert.Equal(t, &Refusal{Reason: RefuseHeld}, err, "a fresh call of a holder")

	// A waiter above a lowered capacity leaves the line, and is told by
	// its entry alone to poll, which refuses it.
	require.False(t, l.take(4, "b", ModeWait, permitsOf(3)).Granted)
	assert.Equal(t, int64(semCap), l.m.Resize(2))
	assert.Empty(t, l.m.State().Queue, "the head above the capacity left the line")
	assert.Equal(t, []string{wEntry(4, "b", permitsOf(3))}, l.m.Drain())
	_, err = l.acquire(4, "b", ModeWait, permitsOf(3))
	assert.Equal(t, &Refusal{Reason: RefuseTooBig, Capacity: 2}, err)

	// A waiter whose handle still has the old capacity keeps its place.
	l.capacity = 2
	require.False(t, l.take(5, "c", ModeWait, permitsOf(2)).Granted)
	assert.Equal(t, int64(2), l.m.Resize(3))
	assert.Equal(t, []string{wakeOf(5, "c", permitsOf(2), tok0+1)}, l.m.Drain(), "raising it grants who now fits")
	l.capacity = semCap
	assert.Equal(t, Reply{Granted: true, Token: tok0 + 1, Count: 1}, l.take(5, "c", ModeWait, permitsOf(2)))
}

func TestWeightedModelLowersTheCapacityBelowWhatIsHeld(t *testing.T) {
	l := newWLock(t, semCap)
	require.True(t, l.take(1, "a", ModeWait, permitsOf(3)).Granted)
	require.False(t, l.take(2, "b", ModeWait, permitsOf(1)).Granted)
	assert.Equal(t, int64(semCap), l.m.Resize(1))
	s := l.m.State()
	assert.Equal(t, int64(3), s.Used, "the holder keeps its permits")
	assert.Len(t, s.Queue, 1)
	require.Equal(t, 0, l.release("a", permitsOf(3)))
	assert.Equal(t, []string{wakeOf(2, "b", permitsOf(1), tok0+1)}, l.m.Drain())
}

// A lowering tells every waiter above the new capacity, in line order:
// the head leaves the line, one further back when its poll refuses it.
// A raise tells nobody.
func TestWeightedModelLoweredCapacityTellsEveryWaiterAboveIt(t *testing.T) {
	l := newWLock(t, semCap)
	require.True(t, l.take(1, "a", ModeWait, permitsOf(2)).Granted)
	require.False(t, l.take(2, "b", ModeWait, permitsOf(2)).Granted)
	require.False(t, l.take(3, "c", ModeWait, permitsOf(3)).Granted)
	require.False(t, l.take(4, "d", ModeWait, permitsOf(1)).Granted)
	require.False(t, l.take(5, "e", ModeWait, permitsOf(3)).Granted)
	assert.Equal(t, int64(semCap), l.m.Resize(2))
	assert.Equal(t, []string{wEntry(3, "c", permitsOf(3)), wEntry(5, "e", permitsOf(3))}, l.m.Drain())
	assert.Len(t, l.m.State().Queue, 4, "b waits for room: nobody left the line")
	_, err := l.acquire(3, "c", ModeWait, permitsOf(3))
	assert.Equal(t, &Refusal{Reason: RefuseTooBig, Capacity: 2}, err)
	assert.Len(t, l.m.State().Queue, 3)

	assert.Equal(t, int64(2), l.m.Resize(semCap))
	assert.Empty(t, l.m.Drain(), "nobody waits above a raised capacity")
}

func TestWeightedModelIdleResizeStoresNothing(t *testing.T) {
	l := newWLock(t, semCap)
	assert.Zero(t, l.m.Resize(5))
	assert.Zero(t, l.m.State().Capacity)
	assert.True(t, l.take(1, "a", ModeTry, permitsOf(3)).Granted, "the next grant stores its caller's")
	assert.Equal(t, int64(semCap), l.m.State().Capacity)
}

func TestWeightedModelExpiredHolderGivesItsWeightBack(t *testing.T) {
	l := newWLock(t, semCap)
	rep, err := l.m.Acquire(l.call(), "a", wEntry(1, "a", permitsOf(3)), 20, mTTL, ModeTry, 3, false, semCap)
	require.NoError(t, err)
	require.True(t, rep.Granted)
	w, err := l.m.Acquire(l.call(), "b", wEntry(2, "b", permitsOf(1)), mLease, 90, ModeWait, 1, false, semCap)
	require.NoError(t, err)
	assert.Equal(t, int64(21), w.Hint, "a waiter polls when the first lease ends, before a third of its TTL")
	assert.True(t, l.m.Renew("a", 20))
	l.m.Advance(20)
	assert.False(t, l.m.Renew("a", 20), "a lease that ended is not renewed")
	assert.Equal(t, -1, l.release("a", permitsOf(3)))
	s := l.m.State()
	assert.Equal(t, int64(3), s.Used, "until a script prunes it")
	assert.True(t, l.take(2, "b", ModeWait, permitsOf(1)).Granted)
	s = l.m.State()
	assert.Equal(t, int64(1), s.Used)
	assert.NotContains(t, s.Holders, "a")
}

func TestWeightedModelBatchesReadersAndStarvesNobody(t *testing.T) {
	l := newWLock(t, 0)
	require.True(t, l.take(1, "r1", ModeWait, rRead).Granted)
	require.True(t, l.take(2, "r2", ModeWait, rRead).Granted)
	require.False(t, l.take(3, "w", ModeWait, rWrite).Granted)
	require.False(t, l.take(4, "r3", ModeWait, rRead).Granted, "behind a waiting writer")
	require.False(t, l.take(5, "r4", ModeWait, rRead).Granted)
	require.False(t, l.take(6, "w2", ModeWait, rWrite).Granted)
	require.Equal(t, 0, l.release("r1", rRead))
	require.Equal(t, 0, l.release("r2", rRead))
	assert.Equal(t, []string{wakeOf(3, "w", rWrite, tok0+2)}, l.m.Drain())
	assert.Equal(t, int64(RWCapacity), l.m.State().Used)
	require.Equal(t, 0, l.release("w", rWrite))
	assert.Equal(t, []string{wakeOf(4, "r3", rRead, tok0+3), wakeOf(5, "r4", rRead, tok0+4)}, l.m.Drain(),
		"the readers at the head, up to the next writer")
	assert.Equal(t, []string{wEntry(6, "w2", rWrite)}, l.m.State().Queue)
}

func TestWeightedModelReentersDowngradesAndRefusesAnUpgrade(t *testing.T) {
	l := newWLock(t, 0)
	require.True(t, l.take(1, "w", ModeWait, rWrite).Granted)
	require.False(t, l.take(2, "r", ModeWait, rRead).Granted)
	assert.Equal(t, Reply{Granted: true, Token: tok0, Count: 1}, l.take(3, "w", ModeReenter, rRead), "a read level under the write hold")
	assert.Equal(t, Reply{Granted: true, Token: tok0, Count: 2}, l.take(4, "w", ModeReenter, rWrite))
	assert.Equal(t, Holder{Weight: RWCapacity, Shared: 1, Excl: 2, Token: tok0, Since: t0, Entry: wEntry(1, "w", rWrite)}, l.m.State().Holders["w"])
	require.Equal(t, 1, l.release("w", rWrite))
	require.Equal(t, 0, l.release("w", rWrite))
	assert.Equal(t, []string{wakeOf(2, "r", rRead, tok0+1)}, l.m.Drain(), "a downgrade lets the readers at the head in")
	s := l.m.State()
	assert.Equal(t, int64(2), s.Used)
	assert.Equal(t, Holder{Weight: 1, Shared: 1, Token: tok0, Since: t0, Entry: wEntry(1, "w", rWrite)}, s.Holders["w"])
	_, err := l.acquire(5, "w", ModeReenter, rWrite)
	assert.Equal(t, &Refusal{Reason: RefuseUpgrade}, err)
	assert.Equal(t, -1, l.release("w", rWrite))
	require.Equal(t, 0, l.release("w", rRead))
}

func TestWeightedModelReentryAnswersFromItsReceipt(t *testing.T) {
	l := newWLock(t, 0)
	require.True(t, l.take(1, "r", ModeTry, rRead).Granted)
	e := wEntry(2, "r", rRead)
	first, err := l.m.Acquire("again", "r", e, mLease, mTTL, ModeReenter, 1, false, 0)
	require.NoError(t, err)
	assert.Equal(t, Reply{Granted: true, Token: tok0, Count: 2}, first)
	again, err := l.m.Acquire("again", "r", e, mLease, mTTL, ModeReenter, 1, false, 0)
	require.NoError(t, err)
	assert.Equal(t, first, again)
	assert.Equal(t, 2, l.m.State().Holders["r"].Shared, "counted once")
	assert.Equal(t, 1, l.m.Release("out", "r", mLease, false))
	assert.Equal(t, 1, l.m.Release("out", "r", mLease, false), "a re-sent release answers from its receipt")
	assert.Equal(t, 1, l.m.State().Holders["r"].Shared)

	// A re-entry of an owner that holds no more is no fresh grant.
	require.Equal(t, 0, l.release("r", rRead))
	assert.Equal(t, Reply{}, l.take(3, "r", ModeReenter, rRead))
	assert.Empty(t, l.m.State().Holders)
}

func TestWeightedModelCancelUnblocksTheLineAndGivesBackARacingGrant(t *testing.T) {
	l := newWLock(t, 2)
	require.True(t, l.take(1, "a", ModeWait, permitsOf(1)).Granted)
	require.False(t, l.take(2, "b", ModeWait, permitsOf(2)).Granted)
	require.False(t, l.take(3, "c", ModeWait, permitsOf(1)).Granted)
	assert.False(t, l.m.Cancel("b", wEntry(2, "b", permitsOf(2))))
	assert.Equal(t, []string{wakeOf(3, "c", permitsOf(1), tok0+1)}, l.m.Drain(), "c fits once b, ahead of it, left")
	assert.True(t, l.m.Cancel("c", wEntry(3, "c", permitsOf(1))), "the grant raced with the give-up")
	assert.False(t, l.m.Cancel("c", wEntry(3, "c", permitsOf(1))), "a re-sent cancel finds nothing")
	assert.Equal(t, int64(1), l.m.State().Used)
}

// The hash and the holders set outlive every lease and waiter deadline:
// their expiry moves only when a lease or a deadline would end after it,
// and then as far past that end again, so that it moves about once per
// lease instead of at every call, and a name nobody uses keeps its keys
// for at most one lease more. A lock nothing holds and nobody waits for
// keeps no key.
func TestWeightedModelKeysOutliveTheLastLeaseOrDeadline(t *testing.T) {
	l := newWLock(t, semCap)
	require.True(t, l.take(1, "a", ModeTry, permitsOf(3)).Granted)
	require.False(t, l.take(2, "b", ModeWait, permitsOf(1)).Granted)
	s := l.m.State()
	assert.Equal(t, int64(t0+2*mLease), s.HashEnd, "a's lease end and as long again, past b's deadline")
	assert.Equal(t, s.HashEnd, s.LeasesEnd)
	assert.Equal(t, s.HashEnd, s.Expires, "kept in the hash")
	require.Equal(t, 0, l.release("a", permitsOf(3)))
	require.True(t, l.take(2, "b", ModeWait, permitsOf(1)).Granted)
	assert.Equal(t, int64(t0+2*mLease), l.m.State().HashEnd, "b's lease ends before: the expiry stays")
	l.m.Advance(mLease)
	assert.Equal(t, int64(semCap), l.m.State().Capacity, "left over once b's lease is over, not in force")
	l.m.Advance(mLease)
	s = l.m.State()
	assert.Zero(t, s.Capacity, "gone with the keys")
	assert.Empty(t, s.Leases)

	require.True(t, l.take(3, "c", ModeTry, permitsOf(1)).Granted)
	require.Equal(t, 0, l.release("c", permitsOf(1)))
	s = l.m.State()
	assert.Zero(t, s.Capacity, "released, nobody in line: no key")
	assert.Zero(t, s.HashEnd)
}

// A renewal that shortens the last lease leaves the hash (and the
// capacity in it) until the lease's old end. Once the lease is over,
// nothing holds or waits, and that capacity is not in force: a caller
// that believes in another one is granted and stores its own, and a
// resize stores nothing.
func TestWeightedModelCapacityLeftOverByARenewalIsNotInForce(t *testing.T) {
	l := newWLock(t, semCap)
	require.True(t, l.take(1, "a", ModeTry, permitsOf(1)).Granted)
	require.True(t, l.m.Renew("a", 10))
	l.m.Advance(10)
	s := l.m.State()
	require.Equal(t, int64(semCap), s.Capacity, "left over")
	assert.Equal(t, int64(t0+2*mLease), s.HashEnd)
	assert.Zero(t, l.m.Resize(5), "nothing in force")
	other := *l
	other.capacity = 2
	rep, err := other.acquire(2, "b", ModeTry, permitsOf(2))
	require.NoError(t, err)
	assert.True(t, rep.Granted)
	assert.Equal(t, int64(2), l.m.State().Capacity)
}

// An owner's one record keeps one hold: a waiting call whose owner holds
// under another entry leaves the line when it reaches the head, and a
// fresh call whose owner came to hold on the way is refused.
func TestWeightedModelGrantsAnOwnerOneHold(t *testing.T) {
	l := newWLock(t, semCap)
	require.True(t, l.take(1, "h", ModeWait, permitsOf(3)).Granted)
	require.False(t, l.take(2, "x", ModeWait, permitsOf(1)).Granted)
	require.False(t, l.take(3, "x", ModeWait, permitsOf(1)).Granted)
	require.Equal(t, 0, l.release("h", permitsOf(3)))
	assert.Equal(t, []string{wakeOf(2, "x", permitsOf(1), tok0+1), wEntry(3, "x", permitsOf(1))}, l.m.Drain(),
		"the second call is told to poll")
	s := l.m.State()
	assert.Equal(t, int64(1), s.Used)
	assert.Empty(t, s.Queue, "the second call left the line")
	_, err := l.acquire(3, "x", ModeWait, permitsOf(1))
	assert.Equal(t, &Refusal{Reason: RefuseHeld}, err)

	l = newWLock(t, semCap)
	rep, err := l.m.Acquire(l.call(), "h", wEntry(1, "h", permitsOf(3)), 10, mTTL, ModeTry, 3, false, semCap)
	require.NoError(t, err)
	require.True(t, rep.Granted)
	require.False(t, l.take(2, "x", ModeWait, permitsOf(1)).Granted)
	l.m.Advance(10)
	_, err = l.acquire(3, "x", ModeTry, permitsOf(1))
	assert.Equal(t, &Refusal{Reason: RefuseHeld}, err, "x's waiting call was granted on the way")
	assert.Equal(t, []string{wakeOf(2, "x", permitsOf(1), tokenAt(t0+10))}, l.m.Drain())
	assert.Equal(t, int64(1), l.m.State().Used)
}

func TestWeightedModelForceRemovesOneHolderTellsItAndGrantsWhatFits(t *testing.T) {
	l := newWLock(t, semCap)
	require.True(t, l.take(1, "a", ModeWait, permitsOf(2)).Granted)
	require.True(t, l.take(2, "b", ModeWait, permitsOf(1)).Granted)
	require.False(t, l.take(3, "c", ModeWait, permitsOf(2)).Granted)
	l.m.Drain()

	l.m.Advance(5)
	assert.False(t, l.m.Force("nobody"), "an owner that holds nothing")
	assert.Empty(t, l.m.Drain())
	assert.True(t, l.m.Force("a"))
	assert.Equal(t, []string{
		Revoked(wEntry(1, "a", permitsOf(2))),
		wakeOf(3, "c", permitsOf(2), tokenAt(t0+5)),
	}, l.m.Drain(), "the holder is told first, then the waiter that now fits")
	s := l.m.State()
	assert.NotContains(t, s.Holders, "a")
	assert.Contains(t, s.Holders, "b", "the other holder keeps its hold")
	assert.Equal(t, int64(3), s.Used)

	l.m.Advance(mLease)
	assert.False(t, l.m.Force("b"), "a hold whose lease ended is not forced: it is gone")
}
