package queue

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const (
	t0       = 1_000_000 // the model's clock at the start of a test
	mLease   = 100
	mTTL     = 30
	mReceipt = 50
	tok0     = int64(t0 * tokensPerMs) // the token of a fresh grant at t0
)

// tokenAt is the token of a fresh grant at server time now (ms) when the
// counter is behind the clock.
func tokenAt(now int64) int64 { return now * tokensPerMs }

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// waiterEntry returns the entry of a waiting call of owner with waiter
// id "00..0<n>" and lease mLease.
func waiterEntry(n int, owner string) string {
	id := strconv.FormatInt(int64(n), 16)
	return Entry("0000000000000000"[len(id):]+id, mLease*time.Millisecond, owner)
}

// callIDs returns a fresh call id at every call.
func callIDs() func() string {
	n := 0
	return func() string { n++; return "call" + strconv.Itoa(n) }
}

// held returns a model in which owner "h" holds the lock (token tok0), and
// the given owners wait in line in that order, each with waiterEntry(i+1).
func held(t *testing.T, waiters ...string) (*Model, func() string) {
	m, call := NewModel(t0, mReceipt), callIDs()
	require.True(t, m.Acquire(call(), "h", waiterEntry(0, "h"), mLease, mTTL, ModeTry).Granted)
	for i, w := range waiters {
		rep := m.Acquire(call(), w, waiterEntry(i+1, w), mLease, mTTL, ModeWait)
		require.Equal(t, Reply{Hint: mTTL / 3, Joined: true, Position: i + 1, ServerTime: m.Now() * 1000}, rep, "the waiters join in order")
	}
	return m, call
}

func TestModelGrantsAFreeLockWithAFreshTokenAndNoReceipt(t *testing.T) {
	m, call := NewModel(t0, mReceipt), callIDs()
	rep := m.Acquire(call(), "o", waiterEntry(1, "o"), mLease, mTTL, ModeTry)
	assert.Equal(t, Reply{Granted: true, Token: tok0, Count: 1}, rep)
	s := m.State()
	assert.Equal(t, &HoldState{Owner: "o", Count: 1, Token: tok0, Entry: waiterEntry(1, "o"), Since: t0, ExpiresAt: t0 + mLease}, s.Hold)
	assert.Equal(t, tok0, s.LastToken)
	assert.Empty(t, s.Receipts, "a re-sent grant finds its entry in the hold")
}

func TestModelReentryKeepsTheTokenAndAFixedLeaseKeepsItsExpiry(t *testing.T) {
	m, call := held(t)
	m.Advance(10)
	assert.Equal(t, Reply{Granted: true, Token: tok0, Count: 2}, m.Acquire(call(), "h", waiterEntry(7, "h"), 0, mTTL, ModeTry))
	assert.Equal(t, int64(t0+mLease), m.State().Hold.ExpiresAt, "lease 0 keeps the expiry")
	assert.Equal(t, Reply{Granted: true, Token: tok0, Count: 3}, m.Acquire(call(), "h", waiterEntry(8, "h"), mLease, mTTL, ModeTry))
	assert.Equal(t, int64(t0+10+mLease), m.State().Hold.ExpiresAt)
	assert.Equal(t, 2, m.Release(call(), "h", 0))
	assert.Equal(t, 1, m.Release(call(), "h", 0))
	assert.Equal(t, 0, m.Release(call(), "h", 0))
	assert.Nil(t, m.State().Hold)
	assert.Equal(t, -1, m.Release(call(), "h", 0))
}

func TestModelReleaseHandsOverToTheLiveHeadAndPublishesIt(t *testing.T) {
	m, call := held(t, "a", "b")
	m.Advance(5)
	require.Equal(t, 0, m.Release(call(), "h", mLease))
	s := m.State()
	// The lock is never free between two holders, and the hand-over lasts
	// no longer than the new holder's waiter deadline.
	assert.Equal(t, &HoldState{Owner: "a", Count: 1, Token: tokenAt(t0 + 5), Entry: waiterEntry(1, "a"), Since: t0 + 5, ExpiresAt: t0 + mTTL}, s.Hold)
	assert.Equal(t, []string{waiterEntry(1, "a") + " " + itoa(tokenAt(t0+5))}, m.Drain())
	assert.Equal(t, []string{waiterEntry(2, "b")}, s.Queue)
	assert.Empty(t, m.Drain(), "drained")

	// The head missed the push: its poll claims the hold, the count stays.
	rep := m.Acquire(call(), "a", waiterEntry(1, "a"), mLease, mTTL, ModeWait)
	assert.Equal(t, Reply{Granted: true, Token: tokenAt(t0 + 5), Count: 1}, rep)
	assert.Equal(t, int64(t0+5+mLease), m.State().Hold.ExpiresAt)
}

