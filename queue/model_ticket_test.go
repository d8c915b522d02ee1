package queue

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The locks of the ticket tests, by hash key, in key order.
const kA, kB, kC = "m:{a}", "m:{b}", "m:{c}"

// ticketEntry returns the entry of a MultiLock call of owner: a ticket
// with waiter id "00..0<n>", the tag 0000abcd, and lease mLease.
func ticketEntry(n int, owner string) string {
	return Entry(fmt.Sprintf("%016x0000abcd%s", n, TicketVersion), mLease*time.Millisecond, owner)
}

// busy returns a server on which "h" holds each of the locks keys (token
// tok0), and a call id maker.
func busy(t *testing.T, keys ...string) (*Server, func() string) {
	s, call := NewServer(t0, mReceipt), callIDs()
	for i, k := range keys {
		require.True(t, s.Lock(k).Acquire(call(), "h", waiterEntry(100+i, "h"), mLease, mTTL, ModeTry).Granted)
	}
	return s, call
}

func TestModelTicketWaitsHoldingNothingAndIsGrantedEveryLockAtOnce(t *testing.T) {
	s, call := busy(t, kB)
	tk := ticketEntry(1, "m")
	rep := s.MultiAcquire([]string{kA, kB}, "m", tk, mLease, mTTL, ModeWait)
	assert.Equal(t, Reply{Hint: mTTL / 3, Joined: true, Position: 1, ServerTime: t0 * 1000}, rep)
	a := s.Lock(kA).State()
	assert.Nil(t, a.Hold, "a waiting ticket holds nothing, and a free lock it heads stays free")
	assert.Equal(t, []string{tk}, a.Queue)
	assert.Equal(t, map[string]TicketList{WaiterIDOf(tk): {Joined: t0, Locks: []string{kA, kB}, ExpiresAt: t0 + mTTL}}, a.Tickets,
		"the ticket's key names its locks and when it joined, expiring with its deadline")
	assert.Equal(t, a.Tickets, s.Lock(kB).State().Tickets, "one key, which names both locks")
	assert.Empty(t, a.Joined, "a ticket's time of joining is in its key alone")

	// Nobody passes it: a Lock call of a waits behind it.
	assert.Equal(t, Reply{}, s.Lock(kA).Acquire(call(), "x", waiterEntry(1, "x"), mLease, mTTL, ModeTry))
	w := s.Lock(kA).Acquire(call(), "w", waiterEntry(2, "w"), mLease, mTTL, ModeWait)
	assert.Equal(t, 2, w.Position)

	// The release of b grants the ticket both, each bounded by its waiter
	// deadline, and wakes it on the first lock's channel with both tokens.
	s.Advance(5)
	require.Equal(t, 0, s.Lock(kB).Release(call(), "h", mLease))
	for _, k := range []string{kA, kB} {
		st := s.Lock(k).State()
		assert.Equal(t, &HoldState{Owner: "m", Count: 1, Token: tokenAt(t0 + 5), Entry: tk, Since: t0 + 5, ExpiresAt: t0 + mTTL}, st.Hold, k)
		assert.Empty(t, st.Tickets, "the key is dropped")
	}
	assert.Equal(t, []Wake{{Lock: kA, Message: tk + " " + itoa(tokenAt(t0+5)) + "," + itoa(tokenAt(t0+5)) + " " + itoa((t0+5)*1000)}}, s.Drain())

	// Its poll claims them, for the full lease.
	rep = s.MultiAcquire([]string{kA, kB}, "m", tk, mLease, mTTL, ModeWait)
	assert.Equal(t, Reply{Granted: true, Token: tokenAt(t0 + 5), Count: 1, Tokens: []int64{tokenAt(t0 + 5), tokenAt(t0 + 5)}}, rep)
	assert.Equal(t, int64(t0+5+mLease), s.Lock(kB).State().Hold.ExpiresAt)
}

func TestModelTicketGrantedByItsOwnPollHoldsForItsLease(t *testing.T) {
	s := NewServer(t0, mReceipt)
	rep := s.MultiAcquire([]string{kA, kB}, "m", ticketEntry(1, "m"), mLease, mTTL, ModeWait)
	require.True(t, rep.Granted)
	assert.Equal(t, int64(t0+mLease), s.Lock(kA).State().Hold.ExpiresAt, "the lease, not the waiter TTL")
}

