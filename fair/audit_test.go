package fair

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock/lua"
	"github.com/fairlock/fairlock/queue"
)

// auditing turns the rig's audit on, as for a client that can fail over,
// and stops its goroutine from looking on its own: the test calls lookNow.
func (r *rig) auditing() *audit {
	return r.l.e.audit.takenOver()
}

// takenOver turns the audit on and stops its goroutine from looking on
// its own: the test calls lookNow.
func (a *audit) takenOver() *audit {
	a.enabled = true
	a.mu.Lock()
	a.running = true
	a.mu.Unlock()
	return a
}

// watched returns a copy of the calls the audit watches, oldest first.
func (a *audit) watched() []*endedCall {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.calls.AppendTo(nil)
}

// lookNow makes one look at every call the audit watches.
func (a *audit) lookNow() { a.look(a.watched()) }

// A trace of an ended call with an owner id of its own is any hold of that
// owner: the audit releases every level, hands the lock on, and goes on
// along the line while the next holder is a trace too; it stops at the
// first hold that is none.
func TestAuditReleasesTracesOfItsOwnOwnersAlongTheLine(t *testing.T) {
	r := newRig(t)
	a := r.auditing()
	eA, eB, eC := entry("a", "A"), entry("b", "B"), entry("c", "C")
	require.True(t, r.acquire("A", eA, queue.ModeTry).Granted)
	r.acquire("A", "", queue.ModeReenter)
	r.acquire("A", "", queue.ModeReenter) // A holds 3 levels, as a failover may bring back
	require.False(t, r.acquire("B", eB, queue.ModeWait).Granted)
	require.False(t, r.acquire("C", eC, queue.ModeWait).Granted)

	a.ended(r.l, r.l, Request{Owner: "A"}, eA, nil, "")
	a.ended(r.l, r.l, Request{Owner: "B"}, eB, nil, "") // a waiter whose end was lost
	a.lookNow()
	owner, count, entry := r.holder()
	require.Equal(t, "C", owner, "A's levels and B's hand-over released in turn; C is no trace")
	require.Equal(t, eC, entry)
	require.Equal(t, "1", count)
}

// For a shared owner id, only the ended hold under its token (its last
// release sent again, once) and a hand-over to the call's own entry are
// traces; other levels and holds of the owner are left alone.
func TestAuditLeavesOtherHoldsOfASharedOwnerAlone(t *testing.T) {
	r := newRig(t)
	a := r.auditing()
	eA, eA2 := entry("a", "S"), entry("a2", "S")
	rep := r.acquire("S", eA, queue.ModeTry)
	require.True(t, rep.Granted)
	// Another call shares the owner id and holds a level of the same hold.
	r.acquire("S", eA2, queue.ModeTry)

	// An ended call of S under another token and entry: no trace.
	a.ended(r.l, r.l, Request{Owner: "S", Shared: true}, entry("old", "S"), nil, "")
	a.lookNow()
	owner, count, _ := r.holder()
	require.Equal(t, "S", owner)
	require.Equal(t, "2", count, "levels of other calls are left alone")

	// The ended hold itself, under its token, with its last release: sent
	// again once, whatever the number of checks.
	h := &Hold{l: r.l, token: rep.Token, holdState: holdState{owner: "S", shared: true, entry: eA, lease: rigLease}}
	a.ended(r.l, r.l, Request{Owner: "S", Shared: true}, eA, h, "call-1")
	a.lookNow()
	a.lookNow()
	owner, count, _ = r.holder()
	require.Equal(t, "S", owner)
	require.Equal(t, "1", count, "one release, under one call id")
}

