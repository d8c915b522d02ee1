package queue

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// candidateEntry returns the entry of an election's candidate of owner:
// waiter id "00..0<n>", the tag 0000abcd and the candidate version, and
// lease mLease.
func candidateEntry(n int, owner string) string {
	return Entry(fmt.Sprintf("%016x0000abcd%s", n, CandidateVersion), mLease*time.Millisecond, owner)
}

func TestModelCandidateLeadsWithItsValueAndEveryChangeIsTold(t *testing.T) {
	m, call := NewModel(t0, mReceipt), callIDs()
	a, b, c := candidateEntry(1, "a"), candidateEntry(2, "b"), candidateEntry(3, "c")
	require.True(t, m.Campaign(call(), "a", a, mLease, mTTL, ModeTry, "alpha").Granted)
	assert.Equal(t, &HoldState{Owner: "a", Count: 1, Token: tok0, Entry: a, Since: t0, ExpiresAt: t0 + mLease,
		Value: "alpha", HasValue: true}, m.State().Hold)
	assert.Equal(t, []string{LeaderMessage}, m.Drain())

	// The next candidates wait with their values beside the line. A
	// heartbeat with another value changes nothing.
	m.Campaign(call(), "b", b, mLease, mTTL, ModeWait, "beta")
	m.Campaign(call(), "c", c, mLease, mTTL, ModeWait, "gamma")
	m.Campaign(call(), "b", b, mLease, mTTL, ModeWait, "beta 2")
	assert.Equal(t, map[string]string{b: "beta", c: "gamma"}, m.State().Values)
	assert.Empty(t, m.Drain())

	// A resignation hands the leadership on with the value the next one
	// joined with: told once, before the wake message.
	m.Advance(1)
	require.Equal(t, 0, m.Release(call(), "a", 0))
	s := m.State()
	assert.Equal(t, "b", s.Hold.Owner)
	assert.Equal(t, "beta", s.Hold.Value)
	assert.Equal(t, map[string]string{c: "gamma"}, s.Values)
	assert.Equal(t, []string{LeaderMessage, wakeMessage(b, tokenAt(t0+1), t0+1)}, m.Drain())

	// A candidate that gives up takes its value away, and tells nobody.
	assert.False(t, m.Cancel("c", c))
	assert.Empty(t, m.State().Values)
	assert.Empty(t, m.Drain())

	// Only the leader, under the entry it was granted, proclaims.
	assert.True(t, m.Proclaim("b", b, "beta 3"))
	assert.Equal(t, "beta 3", m.State().Hold.Value)
	assert.Equal(t, []string{LeaderMessage}, m.Drain())
	assert.False(t, m.Proclaim("a", a, "alpha 2"), "a former leader")
	assert.False(t, m.Proclaim("b", candidateEntry(9, "b"), "beta 4"), "the leader's owner under another entry")
	assert.Equal(t, "beta 3", m.State().Hold.Value)
	assert.Empty(t, m.Drain())

	// The last leader's resignation leaves no leader, and says so.
	require.Equal(t, 0, m.Release(call(), "b", 0))
	assert.Nil(t, m.State().Hold)
	assert.Equal(t, []string{LeaderMessage}, m.Drain())

	// So does a leadership taken away by force, after the revocation.
	require.True(t, m.Campaign(call(), "a", a, mLease, mTTL, ModeTry, "alpha").Granted)
	m.Drain()
	require.True(t, m.ForceUnlock())
	assert.Equal(t, []string{Revoked(a), LeaderMessage}, m.Drain())
}

func TestModelCandidateGrantedInItsOwnCallLeadsWithThatCallsValue(t *testing.T) {
	m, call := held(t)
	a := candidateEntry(1, "a")
	m.Campaign(call(), "a", a, mLease, 2*mLease, ModeWait, "first")
	assert.Equal(t, map[string]string{a: "first"}, m.State().Values)
	// The hold expires, which nobody is told; a's next poll finds the lock
	// free with itself at the head, and takes it with that poll's value.
	m.Advance(mLease)
	require.True(t, m.Campaign(call(), "a", a, mLease, 2*mLease, ModeWait, "second").Granted)
	s := m.State()
	assert.Equal(t, "second", s.Hold.Value)
	assert.Empty(t, s.Values)
	assert.Equal(t, []string{LeaderMessage}, m.Drain(), "the call itself was granted: no wake message")
}