func TestModelTryTakesEveryLockOrNone(t *testing.T) {
	s, _ := busy(t, kC)
	assert.Equal(t, Reply{}, s.MultiAcquire([]string{kA, kB, kC}, "m", ticketEntry(1, "m"), mLease, mTTL, ModeTry))
	for _, k := range []string{kA, kB} {
		assert.Nil(t, s.Lock(k).State().Hold, "a try that fails holds nothing")
		assert.Empty(t, s.Lock(k).State().Queue, "and never queues")
	}
	rep := s.MultiAcquire([]string{kA, kB}, "m", ticketEntry(2, "m"), mLease, mTTL, ModeTry)
	assert.Equal(t, Reply{Granted: true, Token: tok0, Count: 1, Tokens: []int64{tok0, tok0}}, rep)
	assert.Equal(t, rep, s.MultiAcquire([]string{kA, kB}, "m", ticketEntry(2, "m"), mLease, mTTL, ModeTry), "re-sent: claimed")
}

// ticket_ready hands a free lock of the ticket whose live head waits for
// it alone to that waiter (its holder's lease ran out), and the ticket
// waits for it.
func TestModelReadyTicketHandsAFreeLockToItsHead(t *testing.T) {
	s, call := NewServer(t0, mReceipt), callIDs()
	require.True(t, s.Lock(kB).Acquire(call(), "h", waiterEntry(1, "h"), 20, mTTL, ModeTry).Granted)
	w := waiterEntry(2, "w")
	require.True(t, s.Lock(kB).Acquire(call(), "w", w, mLease, mTTL, ModeWait).Joined)
	s.Advance(20)
	require.Nil(t, s.Lock(kB).State().Hold, "expired; nobody was told")

	rep := s.MultiAcquire([]string{kA, kB}, "m", ticketEntry(1, "m"), mLease, mTTL, ModeWait)
	assert.False(t, rep.Granted)
	assert.Equal(t, "w", s.Lock(kB).State().Hold.Owner)
	assert.Equal(t, []Wake{{Lock: kB, Message: w + " " + itoa(tokenAt(t0+20))}}, s.Drain())
	assert.Nil(t, s.Lock(kA).State().Hold, "the ticket holds nothing")
}

func TestModelDeadTicketIsPrunedOnceItsKeyExpires(t *testing.T) {
	s, call := busy(t, kB)
	require.False(t, s.MultiAcquire([]string{kA, kB}, "m", ticketEntry(1, "m"), mLease, mTTL, ModeWait).Granted)
	s.Advance(mTTL - 1)
	assert.Equal(t, Reply{}, s.Lock(kA).Acquire(call(), "x", waiterEntry(1, "x"), mLease, mTTL, ModeTry), "still live")
	s.Advance(1)
	assert.Empty(t, s.Lock(kA).State().Tickets, "the key expired with the ticket's deadline")
	assert.True(t, s.Lock(kA).Acquire(call(), "x", waiterEntry(1, "x"), mLease, mTTL, ModeTry).Granted, "dead: pruned")
}

// A ticket granted every lock whose hold of one ran out before its claim
// gives back the others, and waits again as a fresh call.
func TestModelPartialClaimGivesBackAndWaitsAgain(t *testing.T) {
	s, call := busy(t, kB)
	tk := ticketEntry(1, "m")
	require.False(t, s.MultiAcquire([]string{kA, kB}, "m", tk, mLease, mTTL, ModeWait).Granted)
	w := waiterEntry(2, "w")
	require.True(t, s.Lock(kB).Acquire(call(), "w", w, mLease, mTTL, ModeWait).Joined)
	require.Equal(t, 0, s.Lock(kB).Release(call(), "h", mLease))
	require.True(t, s.Lock(kB).Renew("m", 2*mTTL))
	s.Advance(mTTL / 2)
	s.Lock(kB).Acquire(call(), "w", w, mLease, mTTL, ModeWait) // w's heartbeat
	// a's hold, bounded by the ticket's deadline, runs out.
	s.Advance(mTTL / 2)
	require.Nil(t, s.Lock(kA).State().Hold)
	s.Drain()

	rep := s.MultiAcquire([]string{kA, kB}, "m", tk, mLease, mTTL, ModeWait)
	assert.Equal(t, Reply{Hint: mTTL / 3, Joined: true, Position: 1, ServerTime: (t0 + mTTL) * 1000}, rep)
	assert.Equal(t, "w", s.Lock(kB).State().Hold.Owner, "b given back, to the waiter behind")
	assert.Equal(t, []string{tk}, s.Lock(kA).State().Queue)
	assert.Equal(t, []string{tk}, s.Lock(kB).State().Queue)
}

