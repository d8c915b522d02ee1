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
