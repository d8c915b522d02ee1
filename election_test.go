package fairlock_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/queue"
)

// electionKeys returns the keys of the election name in e.
func (e *env) electionKeys(name string) queue.Keys {
	k, err := queue.Election(e.prefix, name)
	require.NoError(e.t, err)
	return k
}

// candidates returns the candidate entries in line for the election name.
func (e *env) candidates(name string) []string {
	q, err := e.rdb.LRange(context.Background(), e.electionKeys(name).Queue, 0, -1).Result()
	require.NoError(e.t, err)
	return q
}

// waitCandidates waits until n candidates are in line for the election.
func (e *env) waitCandidates(name string, n int) {
	e.t.Helper()
	require.Eventually(e.t, func() bool { return len(e.candidates(name)) == n },
		10*time.Second, 2*time.Millisecond, "waiting for %d candidates of %s", n, name)
}

// campaigned is what a background Campaign ended with.
type campaigned struct {
	ctx   context.Context
	err   error
	value string
}

// campaignAsync calls el.Campaign(ctx, value) in a goroutine.
func campaignAsync(ctx context.Context, el *fairlock.Election, value string) <-chan campaigned {
	ch := make(chan campaigned, 1)
	go func() {
		lctx, err := el.Campaign(ctx, value)
		ch <- campaigned{lctx, err, value}
	}()
	return ch
}

// nextView receives one view from ch, or fails.
func nextView(t *testing.T, ch <-chan fairlock.Leadership) fairlock.Leadership {
	t.Helper()
	select {
	case l, ok := <-ch:
		require.True(t, ok, "the observer's channel closed")
		return l
	case <-time.After(10 * time.Second):
		t.Fatal("no view within 10s")
		return fairlock.Leadership{}
	}
}

func TestElectionServesCandidatesInOrderAcrossClients(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	a, b := e.client(fairlock.WithName("alpha")), e.client(fairlock.WithName("beta"))
	ea, eb := a.Election("jobs"), b.Election("jobs")

	_, err := ea.Leader(ctx)
	require.ErrorIs(t, err, fairlock.ErrNoLeader)

	first, err := ea.Campaign(ctx, "a-1")
	require.NoError(t, err)
	term1, err := ea.Term(first)
	require.NoError(t, err)
	l, err := eb.Leader(ctx)
	require.NoError(t, err)
	require.Equal(t, "jobs", l.Election)
	require.Equal(t, "a-1", l.Value)
	require.Equal(t, term1, l.Term)
	require.Equal(t, a.ID(), l.Client)
	require.Equal(t, "alpha", l.ClientName)
	require.WithinDuration(t, time.Now(), l.Since, 5*time.Second)

	// Candidates of both Clients line up in the order they began.
	var waits []<-chan campaigned
	for i, el := range []*fairlock.Election{eb, ea, eb} {
		waits = append(waits, campaignAsync(ctx, el, []string{"b-1", "a-2", "b-2"}[i]))
		e.waitCandidates("jobs", i+1)
	}
	values, err := e.rdb.HGetAll(ctx, e.electionKeys("jobs").Values).Result()
	require.NoError(t, err)
	require.Len(t, values, 3, "each candidate's value waits beside the line")

	lead, term := first, term1
	for i, w := range waits {
		els := []*fairlock.Election{ea, eb, ea, eb}
		require.NoError(t, els[i].Resign(lead))
		requireDone(t, lead, time.Second)
		next := <-w
		require.NoError(t, next.err)
		nt, err := els[i+1].Term(next.ctx)
		require.NoError(t, err)
		require.Greater(t, nt, term, "terms rise with every election")
		l, err := ea.Leader(ctx)
		require.NoError(t, err)
		require.Equal(t, next.value, l.Value)
		require.Equal(t, nt, l.Term)
		lead, term = next.ctx, nt
	}
	require.NoError(t, eb.Resign(lead))
	_, err = ea.Leader(ctx)
	require.ErrorIs(t, err, fairlock.ErrNoLeader)
	n, err := e.rdb.Exists(ctx, e.electionKeys("jobs").Values, e.electionKeys("jobs").Lock).Result()
	require.NoError(t, err)
	require.Zero(t, n, "nothing is left in Redis")
}

