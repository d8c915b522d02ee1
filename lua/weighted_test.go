package lua_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock/internal/errs"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/fairlock/fairlock/lua"
	"github.com/fairlock/fairlock/queue"
)

// weightedRig runs the weighted scripts on one Semaphore or RWMutex of a
// real server.
type weightedRig struct {
	t        *testing.T
	rdb      *redis.Client
	k        queue.Keys
	capacity int64 // the caller's capacity; 0 for a RWMutex
	pubsub   *redis.PubSub
	n        int
}

func newWeightedRig(t *testing.T, kind string, capacity int64) *weightedRig {
	k, err := queue.Weighted(redistest.Prefix(t), "w", kind)
	require.NoError(t, err)
	r := &weightedRig{t: t, rdb: redistest.Shared(t).Client(t), k: k, capacity: capacity}
	r.pubsub = r.rdb.PSubscribe(context.Background(), k.Wake+":*")
	_, err = r.pubsub.Receive(context.Background())
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.pubsub.Close() })
	return r
}

// entry returns a fresh waiter entry of owner for level v, with a tag.
func (r *weightedRig) entry(owner string, v lua.Level) string {
	r.n++
	return queue.WeightedEntry(fmt.Sprintf("%016x", r.n)+"0000abcd"+queue.WakeVersion, time.Minute, v.Weight, v.Excl, owner)
}

func (r *weightedRig) acquire(owner, entry, mode string, v lua.Level) (queue.Reply, error) {
	rep, err := lua.ReadAcquire(lua.Classic.WAcquire(r.k, queue.NewID(), owner, entry, 60000, 30000, mode, 20000, v, r.capacity).Run(context.Background(), r.rdb))
	return rep, lua.WeightedRefusal(err)
}

// take asks for v under a fresh entry in mode, and requires no error.
func (r *weightedRig) take(owner, mode string, v lua.Level) (string, queue.Reply) {
	r.t.Helper()
	e := r.entry(owner, v)
	rep, err := r.acquire(owner, e, mode, v)
	require.NoError(r.t, err)
	return e, rep
}

func (r *weightedRig) release(owner string, v lua.Level) int {
	r.t.Helper()
	rep, err := lua.ReadRelease(lua.Classic.WRelease(r.k, queue.NewID(), owner, "", 60000, 20000, v).Run(context.Background(), r.rdb))
	require.NoError(r.t, err)
	return rep.Count
}

func (r *weightedRig) used() int64 {
	r.t.Helper()
	n, err := r.rdb.HGet(context.Background(), r.k.Lock, "used").Int64()
	if err == redis.Nil {
		return 0
	}
	require.NoError(r.t, err)
	return n
}

func (r *weightedRig) line() []string {
	r.t.Helper()
	q, err := r.rdb.LRange(context.Background(), r.k.Queue, 0, -1).Result()
	require.NoError(r.t, err)
	return q
}

// woken returns the entry of the next wake message, or fails.
func (r *weightedRig) woken() string {
	r.t.Helper()
	select {
	case m := <-r.pubsub.Channel():
		var entry string
		_, err := fmt.Sscan(m.Payload, &entry)
		require.NoError(r.t, err)
		return entry
	case <-time.After(5 * time.Second):
		r.t.Fatal("no wake message")
		return ""
	}
}

// told returns the entry of the next wake message, which must carry no
// grant: the entry alone, on its Client's channel.
func (r *weightedRig) told() string {
	r.t.Helper()
	select {
	case m := <-r.pubsub.Channel():
		require.Equal(r.t, r.k.WakeOf(m.Payload), m.Channel, "told on the entry's channel")
		return m.Payload
	case <-time.After(5 * time.Second):
		r.t.Fatal("no wake message")
		return ""
	}
}

func permits(n int64) lua.Level { return lua.Level{Weight: n} }

var (
	read  = lua.Level{Weight: 1}
	write = lua.Level{Weight: queue.RWCapacity, Excl: true}
)

