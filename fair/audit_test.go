package fair

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock/queue"
)

// auditing turns the rig's audit on, as for a client that can fail over,
// and stops its goroutine from looking on its own: the test calls check.
func (r *rig) auditing() *audit {
	a := r.l.e.audit
	a.enabled = true
	a.mu.Lock()
	a.running = true
	a.mu.Unlock()
	return a
}

// watched returns the audit's copy of what it watches on the rig's lock.
func (a *audit) watched(l *Mutex) watchedLock {
	a.mu.Lock()
	defer a.mu.Unlock()
	w := a.recent[l.keys.Lock]
	if w == nil {
		return watchedLock{l: l}
	}
	return watchedLock{l: l, calls: append([]endedCall(nil), w.calls...)}
}

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

	a.ended(r.l, Request{Owner: "A"}, eA, nil, "")
	a.ended(r.l, Request{Owner: "B"}, eB, nil, "") // a waiter whose end was lost
	a.check(a.watched(r.l))
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
	a.ended(r.l, Request{Owner: "S", Shared: true}, entry("old", "S"), nil, "")
	a.check(a.watched(r.l))
	owner, count, _ := r.holder()
	require.Equal(t, "S", owner)
	require.Equal(t, "2", count, "levels of other calls are left alone")

	// The ended hold itself, under its token, with its last release: sent
	// again once, whatever the number of checks.
	h := &Hold{l: r.l, token: rep.Token, holdState: holdState{owner: "S", shared: true, entry: eA, lease: rigLease}}
	a.ended(r.l, Request{Owner: "S", Shared: true}, eA, h, "call-1")
	a.check(a.watched(r.l))
	a.check(a.watched(r.l))
	owner, count, _ = r.holder()
	require.Equal(t, "S", owner)
	require.Equal(t, "1", count, "one release, under one call id")
}

// The audit keeps the latest auditPerKey calls per lock, drops those older
// than its span, and indexes their entries for Unclaimed.
func TestAuditKeepsTheLatestCallsWithinItsSpan(t *testing.T) {
	r := newRig(t)
	a := r.auditing()
	for i := range auditPerKey + 10 {
		a.ended(r.l, Request{Owner: "o"}, fmt.Sprintf("e%d", i), nil, "")
	}
	w := a.watched(r.l)
	require.Len(t, w.calls, auditPerKey)
	require.Equal(t, "e10", w.calls[0].entry, "the oldest are dropped first")
	a.mu.Lock()
	require.Len(t, a.entries, auditPerKey)
	require.Zero(t, a.entries["e9"])
	require.Equal(t, 1, a.entries["e10"])
	// Age every call past the span: the next look drops them all.
	for i := range a.recent[r.l.keys.Lock].calls {
		a.recent[r.l.keys.Lock].calls[i].at = time.Now().Add(-a.span() - time.Second)
	}
	a.mu.Unlock()
	require.Equal(t, max(auditSpan, rigTTL), a.span())

	kicked := make(chan struct{}, 1)
	a.unclaimed(r.l.keys.Wake, "e11")
	select {
	case <-a.kick:
		kicked <- struct{}{}
	default:
	}
	require.Len(t, kicked, 1, "a grant to an ended call's entry makes the audit look at once")
	a.unclaimed(r.l.keys.Wake, "someone-else")
	require.Len(t, a.kick, 0, "a grant to anyone else does not")

	go a.run() // running was set by auditing
	a.moved()
	require.Eventually(t, func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return len(a.recent) == 0 && len(a.entries) == 0 && !a.running
	}, 5*time.Second, 5*time.Millisecond, "calls past the span are forgotten, and the audit stops")
}