// A ticket pruned from one of its lines, which polls again, rejoins
// every line: two tickets then stand in the same order in both.
func TestModelTicketThatLostAPlaceRejoinsEveryLine(t *testing.T) {
	s, call := busy(t, kA, kB)
	t1, t2 := ticketEntry(1, "o1"), ticketEntry(2, "o2")
	require.False(t, s.MultiAcquire([]string{kA, kB}, "o1", t1, mLease, mTTL, ModeWait).Granted)
	s.Advance(mTTL / 2)
	require.False(t, s.MultiAcquire([]string{kA, kB}, "o2", t2, mLease, mTTL, ModeWait).Granted)
	s.Advance(mTTL / 2) // t1 is dead
	require.Equal(t, 0, s.Lock(kA).Release(call(), "h", mLease))
	require.Equal(t, []string{t2}, s.Lock(kA).State().Queue)
	require.Equal(t, []string{t1, t2}, s.Lock(kB).State().Queue, "not pruned from b yet")

	require.False(t, s.MultiAcquire([]string{kA, kB}, "o1", t1, mLease, mTTL, ModeWait).Granted)
	assert.Equal(t, []string{t2, t1}, s.Lock(kA).State().Queue)
	assert.Equal(t, []string{t2, t1}, s.Lock(kB).State().Queue)
	require.Equal(t, 0, s.Lock(kB).Release(call(), "h", mLease))
	assert.Equal(t, "o2", s.Lock(kA).State().Hold.Owner)
	assert.Equal(t, "o2", s.Lock(kB).State().Hold.Owner)
}

func TestModelCancelledTicketLeavesEveryLineAndGivesBackItsLocks(t *testing.T) {
	s, call := busy(t, kB)
	tk := ticketEntry(1, "m")
	require.False(t, s.MultiAcquire([]string{kA, kB}, "m", tk, mLease, mTTL, ModeWait).Granted)
	require.True(t, s.Lock(kA).Acquire(call(), "w", waiterEntry(1, "w"), mLease, mTTL, ModeWait).Joined)
	assert.False(t, s.CancelTicket([]string{kA, kB}, "m", tk))
	assert.Equal(t, "w", s.Lock(kA).State().Hold.Owner, "a goes to the waiter behind the ticket")
	for _, k := range []string{kA, kB} {
		assert.NotContains(t, s.Lock(k).State().Queue, tk)
		assert.Empty(t, s.Lock(k).State().Tickets)
	}

	// Handed its locks, then cancelled: it gives them back.
	tk2 := ticketEntry(2, "m")
	require.False(t, s.MultiAcquire([]string{kA, kB}, "m", tk2, mLease, mTTL, ModeWait).Granted)
	require.Equal(t, 0, s.Lock(kA).Release(call(), "w", mLease))
	require.Equal(t, 0, s.Lock(kB).Release(call(), "h", mLease))
	require.Equal(t, "m", s.Lock(kA).State().Hold.Owner)
	assert.True(t, s.CancelTicket([]string{kA, kB}, "m", tk2))
	assert.Nil(t, s.Lock(kA).State().Hold)
	assert.Nil(t, s.Lock(kB).State().Hold)
	assert.False(t, s.CancelTicket([]string{kA, kB}, "m", tk2), "a re-sent cancel does nothing more")
}

// A ticket's readiness check looks at no line while one of its locks is
// held: a dead waiter of a free lock of the ticket stays in line until a
// call on that lock prunes it, and the ticket's poll hint follows the
// hold.
func TestModelReadinessLooksAtNoLineWhileALockIsHeld(t *testing.T) {
	s, call := busy(t, kA)
	require.True(t, s.Lock(kC).Acquire(call(), "x", waiterEntry(1, "x"), 5, mTTL, ModeTry).Granted)
	dead := waiterEntry(2, "w")
	require.False(t, s.Lock(kC).Acquire(call(), "w", dead, mLease, 5, ModeWait).Granted)
	s.Advance(10) // c's hold ran out, and its waiter died, with no call on c

	tk := ticketEntry(1, "m")
	rep := s.MultiAcquire([]string{kA, kB, kC}, "m", tk, mLease, mTTL, ModeWait)
	assert.Equal(t, Reply{Hint: hintOf(mTTL, mLease-10), Joined: true, Position: 2, ServerTime: (t0 + 10) * 1000}, rep,
		"the hint follows a's hold")
	assert.Equal(t, []string{dead, tk}, s.Lock(kC).State().Queue, "c was not looked at")

	// A call on c prunes it; the ticket, at its head now, keeps it free.
	assert.Equal(t, Reply{}, s.Lock(kC).Acquire(call(), "y", waiterEntry(3, "y"), mLease, mTTL, ModeTry))
	assert.Equal(t, []string{tk}, s.Lock(kC).State().Queue)
	assert.Nil(t, s.Lock(kC).State().Hold)
}