func TestASemaphoreGrantsWhatFitsInStrictOrder(t *testing.T) {
	r := newWeightedRig(t, queue.KindSemaphore, 3)
	_, a := r.take("a", queue.ModeWait, permits(2))
	require.True(t, a.Granted)
	// b asks for 2 of the 1 left: it waits, and c, whose 1 would fit,
	// waits behind it (the head of the line blocks).
	eb, b := r.take("b", queue.ModeWait, permits(2))
	require.False(t, b.Granted)
	ec, c := r.take("c", queue.ModeWait, permits(1))
	require.False(t, c.Granted)
	_, d := r.take("d", queue.ModeTry, permits(1))
	require.False(t, d.Granted, "a try passes nobody")
	require.Equal(t, []string{eb, ec}, r.line())
	require.EqualValues(t, 2, r.used())

	// a's release grants b and c at once, and pushes each.
	require.Equal(t, 0, r.release("a", permits(2)))
	require.ElementsMatch(t, []string{eb, ec}, []string{r.woken(), r.woken()})
	require.EqualValues(t, 3, r.used())
	require.Empty(t, r.line())
	// Their polls claim the grants, with rising tokens.
	rb, err := r.acquire("b", eb, queue.ModeWait, permits(2))
	require.NoError(t, err)
	rc, err := r.acquire("c", ec, queue.ModeWait, permits(1))
	require.NoError(t, err)
	require.True(t, rb.Granted && rc.Granted)
	require.Greater(t, rc.Token, rb.Token)
	require.Greater(t, rb.Token, a.Token)

	// A second release of a's is no hold.
	require.Equal(t, -1, r.release("a", permits(2)))
	require.Equal(t, 0, r.release("b", permits(2)))
	require.Equal(t, 0, r.release("c", permits(1)))
	// Nothing is kept once nothing holds or waits.
	n, err := r.rdb.Exists(context.Background(), r.k.Lock, r.k.Holders, r.k.Queue, r.k.Deadline).Result()
	require.NoError(t, err)
	require.Zero(t, n)
}

func TestASemaphoreRefusesAnotherCapacityAndTooMuch(t *testing.T) {
	r := newWeightedRig(t, queue.KindSemaphore, 3)
	_, a := r.take("a", queue.ModeWait, permits(1))
	require.True(t, a.Granted)
	other := *r
	other.capacity = 4
	_, err := other.acquire("b", r.entry("b", permits(1)), queue.ModeWait, permits(1))
	require.ErrorIs(t, err, errs.ErrPermits)

	// A waiter in line when the capacity is lowered below its weight
	// leaves the line, is told by its entry alone to poll, and its poll
	// refuses it.
	eb, b := r.take("b", queue.ModeWait, permits(3))
	require.False(t, b.Granted)
	before, err := lua.ReadCount(lua.Classic.WResize(r.k, 2).Run(context.Background(), r.rdb))
	require.NoError(t, err)
	require.EqualValues(t, 3, before)
	require.Equal(t, eb, r.told())
	require.Empty(t, r.line())
	_, err = r.acquire("b", eb, queue.ModeWait, permits(3))
	require.ErrorIs(t, err, errs.ErrInvalidOption)
	require.Empty(t, r.line())

	// Raising it grants who now fits.
	r.capacity = 2
	ec, c := r.take("c", queue.ModeWait, permits(2))
	require.False(t, c.Granted)
	_, err = lua.ReadCount(lua.Classic.WResize(r.k, 3).Run(context.Background(), r.rdb))
	require.NoError(t, err)
	require.Equal(t, ec, r.woken())
	require.EqualValues(t, 3, r.used())
}

func TestALoweredCapacityTellsEveryWaiterAboveIt(t *testing.T) {
	r := newWeightedRig(t, queue.KindSemaphore, 10)
	_, a := r.take("a", queue.ModeWait, permits(8))
	require.True(t, a.Granted)
	// b, at the head, would fit under 4 but not beside the 8 held; c
	// behind it asks for more than 4 and d for less.
	eb, _ := r.take("b", queue.ModeWait, permits(3))
	ec, _ := r.take("c", queue.ModeWait, permits(5))
	ed, _ := r.take("d", queue.ModeWait, permits(1))
	_, err := lua.ReadCount(lua.Classic.WResize(r.k, 4).Run(context.Background(), r.rdb))
	require.NoError(t, err)
	require.Equal(t, ec, r.told())
	require.Equal(t, []string{eb, ec, ed}, r.line(), "c leaves when its poll is refused")
	_, err = r.acquire("c", ec, queue.ModeWait, permits(5))
	require.ErrorIs(t, err, errs.ErrInvalidOption)
	require.Equal(t, []string{eb, ed}, r.line())

	// Raising the capacity tells nobody: nobody waits above it.
	_, err = lua.ReadCount(lua.Classic.WResize(r.k, 6).Run(context.Background(), r.rdb))
	require.NoError(t, err)
	require.Equal(t, 0, r.release("a", permits(8)))
	require.ElementsMatch(t, []string{eb, ed}, []string{r.woken(), r.woken()}, "grants, after a's release")
}