func TestModelDeadHeadIsPrunedAtItsDeadline(t *testing.T) {
	for _, tt := range []struct {
		name  string
		after int64 // ms after the dead waiter's last poll
		owner string
	}{
		{"one ms before its deadline it is still handed the lock", mTTL - 1, "dead"},
		{"at its deadline it is pruned", mTTL, "live"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m, call := held(t, "dead", "live")
			for range tt.after {
				m.Advance(1)
				m.Acquire(call(), "live", waiterEntry(2, "live"), mLease, mTTL, ModeWait)
			}
			require.Equal(t, 0, m.Release(call(), "h", mLease))
			assert.Equal(t, tt.owner, m.State().Hold.Owner)
		})
	}
}

func TestModelDeadHeadHandedTheLockExpiresAtItsDeadline(t *testing.T) {
	m, call := held(t, "dead", "live")
	m.Advance(25)
	m.Acquire(call(), "live", waiterEntry(2, "live"), mLease, mTTL, ModeWait)
	require.Equal(t, 0, m.Release(call(), "h", mLease))
	require.Equal(t, "dead", m.State().Hold.Owner)
	// The live waiter is told to poll right after the hold expires.
	assert.Equal(t, Reply{Hint: mTTL - 25 + 1, ServerTime: (t0 + 25) * 1000}, m.Acquire(call(), "live", waiterEntry(2, "live"), mLease, mTTL, ModeWait))
	m.Advance(mTTL - 25 - 1)
	require.NotNil(t, m.State().Hold)
	m.Advance(1)
	require.Nil(t, m.State().Hold, "gone once its TTL reaches 0")
	rep := m.Acquire(call(), "live", waiterEntry(2, "live"), mLease, mTTL, ModeWait)
	assert.Equal(t, Reply{Granted: true, Token: tokenAt(t0 + mTTL), Count: 1}, rep)
}

func TestModelWaitHintIsTheHoldExpiryOrAThirdOfTheWaiterTTL(t *testing.T) {
	for _, tt := range []struct {
		lease, waiterTTL, hint int64
	}{
		{lease: 20, waiterTTL: 90, hint: 21},
		{lease: 200, waiterTTL: 90, hint: 30},
		{lease: 200, waiterTTL: 100, hint: 33},
		{lease: 200, waiterTTL: 2, hint: 1},
	} {
		m, call := NewModel(t0, mReceipt), callIDs()
		m.Acquire(call(), "h", waiterEntry(0, "h"), tt.lease, tt.waiterTTL, ModeTry)
		rep := m.Acquire(call(), "w", waiterEntry(1, "w"), mLease, tt.waiterTTL, ModeWait)
		assert.Equal(t, Reply{Hint: tt.hint, Joined: true, Position: 1, ServerTime: t0 * 1000}, rep, "%+v", tt)
		assert.Equal(t, t0+tt.waiterTTL, m.State().Deadlines[waiterEntry(1, "w")])
	}
}

func TestModelTryModeNeverEnqueuesNorJumpsTheLine(t *testing.T) {
	m, call := held(t)
	assert.Equal(t, Reply{}, m.Acquire(call(), "t", waiterEntry(5, "t"), mLease, mTTL, ModeTry))
	assert.Empty(t, m.State().Queue)

	// The holder's lease runs out while w is first in line.
	m, call = NewModel(t0, mReceipt), callIDs()
	m.Acquire(call(), "h", waiterEntry(0, "h"), 20, mTTL, ModeTry)
	m.Acquire(call(), "w", waiterEntry(1, "w"), mLease, mTTL, ModeWait)
	m.Advance(20)
	require.Nil(t, m.State().Hold)
	assert.Equal(t, Reply{}, m.Acquire(call(), "t", waiterEntry(5, "t"), mLease, mTTL, ModeTry))
	assert.Equal(t, "w", m.State().Hold.Owner, "the free lock went to the head of the line")
	assert.Equal(t, []string{waiterEntry(1, "w") + " " + itoa(tokenAt(t0+20))}, m.Drain())
}