// The audit watches the latest auditMax calls of the engine, whatever
// their locks, in a ring sized for what it holds: a burst of calls on
// many names leaves it at auditMax, the calls past the span are dropped
// by the next look, and the ring then holds no memory. A grant to the
// entry of a watched call, and only to one, makes it look at once.
func TestAuditWatchesTheLatestCallsWithinItsSpanAndThenNothing(t *testing.T) {
	r := newRig(t)
	a := r.auditing()
	const burst = 3*auditMax + 10
	for i := range burst {
		l := r.l.e.Mutex(queue.Keys{Lock: fmt.Sprintf("p:{n%d}", i)}) // a name of its own each
		a.ended(l, l, Request{Owner: "o"}, fmt.Sprintf("e%d", i), nil, "")
	}
	calls := a.watched()
	require.Len(t, calls, auditMax)
	require.Equal(t, fmt.Sprintf("e%d", burst-auditMax), calls[0].entry, "the oldest are dropped first")
	require.Equal(t, fmt.Sprintf("e%d", burst-1), calls[auditMax-1].entry)
	a.mu.Lock()
	require.LessOrEqual(t, a.calls.Cap(), 2*auditMax, "the ring holds what it watches, not the burst")
	a.mu.Unlock()

	kicked := func() bool {
		select {
		case <-a.kick:
			return true
		default:
			return false
		}
	}
	a.unclaimed(r.l.keys.Wake, fmt.Sprintf("e%d", burst-1))
	require.True(t, kicked(), "a grant to a watched call's entry makes the audit look at once")
	a.unclaimed(r.l.keys.Wake, "e9")
	require.False(t, kicked(), "a forgotten call's entry does not")
	a.unclaimed(r.l.keys.Wake, "someone-else")
	require.False(t, kicked(), "nor does anyone else's")

	// Age every call past the span: the next look drops them all.
	a.mu.Lock()
	for range a.calls.Len() {
		c := a.calls.Pop()
		c.at = time.Now().Add(-a.span() - time.Second)
		a.calls.Push(c)
	}
	a.mu.Unlock()
	require.Equal(t, max(auditSpan, rigTTL), a.span())
	go a.run() // running was set by auditing
	a.moved()
	require.Eventually(t, func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.calls.Len() == 0 && a.calls.Cap() == 0 && !a.running
	}, 5*time.Second, 5*time.Millisecond, "calls past the span are forgotten, the ring let go, and the audit stops")
}

// weightedRig returns handles of one weighted lock of the rig's engine,
// of kind, with capacity (0 for a RWMutex), at each level.
func (r *rig) weighted(kind string, capacity int64, levels ...lua.Level) []*Mutex {
	keys, err := queue.Weighted("p", "lock", kind)
	require.NoError(r.t, err)
	w := NewWeights(capacity)
	ls := make([]*Mutex, len(levels))
	for i, v := range levels {
		ls[i] = r.l.e.Weighted(keys, w, v)
	}
	return ls
}

// take has l's caller owner make one call in mode under entry, and
// reports whether it holds after it.
func (r *rig) take(l *Mutex, owner, entry, mode string) bool {
	r.t.Helper()
	if entry == "" {
		entry = l.entry(Request{Owner: owner, Lease: rigLease})
	}
	rep, err := l.acquire(context.Background(), owner, entry, rigLease, mode)
	require.NoError(r.t, err)
	return rep.Granted
}

// record returns owner's record in a weighted lock's hash, "" for none.
func (r *rig) record(l *Mutex, owner string) string {
	return r.rdb.HGet(context.Background(), l.keys.Lock, "o:"+owner).Val()
}

// A write hold's owner id is its call's own, but the read levels taken
// under it share it: the audit of the ended write call releases every
// write level the owner holds, and leaves the read level alone, whose
// own ended call is one of a shared owner id.
func TestAuditReleasesAWeightedOwnersLevelsOfTheCallsKindOnly(t *testing.T) {
	r := newRig(t)
	a := r.auditing()
	ls := r.weighted(queue.KindRWMutex, 0, lua.Level{Weight: queue.RWCapacity, Excl: true}, lua.Level{Weight: 1})
	writer, reader := ls[0], ls[1]
	eW := writer.entry(Request{Owner: "X", Lease: rigLease})
	require.True(t, r.take(writer, "X", eW, queue.ModeTry))
	require.True(t, r.take(writer, "X", "", queue.ModeReenter))
	require.True(t, r.take(reader, "X", "", queue.ModeReenter), "a read level under the write hold")
	rec, err := queue.ParseHolder(r.record(writer, "X"))
	require.NoError(t, err)
	require.Equal(t, []int{1, 2}, []int{rec.Shared, rec.Excl}, "as a failover may bring it back")

	a.ended(writer, writer, Request{Owner: "X"}, eW, nil, "")
	a.lookNow()
	rec, err = queue.ParseHolder(r.record(writer, "X"))
	require.NoError(t, err)
	require.Equal(t, []int{1, 0}, []int{rec.Shared, rec.Excl}, "both write levels released, the read level kept")
	require.EqualValues(t, 1, rec.Weight, "a downgrade")
	require.True(t, r.take(reader, "R", "", queue.ModeTry), "a reader is granted beside it")

	// The read level's own call shares the owner id: only its last
	// release is a trace, sent again once under its call id.
	eR := reader.entry(Request{Owner: "X", Lease: rigLease})
	h := &Hold{l: reader, token: rec.Token, holdState: holdState{owner: "X", shared: true, entry: eR, lease: rigLease}}
	a.ended(reader, reader, Request{Owner: "X", Shared: true}, eR, h, "call-r")
	a.lookNow()
	a.lookNow()
	require.Empty(t, r.record(reader, "X"), "the read level released")
	require.NotEmpty(t, r.record(reader, "R"), "the other reader's hold is left alone")
}