func TestAnExpiredHolderGivesItsPermitsBack(t *testing.T) {
	r := newWeightedRig(t, queue.KindSemaphore, 2)
	e := r.entry("a", permits(2))
	rep, err := lua.ReadAcquire(lua.Classic.WAcquire(r.k, queue.NewID(), "a", e, 50, 30000, queue.ModeWait, 20000, permits(2), 2).Run(context.Background(), r.rdb))
	require.NoError(t, err)
	require.True(t, rep.Granted)
	eb, b := r.take("b", queue.ModeWait, permits(1))
	require.False(t, b.Granted)
	require.LessOrEqual(t, b.Hint, int64(51), "the hint is when the first lease ends")
	ok, err := lua.ReadFlag(lua.Classic.WRenew(r.k, "a", 50).Run(context.Background(), r.rdb))
	require.NoError(t, err)
	require.True(t, ok)
	time.Sleep(120 * time.Millisecond)
	ok, err = lua.ReadFlag(lua.Classic.WRenew(r.k, "a", 50).Run(context.Background(), r.rdb))
	require.NoError(t, err)
	require.False(t, ok, "a lease that ended is not renewed")
	// The next call that looks gives a's permits back: b, ahead, is
	// granted first, and c then fits beside it.
	_, c := r.take("c", queue.ModeTry, permits(1))
	require.Equal(t, eb, r.woken())
	require.True(t, c.Granted)
	require.Greater(t, c.Token, rep.Token)
	require.Equal(t, -1, r.release("a", permits(2)))
}

func TestARWMutexBatchesReadersAndStarvesNobody(t *testing.T) {
	r := newWeightedRig(t, queue.KindRWMutex, 0)
	_, r1 := r.take("r1", queue.ModeWait, read)
	_, r2 := r.take("r2", queue.ModeWait, read)
	require.True(t, r1.Granted && r2.Granted, "readers share")
	ew, w := r.take("w", queue.ModeWait, write)
	require.False(t, w.Granted, "a writer waits for the readers")
	er3, r3 := r.take("r3", queue.ModeWait, read)
	require.False(t, r3.Granted, "a reader behind a waiting writer waits")
	er4, _ := r.take("r4", queue.ModeWait, read)
	ew2, _ := r.take("w2", queue.ModeWait, write)
	er5, _ := r.take("r5", queue.ModeWait, read)
	require.Equal(t, []string{ew, er3, er4, ew2, er5}, r.line())

	require.Equal(t, 0, r.release("r1", read))
	require.Equal(t, 0, r.release("r2", read))
	require.Equal(t, ew, r.woken())
	require.Equal(t, 0, r.release("w", write))
	// The readers at the head are granted together, up to the writer.
	require.ElementsMatch(t, []string{er3, er4}, []string{r.woken(), r.woken()})
	require.Equal(t, []string{ew2, er5}, r.line())
}

func TestARWMutexReentersDowngradesAndRefusesAnUpgrade(t *testing.T) {
	r := newWeightedRig(t, queue.KindRWMutex, 0)
	_, w := r.take("w", queue.ModeWait, write)
	require.True(t, w.Granted)
	er, rd := r.take("r", queue.ModeWait, read)
	require.False(t, rd.Granted)

	// Under the write hold: a read and a write level, at once.
	_, in := r.take("w", queue.ModeReenter, read)
	require.True(t, in.Granted)
	require.Equal(t, w.Token, in.Token)
	_, in = r.take("w", queue.ModeReenter, write)
	require.True(t, in.Granted)
	require.Equal(t, 2, in.Count)
	require.Equal(t, 1, r.release("w", write))
	// The last write level goes, the read level stays: a downgrade, and
	// the reader waiting is granted beside it.
	require.Equal(t, 0, r.release("w", write))
	require.Equal(t, er, r.woken())
	require.EqualValues(t, 2, r.used())

	// A read hold cannot take the write lock.
	_, err := r.acquire("w", r.entry("w", write), queue.ModeReenter, write)
	require.ErrorIs(t, err, errs.ErrWouldDeadlock)
	require.Equal(t, 0, r.release("w", read))
	require.Equal(t, -1, r.release("w", read))
}

func TestAWeightedWaiterThatGivesUpUnblocksTheLine(t *testing.T) {
	r := newWeightedRig(t, queue.KindSemaphore, 2)
	_, a := r.take("a", queue.ModeWait, permits(1))
	require.True(t, a.Granted)
	eb, _ := r.take("b", queue.ModeWait, permits(2))
	ec, _ := r.take("c", queue.ModeWait, permits(1))
	gave, err := lua.ReadFlag(lua.Classic.WCancel(r.k, "b", eb).Run(context.Background(), r.rdb))
	require.NoError(t, err)
	require.False(t, gave)
	require.Equal(t, ec, r.woken(), "c fits once b, ahead of it, left")

	// A grant that raced with the give-up is given back.
	require.Equal(t, 0, r.release("a", permits(1)))
	gave, err = lua.ReadFlag(lua.Classic.WCancel(r.k, "c", ec).Run(context.Background(), r.rdb))
	require.NoError(t, err)
	require.True(t, gave)
	require.Zero(t, r.used())
}

