package fairlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock"
)

// observeAll collects every view an Observe of el sends until the test
// ends; views returns those seen so far.
type viewLog struct {
	t  *testing.T
	ch <-chan fairlock.Leadership
}

func observe(t *testing.T, el *fairlock.Election) *viewLog {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ch, err := el.Observe(ctx)
	require.NoError(t, err)
	return &viewLog{t: t, ch: ch}
}

// until receives views until one satisfies ok, and returns it; every view
// on the way must not go backwards from the ones before it.
func (v *viewLog) until(what string, ok func(fairlock.Leadership) bool) fairlock.Leadership {
	v.t.Helper()
	deadline := time.After(10 * time.Second)
	var top int64
	for {
		select {
		case l, open := <-v.ch:
			require.True(v.t, open, "the observer's channel closed while waiting for %s", what)
			if l.HasLeader() {
				require.GreaterOrEqual(v.t, l.Term, top, "a view went backwards")
				top = l.Term
			}
			if ok(l) {
				return l
			}
		case <-deadline:
			v.t.Fatalf("no view of %s within 10s", what)
		}
	}
}

// leading returns a test of a view: led by value under term (any term when
// 0).
func leading(value string, term int64) func(fairlock.Leadership) bool {
	return func(l fairlock.Leadership) bool {
		return l.HasLeader() && l.Value == value && (term == 0 || l.Term == term)
	}
}

func noLeader(l fairlock.Leadership) bool { return !l.HasLeader() }

// electionObserversSeeEveryChangeAcrossClients: candidates of two Clients
// lead in turn while an observer in a third Client sees every leadership,
// every proclaimed value and the end, pushed.
func electionObserversSeeEveryChangeAcrossClients(t *testing.T, e *env, name string) {
	a, b, o := e.client(fairlock.WithName("a")), e.client(fairlock.WithName("b")), e.client()
	ea, eb := a.Election(name), b.Election(name)
	views := observe(t, o.Election(name))
	first := views.until("the first view", func(fairlock.Leadership) bool { return true })
	require.False(t, first.HasLeader(), "nobody leads yet: %+v", first)

	lead, err := ea.Campaign(soon(t), "a-1")
	require.NoError(t, err)
	term, err := ea.Term(lead)
	require.NoError(t, err)
	l := views.until("a's leadership", leading("a-1", term))
	require.Equal(t, a.ID(), l.Client)
	require.Equal(t, "a", l.ClientName)

	require.NoError(t, ea.Proclaim(lead, "a-2"))
	views.until("a's new value", leading("a-2", term))

	next := campaignAsync(soon(t), eb, "b-1")
	e.waitCandidates(name, 1)
	require.NoError(t, ea.Resign(lead))
	got := <-next
	require.NoError(t, got.err)
	bTerm, err := eb.Term(got.ctx)
	require.NoError(t, err)
	require.Greater(t, bTerm, term)
	l = views.until("b's leadership", leading("b-1", bTerm))
	require.Equal(t, b.ID(), l.Client)

	require.NoError(t, eb.Resign(got.ctx))
	views.until("no leader", noLeader)
}

// electionLeaseLostEndsTheLeadershipAndElectsTheNext: a leadership whose
// key vanishes (a lost lease) ends the leader's context with
// ErrLeaseLost, and the candidate in line is elected within the lease;
// an observer sees it.
func electionLeaseLostEndsTheLeadershipAndElectsTheNext(t *testing.T, e *env, name string) {
	lease := 600 * time.Millisecond
	a, b := e.client(fairlock.WithLease(lease)), e.client(fairlock.WithLease(lease))
	ea, eb := a.Election(name), b.Election(name)
	views := observe(t, e.client().Election(name))
	lead, err := ea.Campaign(soon(t), "a")
	require.NoError(t, err)
	term, err := ea.Term(lead)
	require.NoError(t, err)
	views.until("a's leadership", leading("a", term))
	next := campaignAsync(soon(t), eb, "b")
	e.waitCandidates(name, 1)

	// The leadership's key vanishes, as when Redis loses it.
	k := e.electionKeys(name)
	lost := time.Now()
	require.NoError(t, e.rdb.Del(context.Background(), k.Lock).Err())
	requireDone(t, lead, 2*lease)
	require.ErrorIs(t, context.Cause(lead), fairlock.ErrLeaseLost)
	got := <-next
	require.NoError(t, got.err)
	require.Less(t, time.Since(lost), 2*lease, "the next candidate is elected within the lease")
	bTerm, err := eb.Term(got.ctx)
	require.NoError(t, err)
	require.Greater(t, bTerm, term)
	views.until("b's leadership", leading("b", bTerm))
	require.NoError(t, eb.Resign(got.ctx))
}
