package fairlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock"
)

// Inspect shows an Election: its leader as the one holder, with its
// value and its term (the Token), and its candidates in line, in the
// order they will be elected, each with its value and Client.
func TestInspectShowsAnElectionsLeaderAndCandidatesWithTheirValues(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	a, b, c := e.client(fairlock.WithName("alpha")), e.client(fairlock.WithName("beta")), e.client()
	const name = "jobs"
	lead, err := a.Election(name).Campaign(ctx, "a-1")
	require.NoError(t, err)
	term, err := a.Election(name).Term(lead)
	require.NoError(t, err)
	wb := campaignAsync(ctx, b.Election(name), "b-1")
	e.waitCandidates(name, 1)
	time.Sleep(50 * time.Millisecond)
	wc := campaignAsync(ctx, c.Election(name), "c-1")
	e.waitCandidates(name, 2)

	for what, inspect := range map[string]func() (fairlock.LockState, error){
		"Client.Inspect":   func() (fairlock.LockState, error) { return e.client().Inspect(ctx, name) },
		"Election.Inspect": func() (fairlock.LockState, error) { return e.client().Election(name).Inspect(ctx) },
		"InspectAll": func() (fairlock.LockState, error) {
			all, err := e.client().InspectAll(ctx, name)
			if err == nil {
				require.Len(t, all, 1, "the election alone is in use")
			}
			return all[0], err
		},
	} {
		s, err := inspect()
		require.NoError(t, err, what)
		assert.Equal(t, name, s.Name, what)
		assert.Equal(t, fairlock.KindElection, s.Kind, what)
		assert.True(t, s.Held, what)
		assert.Equal(t, "a-1", s.Value, what)
		assert.Equal(t, term, s.Token, "%s: the leader's token is its term", what)
		assert.Equal(t, a.ID(), s.Client, what)
		assert.Equal(t, "alpha", s.ClientName, what)
		assert.Equal(t, 1, s.Count, what)
		assert.Positive(t, s.LeaseLeft, what)
		assert.GreaterOrEqual(t, s.HeldFor, 40*time.Millisecond, what)
		require.Len(t, s.Holders, 1, what)
		assert.Equal(t, "a-1", s.Holders[0].Value, what)
		assert.Equal(t, term, s.Holders[0].Token, what)
		assert.Equal(t, s.Owner, s.Holders[0].Owner, what)
		require.Len(t, s.Waiters, 2, what)
		assert.Equal(t, []fairlock.WaiterKind{fairlock.WaitsCampaign, fairlock.WaitsCampaign}, []fairlock.WaiterKind{s.Waiters[0].Kind, s.Waiters[1].Kind}, what)
		assert.Equal(t, []string{"b-1", "c-1"}, []string{s.Waiters[0].Value, s.Waiters[1].Value}, "%s: in the order of election", what)
		assert.Equal(t, []string{b.ID(), c.ID()}, []string{s.Waiters[0].Client, s.Waiters[1].Client}, what)
		assert.Equal(t, []string{"beta", ""}, []string{s.Waiters[0].ClientName, s.Waiters[1].ClientName}, what)
		assert.GreaterOrEqual(t, s.Waiters[0].WaitedFor, s.Waiters[1].WaitedFor+40*time.Millisecond, what)
		assert.Positive(t, s.Waiters[1].TimeLeft, what)
		assert.Equal(t, int64(1), s.Waiters[0].Weight, what)
		assert.Zero(t, s.Capacity, what)
	}

	// A proclaimed value, under the same term.
	require.NoError(t, a.Election(name).Proclaim(lead, "a-2"))
	s, err := b.Election(name).Inspect(ctx)
	require.NoError(t, err)
	assert.Equal(t, "a-2", s.Value)
	assert.Equal(t, term, s.Token)

	// The next leader, and its term.
	require.NoError(t, a.Election(name).Resign(lead))
	next := <-wb
	require.NoError(t, next.err)
	nextTerm, err := b.Election(name).Term(next.ctx)
	require.NoError(t, err)
	s, err = a.Election(name).Inspect(ctx)
	require.NoError(t, err)
	assert.Equal(t, "b-1", s.Value)
	assert.Equal(t, nextTerm, s.Token)
	assert.Greater(t, s.Token, term)
	assert.Equal(t, b.ID(), s.Client)
	require.Len(t, s.Waiters, 1)
	assert.Equal(t, "c-1", s.Waiters[0].Value)

	require.NoError(t, b.Election(name).Resign(next.ctx))
	last := <-wc
	require.NoError(t, last.err)
	require.NoError(t, c.Election(name).Resign(last.ctx))
	s, err = a.Election(name).Inspect(ctx)
	require.NoError(t, err)
	assert.Equal(t, fairlock.KindElection, s.Kind)
	assert.False(t, s.Held, "no leader")
	assert.Empty(t, s.Value)
	assert.Empty(t, s.Holders)
	assert.Empty(t, s.Waiters)
}

