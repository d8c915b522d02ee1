package lua_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/fairlock/fairlock/lua"
	"github.com/fairlock/fairlock/queue"
)

// ticketRig runs the scripts on the locks of one server, as a MultiLock
// in one slot does.
type ticketRig struct {
	t   *testing.T
	rdb *redis.Client
	ks  map[string]queue.Keys
}

func newTicketRig(t *testing.T, names ...string) *ticketRig {
	r := &ticketRig{t: t, rdb: redistest.Shared(t).Client(t), ks: map[string]queue.Keys{}}
	prefix := redistest.Prefix(t)
	for _, name := range names {
		k, err := queue.For(prefix, name)
		require.NoError(t, err)
		r.ks[name] = k
	}
	return r
}

// ticket returns a ticket entry of owner, with a Client tag.
func ticket(n int, owner string) string {
	return queue.Entry(fmt.Sprintf("%016x", n)+"0000abcd"+queue.TicketVersion, time.Minute, owner)
}

func (r *ticketRig) keys(names ...string) []queue.Keys {
	ks := make([]queue.Keys, len(names))
	for i, name := range names {
		ks[i] = r.ks[name]
	}
	return ks
}

func (r *ticketRig) multi(owner, entry, mode string, names ...string) queue.Reply {
	r.t.Helper()
	rep, err := lua.ReadMultiAcquire(lua.Classic.MultiAcquire(r.keys(names...), owner, entry, 60000, 30000, mode).Run(context.Background(), r.rdb), len(names))
	require.NoError(r.t, err)
	return rep
}

func (r *ticketRig) lock(name, owner string) queue.Reply {
	r.t.Helper()
	entry := queue.Entry(queue.NewID()+"0000abcd"+queue.WakeVersion, time.Minute, owner)
	rep, err := lua.ReadAcquire(lua.Classic.Acquire(r.ks[name], queue.NewID(), owner, entry, 60000, 30000, queue.ModeWait, 20000).Run(context.Background(), r.rdb))
	require.NoError(r.t, err)
	return rep
}

func (r *ticketRig) release(name, owner string) {
	r.t.Helper()
	rep, err := lua.ReadRelease(lua.Classic.Release(r.ks[name], queue.NewID(), owner, "", 60000, 20000).Run(context.Background(), r.rdb))
	require.NoError(r.t, err)
	require.GreaterOrEqual(r.t, rep.Count, 0, "%s held by %s", name, owner)
}

func (r *ticketRig) holder(name string) string {
	r.t.Helper()
	owner, err := r.rdb.HGet(context.Background(), r.ks[name].Lock, "owner").Result()
	if err == redis.Nil {
		return ""
	}
	require.NoError(r.t, err)
	return owner
}

func (r *ticketRig) line(name string) []string {
	r.t.Helper()
	q, err := r.rdb.LRange(context.Background(), r.ks[name].Queue, 0, -1).Result()
	require.NoError(r.t, err)
	return q
}

func TestATicketIsGrantedEveryLockAtOnceOrNone(t *testing.T) {
	r := newTicketRig(t, "a", "b", "c")
	// Free: granted at once, in try mode and in wait mode.
	rep := r.multi("m", ticket(1, "m"), queue.ModeTry, "a", "b")
	require.True(t, rep.Granted)
	require.Len(t, rep.Tokens, 2)
	require.Equal(t, "m", r.holder("a"))
	require.Equal(t, "m", r.holder("b"))
	// A re-sent grant claims it, with the same tokens.
	again := r.multi("m", ticket(1, "m"), queue.ModeTry, "a", "b")
	require.Equal(t, rep.Tokens, again.Tokens)

	// b held: try fails and holds nothing; wait joins both lines, holds nothing.
	rep = r.multi("n", ticket(2, "n"), queue.ModeTry, "b", "c")
	require.False(t, rep.Granted)
	require.Empty(t, r.holder("c"), "try holds nothing")
	require.Empty(t, r.line("c"), "try never queues")
	rep = r.multi("n", ticket(2, "n"), queue.ModeWait, "b", "c")
	require.False(t, rep.Granted)
	require.Equal(t, 1, rep.Position)
	require.Empty(t, r.holder("c"), "a waiting ticket holds nothing")
	require.Equal(t, []string{ticket(2, "n")}, r.line("b"))
	require.Equal(t, []string{ticket(2, "n")}, r.line("c"))

	// Nobody passes it on c, which stays free: a Mutex caller of c waits
	// behind it.
	rep = r.lock("c", "s")
	require.False(t, rep.Granted)
	require.Equal(t, 2, rep.Position)
	require.Empty(t, r.holder("c"))

	// The release of b (a Mutex's release script) grants the ticket both.
	r.release("b", "m")
	require.Equal(t, "n", r.holder("b"))
	require.Equal(t, "n", r.holder("c"))
	require.Empty(t, r.line("b"))
	rep = r.multi("n", ticket(2, "n"), queue.ModeWait, "b", "c")
	require.True(t, rep.Granted, "the poll claims the hand-over")
	require.Len(t, rep.Tokens, 2)

	// And its release of c hands c to the Mutex caller.
	r.release("c", "n")
	require.Equal(t, "s", r.holder("c"))
	r.release("b", "n")
	r.release("a", "m")
}

