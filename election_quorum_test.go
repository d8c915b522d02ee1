package fairlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/internal/redistest"
)

// An election on a quorum: candidates of two quorum Clients lead in turn,
// with terms committed to a majority and rising; Leader, Inspect and an
// observer in a third Client see each leadership and value, also with a
// master stopped; Proclaim and Resign need the leadership.
func TestAnElectionOnAQuorum(t *testing.T) {
	t.Parallel()
	servers := redistest.Masters(t, 3)
	a, b := quorumOf(t, servers), quorumOf(t, servers)
	ea, eb := a.Election("q"), b.Election("q")
	views := observe(t, quorumOf(t, servers).Election("q"))
	views.until("no leader yet", noLeader)
	ctx := context.Background()

	lead, err := ea.Campaign(soon(t), "a-1")
	require.NoError(t, err)
	term, err := ea.Term(lead)
	require.NoError(t, err)
	views.until("a's leadership", leading("a-1", term))
	l, err := eb.Leader(ctx)
	require.NoError(t, err)
	require.Equal(t, "a-1", l.Value)
	require.Equal(t, term, l.Term, "the term Campaign committed is the one every reading finds")
	require.Equal(t, a.ID(), l.Client)

	require.ErrorIs(t, eb.Proclaim(ctx, "b"), fairlock.ErrNotHeld)
	require.ErrorIs(t, eb.Resign(ctx), fairlock.ErrNotHeld)
	require.NoError(t, ea.Proclaim(lead, "a-2"))
	views.until("a's new value", leading("a-2", term))

	next := campaignAsync(soon(t), eb, "b-1")
	require.Eventually(t, func() bool {
		st, err := ea.Inspect(ctx)
		return err == nil && len(st.Waiters) == 1 && st.Waiters[0].Value == "b-1"
	}, 10*time.Second, 5*time.Millisecond, "b's candidate in line on a majority")
	st, err := ea.Inspect(ctx)
	require.NoError(t, err)
	require.Equal(t, fairlock.KindElection, st.Kind)
	require.Equal(t, term, st.Token)
	// The Client's Inspect of the name finds the election in use (its
	// Mutex is free), and InspectAll gives both, the Mutex first.
	st, err = a.Inspect(ctx, "q")
	require.NoError(t, err)
	require.Equal(t, fairlock.KindElection, st.Kind)
	require.Equal(t, "a-2", st.Value)
	all, err := a.InspectAll(ctx, "q")
	require.NoError(t, err)
	require.Len(t, all, 2)
	require.Equal(t, fairlock.KindMutex, all[0].Kind)
	require.False(t, all[0].Held)
	require.Equal(t, fairlock.KindElection, all[1].Kind)
	require.Equal(t, term, all[1].Token)

	// One master stops: the majority goes on.
	servers[2].Kill()
	require.NoError(t, ea.Resign(lead))
	got := <-next
	require.NoError(t, got.err)
	bTerm, err := eb.Term(got.ctx)
	require.NoError(t, err)
	require.Greater(t, bTerm, term)
	views.until("b's leadership", leading("b-1", bTerm))
	require.NoError(t, eb.Proclaim(got.ctx, "b-2"))
	l, err = ea.Leader(ctx)
	require.NoError(t, err)
	require.Equal(t, "b-2", l.Value, "a value proclaimed on a majority is read from any majority")
	require.NoError(t, servers[2].Restart())
	require.NoError(t, eb.Resign(got.ctx))
	views.until("no leader", noLeader)
	_, err = ea.Leader(ctx)
	require.ErrorIs(t, err, fairlock.ErrNoLeader)
}