func TestModelCandidateWithoutAValueLeadsWithAnEmptyOne(t *testing.T) {
	m, call := held(t)
	a := candidateEntry(1, "a")
	m.Acquire(call(), "a", a, mLease, mTTL, ModeWait)
	assert.Empty(t, m.State().Values, "joined without a value")
	require.Equal(t, 0, m.Release(call(), "h", 0))
	h := m.State().Hold
	assert.Equal(t, a, h.Entry)
	assert.True(t, h.HasValue)
	assert.Empty(t, h.Value)
}

func TestModelDeadCandidateLeavesNoValueBehind(t *testing.T) {
	m, call := held(t)
	b, c := candidateEntry(2, "b"), candidateEntry(3, "c")
	m.Campaign(call(), "b", b, mLease, mTTL, ModeWait, "beta")
	m.Advance(mTTL) // b dies: its deadline passes without a poll
	m.Campaign(call(), "c", c, mLease, mTTL, ModeWait, "gamma")
	assert.Equal(t, map[string]string{b: "beta", c: "gamma"}, m.State().Values, "a dead waiter stays until it heads the line")
	require.Equal(t, 0, m.Release(call(), "h", 0))
	s := m.State()
	assert.Equal(t, c, s.Hold.Entry, "the dead head is passed over")
	assert.Equal(t, "gamma", s.Hold.Value)
	assert.Empty(t, s.Values, "and its value dropped")
}

func TestModelMutexGrantIsNoLeadership(t *testing.T) {
	m, call := NewModel(t0, mReceipt), callIDs()
	e := waiterEntry(1, "m")
	require.True(t, m.Campaign(call(), "m", e, mLease, mTTL, ModeTry, "ignored").Granted)
	assert.False(t, m.State().Hold.HasValue)
	require.Equal(t, 0, m.Release(call(), "m", 0))
	assert.Empty(t, m.Drain())
}