// The oldest ticket is never passed: a younger ticket whose locks are
// free waits behind an older one that shares a line with it.
func TestTheOldestTicketIsNeverPassed(t *testing.T) {
	r := newTicketRig(t, "a", "b", "c")
	require.True(t, r.lock("b", "h").Granted)
	old := r.multi("o", ticket(1, "o"), queue.ModeWait, "a", "b")
	require.False(t, old.Granted)
	young := r.multi("y", ticket(2, "y"), queue.ModeWait, "a", "c")
	require.False(t, young.Granted, "a is free but the older ticket heads its line")
	require.Empty(t, r.holder("a"))
	require.Empty(t, r.holder("c"))

	r.release("b", "h")
	require.Equal(t, "o", r.holder("a"))
	require.Equal(t, "o", r.holder("b"))
	require.Empty(t, r.holder("c"), "the young ticket holds nothing of its set")
	r.release("a", "o")
	require.Equal(t, "y", r.holder("a"))
	require.Equal(t, "y", r.holder("c"))
}

// A ticket that gives up leaves every line, and the locks it headed go on
// to the waiters behind it.
func TestACancelledTicketLeavesEveryLine(t *testing.T) {
	r := newTicketRig(t, "a", "b")
	require.True(t, r.lock("b", "h").Granted)
	tk := ticket(1, "m")
	require.False(t, r.multi("m", tk, queue.ModeWait, "a", "b").Granted)
	require.False(t, r.lock("a", "s").Granted, "behind the ticket")

	released, err := lua.ReadFlag(lua.Classic.CancelTicket(r.keys("a", "b"), "m", tk).Run(context.Background(), r.rdb))
	require.NoError(t, err)
	require.False(t, released)
	require.Equal(t, "s", r.holder("a"), "a goes to the waiter behind the ticket")
	require.Empty(t, r.line("b"))
	n, err := r.rdb.Exists(context.Background(), r.ks["a"].TicketKey(queue.WaiterIDOf(tk))).Result()
	require.NoError(t, err)
	require.Zero(t, n, "the ticket's key is gone")

	// A ticket handed its locks, then cancelled, gives them back.
	tk2 := ticket(2, "m")
	require.False(t, r.multi("m", tk2, queue.ModeWait, "a", "b").Granted)
	r.release("a", "s")
	r.release("b", "h")
	require.Equal(t, "m", r.holder("a"))
	released, err = lua.ReadFlag(lua.Classic.CancelTicket(r.keys("a", "b"), "m", tk2).Run(context.Background(), r.rdb))
	require.NoError(t, err)
	require.True(t, released)
	require.Empty(t, r.holder("a"))
	require.Empty(t, r.holder("b"))
}

// A ticket whose waiter stopped polling is dropped once its deadline
// passes, and stops no one.
func TestADeadTicketIsPruned(t *testing.T) {
	r := newTicketRig(t, "a", "b")
	require.True(t, r.lock("b", "h").Granted)
	tk := ticket(1, "m")
	require.False(t, r.multi("m", tk, queue.ModeWait, "a", "b").Granted)
	r.dies(tk, "a", "b")
	rep := r.lock("a", "s")
	require.True(t, rep.Granted, "a dead ticket stops no one")
	r.release("b", "h")
	require.Empty(t, r.holder("b"))
}

// A ticket whose key is gone (it expired a moment before the ticket's
// deadline) is dead: the hand-over that finds it at the head drops it and
// serves the waiter behind it.
func TestATicketWhoseKeyExpiredIsDroppedByAHandOver(t *testing.T) {
	r := newTicketRig(t, "a", "b")
	ctx := context.Background()
	require.True(t, r.lock("a", "h").Granted)
	require.True(t, r.lock("b", "h").Granted)
	tk := ticket(1, "m")
	require.False(t, r.multi("m", tk, queue.ModeWait, "a", "b").Granted)
	require.False(t, r.lock("a", "s").Granted, "behind the ticket")
	require.NoError(t, r.rdb.Del(ctx, r.ks["a"].TicketKey(queue.WaiterIDOf(tk))).Err())
	r.release("a", "h")
	require.Equal(t, "s", r.holder("a"), "the dead ticket was dropped")
	require.Empty(t, r.line("a"), "and left the line")
}