func TestModelResentCallsAnswerFromTheirReceiptUntilItExpires(t *testing.T) {
	m := NewModel(t0, mReceipt)
	first := m.Acquire("c1", "o", waiterEntry(1, "o"), mLease, mTTL, ModeTry)
	assert.Equal(t, first, m.Acquire("c1", "o", waiterEntry(1, "o"), mLease, mTTL, ModeTry))
	assert.Equal(t, 1, m.State().Hold.Count, "a re-sent grant is not a re-entry")
	again := m.Acquire("c2", "o", waiterEntry(2, "o"), mLease, mTTL, ModeReenter)
	assert.Equal(t, Reply{Granted: true, Token: first.Token, Count: 2}, again)
	assert.Equal(t, again, m.Acquire("c2", "o", waiterEntry(2, "o"), mLease, mTTL, ModeReenter))
	assert.Equal(t, 2, m.State().Hold.Count, "a re-sent re-entry counts once")
	require.Equal(t, 1, m.Release("c3", "o", mLease))
	require.Equal(t, 0, m.Release("c4", "o", mLease))
	assert.Equal(t, 0, m.Release("c4", "o", mLease), "a re-sent final release still answers released")

	m.Advance(mReceipt - 1)
	assert.Len(t, m.State().Receipts, 3)
	m.Advance(1)
	assert.Empty(t, m.State().Receipts)
	assert.Equal(t, -1, m.Release("c4", "o", mLease))
}

func TestModelCancelGivesBackARacingHandOver(t *testing.T) {
	m, call := held(t, "a", "b")
	require.Equal(t, 0, m.Release(call(), "h", mLease))
	m.Drain()
	assert.True(t, m.Cancel("a", waiterEntry(1, "a")))
	assert.Equal(t, "b", m.State().Hold.Owner)
	assert.Equal(t, []string{waiterEntry(2, "b") + " " + itoa(tok0+2)}, m.Drain(), "the same ms: the counter + 1")
	assert.False(t, m.Cancel("a", waiterEntry(1, "a")), "a re-sent cancel does nothing more")
	assert.Equal(t, "b", m.State().Hold.Owner)
	assert.Empty(t, m.State().Queue)
	assert.Empty(t, m.State().Deadlines)
}

func TestModelCancelOfASharedOwnerKeepsItsOtherLevels(t *testing.T) {
	m, call := held(t, "o")
	require.Equal(t, 0, m.Release(call(), "h", mLease))
	// Another call of the same owner re-enters the hold handed to the first.
	assert.Equal(t, Reply{Granted: true, Token: tok0 + 1, Count: 2}, m.Acquire(call(), "o", waiterEntry(9, "o"), mLease, mTTL, ModeTry))
	assert.True(t, m.Cancel("o", waiterEntry(1, "o")))
	assert.Equal(t, &HoldState{Owner: "o", Count: 1, Token: tok0 + 1, Since: t0, ExpiresAt: t0 + mLease}, m.State().Hold, "the entry is forgotten")
	assert.False(t, m.Cancel("o", waiterEntry(1, "o")))
	assert.Equal(t, 1, m.State().Hold.Count)
}

func TestModelForceUnlockHandsOverToTheLiveHead(t *testing.T) {
	m, _ := held(t, "w")
	assert.True(t, m.ForceUnlock())
	assert.Equal(t, "w", m.State().Hold.Owner)
	assert.True(t, m.ForceUnlock())
	assert.Nil(t, m.State().Hold)
	assert.False(t, m.ForceUnlock())
	assert.Equal(t, tok0+1, m.State().LastToken)
}

func TestModelLateWaiterKeepsItsPlaceUntilItIsPruned(t *testing.T) {
	m, call := held(t, "a", "late")
	m.Advance(mTTL + 5) // both deadlines passed; nobody pruned them yet
	m.Acquire(call(), "a", waiterEntry(1, "a"), mLease, mTTL, ModeWait)
	rep := m.Acquire(call(), "late", waiterEntry(2, "late"), mLease, mTTL, ModeWait)
	assert.False(t, rep.Joined, "still in line behind a live head")
	assert.Equal(t, []string{waiterEntry(1, "a"), waiterEntry(2, "late")}, m.State().Queue)
}

func TestModelMalformedEntriesArePrunedAtTheHead(t *testing.T) {
	m, call := held(t)
	bad := "not-hex:" + waiterEntry(1, "x")
	m.Acquire(call(), "x", bad, mLease, mTTL, ModeWait)
	m.Acquire(call(), "w", waiterEntry(2, "w"), mLease, mTTL, ModeWait)
	require.Equal(t, 0, m.Release(call(), "h", mLease))
	assert.Equal(t, "w", m.State().Hold.Owner)
	assert.Empty(t, m.State().Deadlines)
}

