package fairlock_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/fairlock/fairlock/queue"
)

// A leader whose process is killed is replaced within its lease, by the
// candidate in line; with nobody in line, observers learn that the
// election has no leader once the lease has run out.
func TestAKilledLeaderIsReplacedWithinItsLease(t *testing.T) {
	t.Parallel()
	const lease = time.Second
	for _, waiting := range []bool{true, false} {
		t.Run(map[bool]string{true: "a candidate in line", false: "nobody in line"}[waiting], func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			name := "killed"
			leader := e.spawnHelper("campaign", name, "lease="+lease.String())
			leader.awaitGrant(t, 10*time.Second)
			views := observe(t, e.client().Election(name))
			l := views.until("the helper's leadership", leading("helper", 0))
			var next <-chan campaigned
			el := e.client(fairlock.WithLease(lease)).Election(name)
			if waiting {
				next = campaignAsync(context.Background(), el, "next")
				e.waitCandidates(name, 1)
			}
			killed := time.Now()
			leader.kill(t)
			if waiting {
				got := <-next
				require.NoError(t, got.err)
				took := time.Since(killed)
				require.Less(t, took, lease+500*time.Millisecond, "elected within the lease")
				term, err := el.Term(got.ctx)
				require.NoError(t, err)
				require.Greater(t, term, l.Term)
				views.until("the next leadership", leading("next", term))
				t.Logf("the next candidate was elected %v after the kill", took)
				require.NoError(t, el.Resign(got.ctx))
				return
			}
			views.until("no leader", noLeader)
			took := time.Since(killed)
			require.Less(t, took, lease+500*time.Millisecond, "told once the lease has run out")
			t.Logf("observers saw no leader %v after the kill", took)
		})
	}
}

// A restart that loses every key ends the leadership (its context's cause
// is ErrLeaseLost); the observer, whose connection was cut, reads again
// and sees that nobody leads, then the next leadership, under a higher
// term.
func TestAnElectionAcrossARestart(t *testing.T) {
	t.Parallel()
	e := newPrivateEnv(t)
	name := "restart"
	lease := 900 * time.Millisecond
	el := e.client(fairlock.WithLease(lease)).Election(name)
	views := observe(t, e.client().Election(name))
	lead, err := el.Campaign(soon(t), "before")
	require.NoError(t, err)
	term, err := el.Term(lead)
	require.NoError(t, err)
	views.until("the first leadership", leading("before", term))

	require.NoError(t, e.srv.Restart())
	requireDone(t, lead, 5*time.Second)
	require.ErrorIs(t, context.Cause(lead), fairlock.ErrLeaseLost)
	views.until("no leader after the restart", noLeader)

	other := e.client().Election(name)
	next, err := other.Campaign(soon(t), "after")
	require.NoError(t, err)
	nextTerm, err := other.Term(next)
	require.NoError(t, err)
	require.Greater(t, nextTerm, term, "terms rise across a restart that lost the counter")
	views.until("the leadership after the restart", leading("after", nextTerm))
	require.NoError(t, other.Resign(next))
}