// dies makes the ticket entry dead in the lines of names, as if its
// waiter had stopped polling for the waiter TTL: its deadlines are past,
// and its key expired with them.
func (r *ticketRig) dies(entry string, names ...string) {
	r.t.Helper()
	ctx := context.Background()
	for _, name := range names {
		k := r.ks[name]
		require.NoError(r.t, r.rdb.ZAdd(ctx, k.Deadline, redis.Z{Score: 1, Member: entry}).Err())
		require.NoError(r.t, r.rdb.Del(ctx, k.TicketKey(queue.WaiterIDOf(entry))).Err())
	}
}

// A ticket pruned from one of its lines (it was dead there) that polls
// again must not keep its old place in the others: it would then stand
// behind another ticket in one line and ahead of it in another, each
// would head a line the other waits in, and neither would ever be
// granted, however long both polled. It rejoins every line at the end.
func TestTwoTicketsNeverWaitForEachOther(t *testing.T) {
	r := newTicketRig(t, "a", "b")
	require.True(t, r.lock("a", "h1").Granted)
	require.True(t, r.lock("b", "h2").Granted)
	t1, t2 := ticket(1, "o1"), ticket(2, "o2")
	require.False(t, r.multi("o1", t1, queue.ModeWait, "a", "b").Granted)
	require.False(t, r.multi("o2", t2, queue.ModeWait, "a", "b").Granted)

	// t1 stops polling past its deadline; the release of a prunes it
	// there, and t2 heads a, which stays free for it while b is held.
	r.dies(t1, "a", "b")
	r.release("a", "h1")
	require.Empty(t, r.holder("a"))
	require.Equal(t, []string{t2}, r.line("a"))
	require.Equal(t, []string{t1, t2}, r.line("b"), "t1 is dead in b, where nobody pruned it yet")

	// t1 polls again, late.
	require.False(t, r.multi("o1", t1, queue.ModeWait, "a", "b").Granted)
	require.Equal(t, []string{t2, t1}, r.line("a"))
	require.Equal(t, []string{t2, t1}, r.line("b"), "t1 rejoined every line behind t2")

	r.release("b", "h2")
	for range 3 {
		r.multi("o1", t1, queue.ModeWait, "a", "b")
		r.multi("o2", t2, queue.ModeWait, "a", "b")
	}
	require.Equal(t, "o2", r.holder("a"))
	require.Equal(t, "o2", r.holder("b"))
}

// A ticket granted by its own poll holds every lock for its lease, as a
// Mutex's poll that finds the lock free and itself first in line does,
// and as a claim of a hand-over does: its waiter is there to hold them.
// Only a hand-over, which may reach a waiter that is gone, is bounded by
// the ticket's waiter deadline.
func TestATicketGrantedByItsOwnPollHoldsForItsLease(t *testing.T) {
	const lease, waiterTTL = 60_000, 30_000 // as multi sends them
	r := newTicketRig(t, "a", "b")
	ctx := context.Background()
	pttls := func() []time.Duration {
		var d []time.Duration
		for _, name := range []string{"a", "b"} {
			d = append(d, r.rdb.PTTL(ctx, r.ks[name].Lock).Val())
		}
		return d
	}

	require.True(t, r.multi("m", ticket(1, "m"), queue.ModeWait, "a", "b").Granted, "free: granted at once")
	for _, d := range pttls() {
		require.Greater(t, d, time.Duration(waiterTTL)*time.Millisecond, "the lease, not the waiter TTL")
	}
	r.release("a", "m")
	r.release("b", "m")

	// Granted by a hand-over: no longer than the waiter deadline, until
	// its poll claims the lease.
	require.True(t, r.lock("b", "h").Granted)
	tk := ticket(2, "n")
	require.False(t, r.multi("n", tk, queue.ModeWait, "a", "b").Granted)
	r.release("b", "h")
	require.Equal(t, "n", r.holder("a"))
	for _, d := range pttls() {
		require.LessOrEqual(t, d, time.Duration(waiterTTL)*time.Millisecond, "a hand-over is bounded by the waiter deadline")
	}
	require.True(t, r.multi("n", tk, queue.ModeWait, "a", "b").Granted)
	for _, d := range pttls() {
		require.Greater(t, d, time.Duration(waiterTTL)*time.Millisecond, "the claim: the lease")
	}
}