// The entry of an ended call in a weighted lock's line, where it does not
// fit, holds up the waiters behind it that would: the audit takes it out
// of line, and they are granted.
func TestAuditTakesTheEntriesOfEndedCallsOutOfAWeightedLine(t *testing.T) {
	r := newRig(t)
	a := r.auditing()
	ls := r.weighted(queue.KindSemaphore, 2, lua.Level{Weight: 1}, lua.Level{Weight: 2})
	one, two := ls[0], ls[1]
	require.True(t, r.take(one, "H", "", queue.ModeTry))
	eD := two.entry(Request{Owner: "D", Lease: rigLease})
	require.False(t, r.take(two, "D", eD, queue.ModeWait))
	eW := one.entry(Request{Owner: "W", Lease: rigLease})
	require.False(t, r.take(one, "W", eW, queue.ModeWait), "W fits, but waits behind D")

	a.ended(two, two, Request{Owner: "D"}, eD, nil, "") // a waiter whose give-up was lost
	a.lookNow()
	require.Empty(t, r.record(one, "D"))
	require.NotEmpty(t, r.record(one, "W"), "W is granted once D has left")
	require.Zero(t, r.rdb.ZCard(context.Background(), one.keys.Deadline).Val(), "nobody is left in line")
}

// A ticket of an ended call that heads the line of a free lock while it
// waits for a held one holds up that free lock: the audit takes the
// ticket out of every line at once.
func TestAuditTakesAnEndedTicketOutOfEveryLine(t *testing.T) {
	r := newRig(t)
	a := r.auditing()
	ka, err := queue.For("p", "a")
	require.NoError(t, err)
	kb, err := queue.For("p", "b")
	require.NoError(t, err)
	tk := r.l.e.Ticket([]queue.Keys{ka, kb})
	ctx := context.Background()
	_, err = tk.locks[1].acquire(ctx, "H", entry("f", "H"), rigLease, queue.ModeTry)
	require.NoError(t, err)
	req := Request{Owner: "T", Lease: rigLease, Wait: true}
	eT := tk.entry(req)
	rep, err := tk.poll(ctx, req, eT, queue.ModeWait)
	require.NoError(t, err)
	require.False(t, rep.Granted, "b is held")
	rep, err = tk.locks[0].acquire(ctx, "W", entry("d", "W"), rigLease, queue.ModeWait)
	require.NoError(t, err)
	require.False(t, rep.Granted, "a is free, but the ticket heads its line")

	tk.ended(req, eT) // a ticket whose give-up was lost
	a.lookNow()
	for _, k := range []queue.Keys{ka, kb} {
		require.Zero(t, r.rdb.ZScore(ctx, k.Deadline, eT).Val(), "the ticket left the line of %s", k.Name)
	}
	owner, _ := r.rdb.HGet(ctx, ka.Lock, "owner").Result()
	require.Equal(t, "W", owner, "a is handed to the waiter behind the ticket")
}

// A closed engine's audit keeps nothing: the calls it watched when Close
// started, and those that end afterwards (the holds Close releases),
// are forgotten, since nobody looks any more.
func TestAClosedAuditKeepsNothing(t *testing.T) {
	r := newRig(t)
	a := r.l.e.audit
	a.enabled = true
	for i := range 100 {
		a.ended(r.l, r.l, Request{Owner: "o"}, fmt.Sprintf("e%d", i), nil, "")
	}
	a.mu.Lock()
	require.Equal(t, 100, a.calls.Len())
	require.True(t, a.running, "the audit looks")
	a.mu.Unlock()
	require.NoError(t, r.l.e.Close())
	empty := func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.calls.Len() == 0 && a.calls.Cap() == 0 && !a.running
	}
	require.True(t, empty(), "Close waited for the audit, which forgot its calls")
	a.ended(r.l, r.l, Request{Owner: "o"}, "late", nil, "")
	require.True(t, empty(), "a call that ends after Close is not kept")
}