// A renewal never moves the keys' expiry earlier, so one that shortens
// the last lease leaves the hash, with its capacity, until the lease's
// old end. Once that lease is over nothing holds or waits: the capacity
// left over is not in force. A resize stores nothing, and a caller that
// believes in another capacity is granted and stores its own, where it
// was refused with ErrPermits.
func TestACapacityLeftOverByARenewalIsNotInForce(t *testing.T) {
	r := newWeightedRig(t, queue.KindSemaphore, 3)
	ctx := context.Background()
	_, a := r.take("a", queue.ModeTry, permits(1))
	require.True(t, a.Granted)
	r.leaseEnds("a")
	require.Equal(t, "3", r.rdb.HGet(ctx, r.k.Lock, "permits").Val(), "left over")

	before, err := lua.ReadCount(lua.Classic.WResize(r.k, 5).Run(ctx, r.rdb))
	require.NoError(t, err)
	require.Zero(t, before, "no capacity was in force")
	other := *r
	other.capacity = 2
	_, b := other.take("b", queue.ModeTry, permits(2))
	require.True(t, b.Granted)
	require.Equal(t, "2", r.rdb.HGet(ctx, r.k.Lock, "permits").Val(), "the grant stored its caller's capacity")
}

// leaseEnds renews owner's hold to a lease of 1 ms and waits until it has
// ended on the server's clock (no script has run since: its weight is
// still counted).
func (r *weightedRig) leaseEnds(owner string) {
	r.t.Helper()
	ctx := context.Background()
	ok, err := lua.ReadFlag(lua.Classic.WRenew(r.k, owner, 1).Run(ctx, r.rdb))
	require.NoError(r.t, err)
	require.True(r.t, ok)
	end, err := r.rdb.ZScore(ctx, r.k.Holders, owner).Result()
	require.NoError(r.t, err)
	require.Eventually(r.t, func() bool {
		now, err := r.rdb.Time(ctx).Result()
		return err == nil && now.UnixMilli() > int64(end)
	}, 5*time.Second, time.Millisecond, "the lease ends on the server's clock")
}

// An owner's one record keeps one hold. Two waiting calls of one owner
// (fairlock makes an owner per hold, but a caller may reuse one): the
// release grants the first, and the second, whose owner now holds, leaves
// the line and is refused at its poll, where it was granted too, its
// permits counted in 'used' and never given back.
func TestAnOwnerIsGrantedOneHoldThoughTwoOfItsCallsWait(t *testing.T) {
	r := newWeightedRig(t, queue.KindSemaphore, 3)
	_, h := r.take("h", queue.ModeWait, permits(3))
	require.True(t, h.Granted)
	first, rep := r.take("x", queue.ModeWait, permits(1))
	require.False(t, rep.Granted)
	second, rep := r.take("x", queue.ModeWait, permits(1))
	require.False(t, rep.Granted)
	require.Equal(t, []string{first, second}, r.line())

	require.Equal(t, 0, r.release("h", permits(3)))
	require.Equal(t, first, r.woken())
	require.EqualValues(t, 1, r.used())
	require.Empty(t, r.line(), "the second call left the line")
	_, err := r.acquire("x", second, queue.ModeWait, permits(1))
	require.ErrorIs(t, err, errs.ErrWouldDeadlock)
	require.Equal(t, 0, r.release("x", permits(1)))
	require.Zero(t, r.used())
}

// A fresh call whose own grant_heads grants the owner's waiting call (a
// lease ran out unannounced) finds its owner holding: it is refused, where
// it was granted a second hold under the same record.
func TestAFreshCallOfAnOwnerGrantedOnTheWayIsRefused(t *testing.T) {
	r := newWeightedRig(t, queue.KindSemaphore, 3)
	_, h := r.take("h", queue.ModeWait, permits(3))
	require.True(t, h.Granted)
	waiting, rep := r.take("x", queue.ModeWait, permits(1))
	require.False(t, rep.Granted)
	r.leaseEnds("h")

	_, err := r.acquire("x", r.entry("x", permits(1)), queue.ModeTry, permits(1))
	require.ErrorIs(t, err, errs.ErrWouldDeadlock)
	require.Equal(t, waiting, r.woken(), "the waiting call was granted on the way")
	require.EqualValues(t, 1, r.used())
	require.Equal(t, 0, r.release("x", permits(1)))
	require.Zero(t, r.used())
}