// On a master of a quorum, a candidate's grant is a leadership as on one
// server, and every change of the master's hold of a candidate is told:
// its grant, a new value, a committed token, and its end, even when a
// hand-over follows (which tells of its own grant first, on a release).
func TestQuorumModelCandidateLeadsAndEveryChangeOfItsHoldIsTold(t *testing.T) {
	m := NewQuorumModel(t0)
	a, b, c := candidateEntry(1, "a"), candidateEntry(2, "b"), candidateEntry(3, "c")
	leader := Wake{Message: LeaderMessage, Leader: true}
	require.Equal(t, 1, m.QTry("c1", "a", a, mLease, mTTL, ModeTry, mReceipt, 0, "alpha").State)
	h := m.State().Hold
	assert.Equal(t, HoldState{Owner: "a", Count: 1, Token: tok0, Entry: a, Since: t0, ExpiresAt: t0 + mLease,
		Value: "alpha", HasValue: true}, h.HoldState)
	assert.Equal(t, []any{int64(0), true}, []any{h.Vseq, h.HasVseq}, "a candidate's grant writes vseq 0")
	assert.Equal(t, []Wake{leader}, m.Drain())

	// The next candidates wait with their values beside the line; one
	// whose call sends none has none there, and a heartbeat with another
	// value changes nothing. The observers are not told: the holder is
	// asked to yield, as to any waiter.
	m.QJoin("b", b, mLease, mTTL, 10, 0, 0, "beta")
	m.QJoin("c", c, mLease, mTTL, 20, 0, 0, "")
	m.QJoin("b", b, mLease, mTTL, 10, 0, 0, "beta 2")
	assert.Equal(t, map[string]string{b: "beta"}, m.State().Values)
	assert.Equal(t, []Wake{{Message: a}}, m.Drain())

	// The leader proclaims under its sequence number; nobody else can.
	assert.True(t, m.QProclaim("a", a, "alpha 2", 1))
	h = m.State().Hold
	assert.Equal(t, []any{"alpha 2", int64(1), true}, []any{h.Value, h.Vseq, h.HasVseq})
	assert.Equal(t, []Wake{leader}, m.Drain())
	assert.False(t, m.QProclaim("b", b, "beta 3", 2), "a candidate in line")
	assert.False(t, m.QProclaim("a", candidateEntry(9, "a"), "alpha 3", 2), "the leader's owner under another entry")
	assert.Equal(t, "alpha 2", m.State().Hold.Value)
	assert.Empty(t, m.Drain())
	// A Proclaim that arrives after a later one (its number not above
	// the hold's vseq) writes nothing, and answers that the leadership is
	// the caller's.
	assert.True(t, m.QProclaim("a", a, "alpha 0", 1))
	assert.Equal(t, "alpha 2", m.State().Hold.Value)
	assert.Empty(t, m.Drain())

	// A committed token is the leadership's term: a new one is told.
	require.Equal(t, 1, m.QCommit("a", tok0+5, mLease, mTTL, 0).State)
	assert.Equal(t, []Wake{leader}, m.Drain())
	require.Equal(t, 1, m.QCommit("a", tok0+5, mLease, mTTL, 0).State)
	assert.Empty(t, m.Drain(), "the same token again")

	// The leader's release hands the leadership over in place: the next
	// leader's grant is told, then its wake message goes, then the end of
	// the hold that ended. The grant writes vseq 0 over the former
	// leader's, so that the next leader's first Proclaim (1) is the latest
	// value.
	m.Advance(1)
	require.Equal(t, 1, m.QRelease("r1", "a", a, tok0+5, 0, true, mTTL, mReceipt, mReceipt, 0).State)
	h = m.State().Hold
	assert.Equal(t, []any{"b", "beta", int64(0), true}, []any{h.Owner, h.Value, h.Vseq, h.HasVseq})
	assert.Empty(t, m.State().Values)
	assert.Equal(t, []Wake{leader, {Message: wakeMessage(b, tok0+6, t0+1)}, leader}, m.Drain())

	// A yield is told; the candidate joins again with its value, and,
	// heading the line, is handed a hold anew with the value of that
	// call (vseq 0).
	m.QJoin("b", b, mLease, mTTL, 10, tok0+6, 0, "beta 2")
	h = m.State().Hold
	assert.Equal(t, []any{"b", "beta 2", int64(0), true}, []any{h.Owner, h.Value, h.Vseq, h.HasVseq})
	assert.Equal(t, []Wake{leader, leader, {Message: wakeMessage(b, tok0+7, t0+1)}}, m.Drain())

	// A leader that gives up is told, and so is the next one's grant: the
	// candidate that joined with no value leads with "".
	assert.True(t, m.QCancel(b, mTTL, mReceipt, 0))
	h = m.State().Hold
	assert.Equal(t, []any{"c", "", true}, []any{h.Owner, h.Value, h.HasValue})
	assert.Equal(t, []Wake{leader, leader, {Message: wakeMessage(c, tok0+8, t0+1)}}, m.Drain())

	// A hold removed by force: its Client is told first, then the
	// observers.
	assert.True(t, m.QForce(mTTL, 0))
	assert.Nil(t, m.State().Hold)
	assert.Equal(t, []Wake{{Message: Revoked(c)}, leader}, m.Drain())
}

// A candidate that dies in a quorum lock's line takes its value away when
// a hand-over finds it dead at the head; a hold that was no leadership
// ends untold.
func TestQuorumModelDeadCandidateTakesItsValueAway(t *testing.T) {
	m := NewQuorumModel(t0)
	x, d := Entry(fmt.Sprintf("%016x0000abcd%s", 1, WakeVersion), mLease*time.Millisecond, "x"), candidateEntry(2, "d")
	require.Equal(t, 1, m.QTry("c1", "x", x, mLease, mTTL, ModeTry, mReceipt, 0, "").State)
	m.QJoin("d", d, mLease, mTTL, 10, 0, 0, "delta")
	assert.Equal(t, map[string]string{d: "delta"}, m.State().Values)
	m.Drain()
	m.Advance(mTTL + 1)
	require.Equal(t, 1, m.QRelease("r1", "x", x, 0, 0, true, mTTL, mReceipt, mReceipt, 0).State)
	s := m.State()
	assert.Nil(t, s.Hold)
	assert.Empty(t, s.Queue)
	assert.Empty(t, s.Values)
	assert.Empty(t, m.Drain())
}