// One release call of several holds ends them all before it hands any
// over: a ticket waiting for two of them is granted both, and a lock it
// granted is not handed again to the next in its line. Each hold keeps
// its own receipt: a hold's release sent again alone under its call id
// answers what the call of several answered, and releases nothing more.
func TestAReleaseOfSeveralHoldsGrantsAWaitingTicketWhole(t *testing.T) {
	r := newTicketRig(t, "a", "b", "c")
	require.True(t, r.multi("m", ticket(1, "m"), queue.ModeTry, "a", "b", "c").Granted)
	require.True(t, r.lock("c", "m").Granted, "a second level of c")
	require.False(t, r.multi("n", ticket(2, "n"), queue.ModeWait, "a", "b").Granted)
	require.False(t, r.lock("b", "s").Granted, "waits behind the ticket")

	ctx := context.Background()
	call := queue.NewID()
	var rs []lua.Releasing
	for _, k := range r.keys("a", "b", "c") {
		rs = append(rs, lua.Releasing{Keys: k, Call: call, Owner: "m", Lease: 60000, ReceiptTTL: 20000})
	}
	reps, err := lua.ReadReleaseAll(lua.Classic.ReleaseAll(rs, "").Run(ctx, r.rdb), 3)
	require.NoError(t, err)
	require.Equal(t, []queue.Released{{Count: 0}, {Count: 0}, {Count: 1}}, reps)
	require.Equal(t, "n", r.holder("a"))
	require.Equal(t, "n", r.holder("b"), "granted to the ticket, not handed on to s")
	require.Equal(t, "m", r.holder("c"), "one level of c remains")
	require.Len(t, r.line("b"), 1, "s still waits")

	for i, name := range []string{"a", "b", "c"} {
		again, err := lua.ReadRelease(lua.Classic.Release(r.ks[name], call, "m", "", 60000, 20000).Run(ctx, r.rdb))
		require.NoError(t, err)
		require.Equal(t, reps[i], again, "%s sent again alone", name)
	}
	require.Equal(t, "m", r.holder("c"), "the re-sent release of c took no level")
	again, err := lua.ReadReleaseAll(lua.Classic.ReleaseAll(rs, "").Run(ctx, r.rdb), 3)
	require.NoError(t, err)
	require.Equal(t, reps, again, "the call of several sent again")
	require.Equal(t, "m", r.holder("c"))
}

// A waiting ticket has one key, under the prefix of its locks: the server
// time it joined, then its locks' hash keys in key order, expiring with
// its waiter deadline; its time of joining is in no lock's joined set. A
// poll that keeps its place keeps that time. The grant drops the key, and
// leaves nothing of the ticket in any joined set.
func TestATicketKeepsItsTimeOfJoiningAndItsLocksInOneKey(t *testing.T) {
	r := newTicketRig(t, "a", "b", "c")
	ctx := context.Background()
	require.True(t, r.lock("b", "h").Granted)
	tk := ticket(1, "m")
	before, err := r.rdb.Time(ctx).Result()
	require.NoError(t, err)
	require.False(t, r.multi("m", tk, queue.ModeWait, "a", "b", "c").Granted)

	key := r.ks["a"].TicketKey(queue.WaiterIDOf(tk))
	require.Equal(t, strings.TrimSuffix(r.ks["a"].Lock, ":{a}")+":ticket:"+queue.WaiterIDOf(tk), key, "under the locks' prefix")
	list, err := r.rdb.LRange(ctx, key, 0, -1).Result()
	require.NoError(t, err)
	require.Len(t, list, 4)
	require.Equal(t, []string{r.ks["a"].Lock, r.ks["b"].Lock, r.ks["c"].Lock}, list[1:])
	joined, err := strconv.ParseInt(list[0], 10, 64)
	require.NoError(t, err)
	require.InDelta(t, before.UnixMilli(), joined, 1000, "the server time it joined, in ms")
	ttl, err := r.rdb.PTTL(ctx, key).Result()
	require.NoError(t, err)
	require.InDelta(t, 30*time.Second, ttl, float64(time.Second), "expires with the waiter TTL")
	for _, name := range []string{"a", "b", "c"} {
		n, err := r.rdb.ZCard(ctx, r.ks[name].Joined).Result()
		require.NoError(t, err)
		require.Zero(t, n, "%s's joined set", name)
		_, err = r.rdb.Get(ctx, r.ks[name].Lock+":ticket:"+queue.WaiterIDOf(tk)).Result()
		require.ErrorIs(t, err, redis.Nil, "no key of the ticket under %s", name)
	}

	require.False(t, r.multi("m", tk, queue.ModeWait, "a", "b", "c").Granted, "a heartbeat")
	again, err := r.rdb.LRange(ctx, key, 0, -1).Result()
	require.NoError(t, err)
	require.Equal(t, list, again, "a poll that keeps its place keeps its time")

	r.release("b", "h")
	require.Equal(t, "m", r.holder("a"))
	n, err := r.rdb.Exists(ctx, key).Result()
	require.NoError(t, err)
	require.Zero(t, n, "the grant drops the key")
	for _, name := range []string{"a", "b", "c"} {
		n, err := r.rdb.ZCard(ctx, r.ks[name].Joined).Result()
		require.NoError(t, err)
		require.Zero(t, n, "%s's joined set", name)
	}
}