// Across a failover (a Sentinel's, a Cluster master's) the election goes
// on: the candidates in line are elected in turn, terms keep rising, and
// the observer, whose connection moved to the new primary, ends with the
// final state.
func TestAnElectionAcrossAFailover(t *testing.T) {
	redistest.Slow(t)
	t.Parallel()
	const name = "failover"
	for _, tc := range []struct {
		name string
		// start returns a client factory of a deployment and the failure
		// to inject, which returns once it failed over.
		start func(t *testing.T, prefix string) (dial func() redis.UniversalClient, fail func())
	}{
		{"Sentinel", func(t *testing.T, _ string) (func() redis.UniversalClient, func()) {
			set := redistest.SentinelFor(t, 1, 3)
			return func() redis.UniversalClient { return set.Client(t) }, func() {
				old, err := set.KillPrimary(context.Background())
				require.NoError(t, err)
				_, err = set.WaitFailover(old, 30*time.Second)
				require.NoError(t, err)
			}
		}},
		{"Cluster", func(t *testing.T, prefix string) (func() redis.UniversalClient, func()) {
			cluster := redistest.ClusterFor(t, 3, 1)
			k, err := queue.Election(prefix, name)
			require.NoError(t, err)
			return func() redis.UniversalClient { return cluster.Client(t) }, func() {
				master, err := cluster.MasterOf(context.Background(), k.Lock)
				require.NoError(t, err)
				require.NoError(t, cluster.Kill(master))
				_, err = cluster.WaitFailover(k.Lock, master, 30*time.Second)
				require.NoError(t, err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			prefix := redistest.Prefix(t)
			dial, fail := tc.start(t, prefix)
			electionAcrossAFailover(t, prefix, name, dial, fail)
		})
	}
}

// electionAcrossAFailover runs TestAnElectionAcrossAFailover's election
// on the deployment dial reaches, fail failing it over with the leader
// and two candidates in line.
func electionAcrossAFailover(t *testing.T, prefix, name string, dial func() redis.UniversalClient, fail func()) {
	ctx := context.Background()
	newClient := func() *fairlock.Client {
		c, err := fairlock.New(dial(), fairlock.WithPrefix(prefix), fairlock.WithLease(3*time.Second), fairlock.WithWaiterTTL(3*time.Second))
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	a, b := newClient().Election(name), newClient().Election(name)
	views := observe(t, newClient().Election(name))
	lead, err := a.Campaign(soon(t), "a")
	require.NoError(t, err)
	term, err := a.Term(lead)
	require.NoError(t, err)
	views.until("a's leadership", leading("a", term))
	k, err := queue.Election(prefix, name)
	require.NoError(t, err)
	probe := dial()
	var waits []<-chan campaigned
	for i, v := range []string{"b1", "b2"} {
		waits = append(waits, campaignAsync(ctx, b, v))
		require.Eventually(t, func() bool { return probe.LLen(ctx, k.Queue).Val() == int64(i+1) }, 10*time.Second, 2*time.Millisecond)
	}
	fail()

	// a resigns, or had lost its leadership in the failover; either way
	// b's candidates follow, one at a time, under rising terms. They
	// follow in the order they joined only when the promoted replica had
	// their joins: a candidate whose join it missed joins again at its
	// next poll, after any that joined the new primary meanwhile (see
	// "What it does not guarantee" in docs/operations.md).
	if err := a.Resign(lead); err != nil {
		require.ErrorIs(t, err, fairlock.ErrLeaseLost)
	}
	for range waits {
		var got campaigned
		select {
		case got = <-waits[0]:
			waits[0] = nil
		case got = <-waits[1]:
			waits[1] = nil
		case <-time.After(30 * time.Second):
			t.Fatal("a candidate was not elected within 30s of the failover")
		}
		require.NoError(t, got.err)
		nt, err := b.Term(got.ctx)
		require.NoError(t, err)
		require.Greater(t, nt, term)
		term = nt
		t.Logf("%s elected under term %d", got.value, nt)
		views.until(got.value+"'s leadership", leading(got.value, nt))
		require.NoError(t, b.Resign(got.ctx))
	}
	views.until("no leader", noLeader)
	_, err = a.Leader(ctx)
	require.ErrorIs(t, err, fairlock.ErrNoLeader)
}

// A Redis user without the election's channel can neither campaign (the
// grant's news is refused: the call fails with ErrNoPermission and
// leaves nothing in Redis) nor observe.
func TestACLWithoutTheElectionsChannel(t *testing.T) {
	t.Parallel()
	srv, err := redistest.Start()
	require.NoError(t, err)
	t.Cleanup(srv.Stop)
	admin := srv.Client(t)
	line := strings.Replace(aclRules, " &fairlock:* ", " &fairlock:*:wake* ", 1)
	require.NotEqual(t, aclRules, line)
	rdb := newACLUser(t, srv.Addr, admin, line)
	t.Cleanup(func() { _ = rdb.Close() })
	c, err := fairlock.New(rdb, fairlock.WithLogger(slog.New(&logRecorder{})))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()

	_, err = c.Mutex("fine").Lock(ctx) // the wake channels are allowed
	require.NoError(t, err)
	el := c.Election("refused")
	_, err = el.Campaign(soon(t), "x")
	require.ErrorIs(t, err, fairlock.ErrNoPermission)
	t.Logf("Campaign: %v", err)
	k, err := queue.Election("fairlock", "refused")
	require.NoError(t, err)
	n, err := admin.Exists(ctx, k.Lock, k.Queue, k.Values).Result()
	require.NoError(t, err)
	require.Zero(t, n, "nothing is left in Redis")

	_, err = el.Observe(soon(t))
	require.ErrorIs(t, err, fairlock.ErrNoPermission)
	t.Logf("Observe: %v", err)
}

// A Proclaim sent while Redis restarts is sent again until Redis answers
// (within the call timeout), as a TryLock's attempt is: the value is
// written once the server is back, with the leadership it kept on disk.
func TestAProclaimRidesOutARestart(t *testing.T) {
	t.Parallel()
	srv, err := redistest.Start("--appendonly", "yes", "--appendfsync", "always")
	require.NoError(t, err)
	t.Cleanup(srv.Stop)
	e := serverEnv(t, srv)
	el := e.client().Election("restart-proclaim")
	lead, err := el.Campaign(soon(t), "before")
	require.NoError(t, err)

	srv.Kill()
	done := make(chan error, 1)
	go func() { done <- el.Proclaim(lead, "after") }()
	time.Sleep(2 * time.Second) // longer than go-redis's own retries of a refused connection
	select {
	case err := <-done:
		t.Fatalf("Proclaim returned while Redis was down: %v", err)
	default:
	}
	require.NoError(t, srv.Restart())
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Proclaim did not return within 10s of the restart")
	}
	l, err := el.Leader(soon(t))
	require.NoError(t, err)
	require.Equal(t, "after", l.Value)
	require.NoError(t, el.Resign(lead))
}