func TestModelReentryNeverBecomesAFreshGrant(t *testing.T) {
	m := NewModel(1000, 100)
	require.True(t, m.Acquire("c1", "o", Entry("0000000000000001", 50*time.Millisecond, "o"), 50, 30, ModeTry).Granted)
	m.Advance(50) // the hold expires
	r := m.Acquire("c2", "o", Entry("0000000000000002", 0, "o"), 0, 30, ModeReenter)
	require.False(t, r.Granted)
	require.Nil(t, m.State().Hold)
	require.Zero(t, m.State().LastToken, "no token is spent: the counter went with the hold, and none is written")
}

func TestModelTokenCounterExpiresWithTheHoldItWasTakenFor(t *testing.T) {
	// A fresh grant: the counter lasts the lease, as the hold does.
	m, call := held(t, "w")
	require.Equal(t, tok0, m.State().LastToken)
	require.Equal(t, int64(t0+mLease), m.State().TokenEnd)

	// The holder renews; the counter keeps its expiry and goes while the
	// lock is still held, and the hold keeps its token.
	m.Advance(mTTL / 2)
	require.True(t, m.Renew("h", mLease))
	m.Acquire(call(), "w", waiterEntry(1, "w"), mLease, mTTL, ModeWait) // a heartbeat
	m.Advance(mLease - mTTL/2 - 1)
	require.Equal(t, tok0, m.State().LastToken, "1 ms before its expiry")
	m.Advance(1)
	s := m.State()
	require.Zero(t, s.LastToken, "gone at its expiry, while the lock is held")
	require.Zero(t, s.TokenEnd)
	require.Equal(t, tok0, s.Hold.Token)

	// The release hands over: the new token comes from the clock alone,
	// above every earlier one, and the counter lasts as long as that hold,
	// which the waiter's deadline bounds.
	require.True(t, m.Renew("h", mLease))
	m.Acquire(call(), "w", waiterEntry(1, "w"), mLease, mTTL, ModeWait)
	m.Advance(mTTL - 5)
	require.Equal(t, 0, m.Release(call(), "h", mLease))
	s = m.State()
	require.Equal(t, tokenAt(t0+mLease+mTTL-5), s.LastToken)
	require.Greater(t, s.LastToken, tok0)
	require.Equal(t, s.Hold.ExpiresAt, s.TokenEnd, "the hand-over's hold: 5 ms left of the waiter's deadline")
	require.Equal(t, int64(t0+mLease+mTTL), s.TokenEnd)

	// A grant whose hold expires at once (lease 0) keeps the counter 1 ms,
	// so a grant in the same ms still gets a higher token.
	m.Advance(5)
	require.Nil(t, m.State().Hold)
	now := m.Now()
	first := m.Acquire(call(), "o", waiterEntry(2, "o"), 0, mTTL, ModeTry)
	require.Equal(t, Reply{Granted: true, Token: tokenAt(now), Count: 1}, first)
	require.Nil(t, m.State().Hold)
	require.Equal(t, now+1, m.State().TokenEnd)
	second := m.Acquire(call(), "o", waiterEntry(3, "o"), mLease, mTTL, ModeTry)
	require.Equal(t, Reply{Granted: true, Token: tokenAt(now) + 1, Count: 1}, second)
}

func TestModelTokenIsTheClockOrTheCounterPlusOne(t *testing.T) {
	m, call := NewModel(t0, mReceipt), callIDs()
	grant := func() int64 {
		t.Helper()
		rep := m.Acquire(call(), "o", waiterEntry(1, "o"), mLease, mTTL, ModeTry)
		require.True(t, rep.Granted)
		require.Equal(t, 0, m.Release(call(), "o", mLease))
		require.Equal(t, rep.Token, m.State().LastToken, "the token becomes the counter")
		return rep.Token
	}
	assert.Equal(t, tok0, grant(), "the clock: now * 1000")
	assert.Equal(t, tok0+1, grant(), "within one ms: the counter + 1")
	m.Advance(1)
	assert.Equal(t, tokenAt(t0+1), grant(), "the clock again, one ms later")

	// More than 1000 grants in one ms run ahead of the clock; the counter
	// then leads until the clock catches up.
	for i := range int64(1500) {
		require.Equal(t, tokenAt(t0+1)+1+i, grant())
	}
	m.Advance(1)
	assert.Equal(t, tokenAt(t0+1)+1501, grant(), "the counter is still ahead of the clock")
	m.Advance(1)
	assert.Equal(t, tokenAt(t0+3), grant(), "the clock caught up")
}