func TestElectionRefusesBadValuesAndCallsWithoutLeadership(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	el := e.client().Election("v")

	for _, v := range []string{"", strings.Repeat("x", fairlock.MaxValueLen+1)} {
		_, err := el.Campaign(ctx, v)
		require.ErrorIs(t, err, fairlock.ErrInvalidValue)
	}
	require.ErrorIs(t, el.Proclaim(ctx, "x"), fairlock.ErrNotHeld)
	require.ErrorIs(t, el.Resign(ctx), fairlock.ErrNotHeld)
	_, err := el.Term(ctx)
	require.ErrorIs(t, err, fairlock.ErrNotHeld)

	big := strings.Repeat("y", fairlock.MaxValueLen)
	lead, err := el.Campaign(ctx, big)
	require.NoError(t, err)
	l, err := el.Leader(ctx)
	require.NoError(t, err)
	require.Equal(t, big, l.Value, "a value of MaxValueLen bytes is kept whole")
	require.ErrorIs(t, el.Proclaim(lead, ""), fairlock.ErrInvalidValue)
	require.ErrorIs(t, el.Proclaim(lead, big+"y"), fairlock.ErrInvalidValue)

	// Another Client's handle knows the leadership by asking Redis.
	other := e.client().Election("v")
	require.NoError(t, other.Proclaim(lead, "z"))
	l, err = other.Leader(ctx)
	require.NoError(t, err)
	require.Equal(t, "z", l.Value)

	require.NoError(t, el.Resign(lead))
	require.ErrorIs(t, el.Resign(lead), fairlock.ErrNotHeld)
	require.ErrorIs(t, el.Proclaim(lead, "z"), fairlock.ErrNotHeld)

	_, err = e.client().Election("a}b").Campaign(ctx, "x")
	require.ErrorIs(t, err, fairlock.ErrInvalidName)
	var nilEl *fairlock.Election
	_, err = nilEl.Campaign(ctx, "x")
	require.Error(t, err)
	_, err = el.Observe(nil) //nolint:staticcheck // a nil context is refused, not a panic
	require.Error(t, err)
}

func TestProclaimChangesTheValueUnderTheSameTerm(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	el := e.client().Election("p")
	lead, err := el.Campaign(ctx, "one")
	require.NoError(t, err)
	term, err := el.Term(lead)
	require.NoError(t, err)

	derived, cancel := context.WithTimeout(lead, time.Minute)
	defer cancel()
	require.NoError(t, el.Proclaim(derived, "two"), "a context derived from the leadership's carries it")
	l, err := e.client().Election("p").Leader(ctx)
	require.NoError(t, err)
	require.Equal(t, "two", l.Value)
	require.Equal(t, term, l.Term)

	// Campaign from within the leadership proclaims, and returns at once.
	again, err := el.Campaign(lead, "three")
	require.NoError(t, err)
	require.Equal(t, lead, again)
	l, err = el.Leader(ctx)
	require.NoError(t, err)
	require.Equal(t, "three", l.Value)
	require.Equal(t, term, l.Term)
	require.Empty(t, e.candidates("p"))
}

func TestACampaignWhoseContextEndsLeavesTheLine(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	el := e.client().Election("c")
	lead, err := el.Campaign(ctx, "leader")
	require.NoError(t, err)

	cctx, cancel := context.WithCancel(ctx)
	w := campaignAsync(cctx, e.client().Election("c"), "quitter")
	e.waitCandidates("c", 1)
	cancel()
	r := <-w
	require.ErrorIs(t, r.err, context.Canceled)
	require.Empty(t, e.candidates("c"), "it left the line at once")
	n, err := e.rdb.HLen(ctx, e.electionKeys("c").Values).Result()
	require.NoError(t, err)
	require.Zero(t, n, "with its value")

	require.NoError(t, el.Resign(lead))
}