// An election without a leader: Election.Inspect reads it free; the
// name's Inspect reads a free Mutex, as for any name in no use; a bad
// name or a quorum-less handle is refused as the Election's calls are.
func TestInspectOfAnElectionWithoutALeader(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	c := e.client()
	s, err := c.Election("nobody").Inspect(ctx)
	require.NoError(t, err)
	assert.Equal(t, fairlock.KindElection, s.Kind)
	assert.Equal(t, "nobody", s.Name)
	assert.False(t, s.Held)
	assert.Empty(t, s.Holders)
	assert.Empty(t, s.Waiters)
	s, err = c.Inspect(ctx, "nobody")
	require.NoError(t, err)
	assert.Equal(t, fairlock.KindMutex, s.Kind)
	all, err := c.InspectAll(ctx, "nobody")
	require.NoError(t, err)
	assert.Empty(t, all)

	_, err = c.Election("a}b").Inspect(ctx)
	require.ErrorIs(t, err, fairlock.ErrInvalidName)
	var nilEl *fairlock.Election
	_, err = nilEl.Inspect(ctx)
	require.Error(t, err)
}

// Where a name is used by several kinds, Inspect keeps its rule (the
// first in use of Mutex, Semaphore, RWMutex, Election) and InspectAll
// gives the Election last; List names an election-only name.
func TestInspectAllGivesTheElectionAfterTheOtherKinds(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	c := e.client()
	hm, err := c.Mutex("shared").Lock(ctx)
	require.NoError(t, err)
	hr, err := c.RWMutex("shared").RLock(ctx)
	require.NoError(t, err)
	le, err := c.Election("shared").Campaign(ctx, "v")
	require.NoError(t, err)
	lo, err := c.Election("election-only").Campaign(ctx, "w")
	require.NoError(t, err)

	s, err := c.Inspect(ctx, "shared")
	require.NoError(t, err)
	assert.Equal(t, fairlock.KindMutex, s.Kind, "the first in use, in the documented order")
	all, err := c.InspectAll(ctx, "shared")
	require.NoError(t, err)
	require.Len(t, all, 3)
	assert.Equal(t, []fairlock.Kind{fairlock.KindMutex, fairlock.KindRWMutex, fairlock.KindElection}, []fairlock.Kind{all[0].Kind, all[1].Kind, all[2].Kind})
	assert.Equal(t, "v", all[2].Value)
	assert.Empty(t, all[0].Value, "a Mutex has no value")
	s, err = c.Inspect(ctx, "election-only")
	require.NoError(t, err)
	assert.Equal(t, fairlock.KindElection, s.Kind)
	assert.Equal(t, "w", s.Value)

	names, err := c.List(ctx, "")
	require.NoError(t, err)
	assert.Equal(t, []string{"election-only", "shared"}, names)

	require.NoError(t, c.Mutex("shared").Unlock(hm))
	require.NoError(t, c.RWMutex("shared").RUnlock(hr))
	require.NoError(t, c.Election("shared").Resign(le))
	require.NoError(t, c.Election("election-only").Resign(lo))
	names, err = c.List(ctx, "")
	require.NoError(t, err)
	assert.Empty(t, names)
}

// ForceResign ends the leadership whoever holds it: the former leader's
// context ends with ErrLeaseLost, the next candidate is elected under a
// higher term, and the observers are told; with nobody in line the
// election has no leader, and a second ForceResign finds nothing.
func TestForceResignHandsTheLeadershipToTheNextCandidate(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	a, b, op := e.client(), e.client(), e.client()
	const name = "forced"
	lead, err := a.Election(name).Campaign(ctx, "a")
	require.NoError(t, err)
	term, err := a.Election(name).Term(lead)
	require.NoError(t, err)
	wb := campaignAsync(ctx, b.Election(name), "b")
	e.waitCandidates(name, 1)
	octx, cancel := context.WithCancel(ctx)
	defer cancel()
	views, err := op.Election(name).Observe(octx)
	require.NoError(t, err)
	require.Equal(t, term, nextView(t, views).Term)

	removed, err := op.Election(name).ForceResign(ctx)
	require.NoError(t, err)
	require.True(t, removed)
	requireDone(t, lead, 5*time.Second)
	require.ErrorIs(t, context.Cause(lead), fairlock.ErrLeaseLost)
	next := <-wb
	require.NoError(t, next.err)
	nextTerm, err := b.Election(name).Term(next.ctx)
	require.NoError(t, err)
	require.Greater(t, nextTerm, term)
	v := nextView(t, views)
	assert.Equal(t, nextTerm, v.Term)
	assert.Equal(t, "b", v.Value)
	assert.Equal(t, b.ID(), v.Client)
	require.ErrorIs(t, a.Election(name).Proclaim(lead, "x"), fairlock.ErrNotHeld, "the former leader no longer leads")

	removed, err = op.Election(name).ForceResign(ctx)
	require.NoError(t, err)
	require.True(t, removed)
	requireDone(t, next.ctx, 5*time.Second)
	v = nextView(t, views)
	assert.False(t, v.HasLeader(), "nobody in line: no leader")
	_, err = op.Election(name).Leader(ctx)
	require.ErrorIs(t, err, fairlock.ErrNoLeader)

	removed, err = op.Election(name).ForceResign(ctx)
	require.NoError(t, err)
	assert.False(t, removed, "no leadership to end")
	_, err = e.client().Election("a}b").ForceResign(ctx)
	require.ErrorIs(t, err, fairlock.ErrInvalidName)
}
