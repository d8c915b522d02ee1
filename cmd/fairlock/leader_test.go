package main

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock"
)

// election is an election of the rig: a leader and candidates in line,
// each on a Client of its own named sched-0 (the leader), sched-1, ...,
// campaigning with the values 10.0.0.1:8080, 10.0.0.2:8080, ...
type election struct {
	name       string
	leader     *fairlock.Client
	lead       context.Context // the leadership's context
	term       int64
	candidates []*fairlock.Client
	elected    []<-chan context.Context // a candidate's leadership, when elected
}

// schedValue is the value the Client sched-i campaigns with.
func schedValue(i int) string { return fmt.Sprintf("10.0.0.%d:8080", i+1) }

// electionLine has sched-0 lead the election name, then n candidates
// line up, and waits until Redis shows them in line and knows every
// Client's name. The candidates give up when the test ends.
func (r *rig) electionLine(name string, n int) *election {
	r.t.Helper()
	ctx := context.Background()
	el := &election{name: name, leader: r.client(fairlock.WithName("sched-0"))}
	var err error
	el.lead, err = el.leader.Election(name).Campaign(ctx, schedValue(0))
	require.NoError(r.t, err)
	el.term, err = el.leader.Election(name).Term(el.lead)
	require.NoError(r.t, err)
	r.waitName(el.leader)
	for i := range n {
		c := r.client(fairlock.WithName(fmt.Sprintf("sched-%d", i+1)))
		el.candidates = append(el.candidates, c)
		el.elected = append(el.elected, r.async(func(ctx context.Context) (context.Context, error) {
			return c.Election(name).Campaign(ctx, schedValue(i+1))
		}))
		r.waitLine(el.leader, name, fairlock.KindElection, i+1)
		r.waitName(c)
	}
	return el
}

// waitName waits until Redis has the name of c (WithName), which a
// Client writes on a goroutine of its own at its first call.
func (r *rig) waitName(c *fairlock.Client) {
	r.t.Helper()
	require.Eventually(r.t, func() bool {
		return r.rdb.Exists(context.Background(), r.prefix+":client:"+c.ID()).Val() == 1
	}, 5*time.Second, 5*time.Millisecond, "the name of Client %s is never written", c.ID())
}

// clientRE is the text of the Client sched-i.
func clientRE(c *fairlock.Client, i int) string {
	return regexp.QuoteMeta(fmt.Sprintf(`client %s ("sched-%d")`, c.ID(), i))
}

func TestLeaderShowsTheLeaderAndTheCandidatesInOrder(t *testing.T) {
	t.Parallel()
	r := sharedRig(t)
	el := r.electionLine("jobs", 2)

	code, out, errs := r.cmd("leader", "jobs")
	require.Equal(t, exitOK, code, errs)
	assert.Empty(t, errs)
	lines := strings.Split(out, "\n")
	require.Len(t, lines, 6, out)
	assert.Regexp(t, `^election "jobs" at \d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} UTC \(server clock\)$`, lines[0])
	assert.Regexp(t, fmt.Sprintf(`^leader: "10\.0\.0\.1:8080"  term %d  since \d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} UTC \(for [0-9.]+m?s\)  %s  owner [0-9a-f-]{36}  lease left [0-9.]+s$`,
		el.term, clientRE(el.leader, 0)), lines[1])
	assert.Equal(t, "candidates (2, in the order they would be elected):", lines[2])
	for i := range 2 {
		assert.Regexp(t, fmt.Sprintf(`^  %d\. %s  value "10\.0\.0\.%d:8080"  waited [0-9.]+m?s  owner [0-9a-f-]{36}  [0-9.]+s left$`,
			i+1, clientRE(el.candidates[i], i+1), i+2), lines[3+i])
	}
	assert.Empty(t, lines[5])

	code, out, errs = r.cmd("leader", "-json", "jobs")
	require.Equal(t, exitOK, code, errs)
	got := decode[leaderJSON](t, out)
	assert.Equal(t, schemaVersion, got.Schema)
	assert.Equal(t, "leader", got.Command)
	assert.Equal(t, "jobs", got.Name)
	assert.WithinDuration(t, time.Now(), got.At, time.Minute, "the server's clock")
	require.NotNil(t, got.Leader)
	l := *got.Leader
	assert.Equal(t, leadershipJSON{Value: schedValue(0), Term: el.term, Since: l.Since, HeldForMS: l.HeldForMS,
		Client: el.leader.ID(), ClientName: "sched-0", Owner: l.Owner, LeaseLeftMS: l.LeaseLeftMS}, l)
	assert.Equal(t, got.At.Sub(l.Since).Milliseconds(), l.HeldForMS, "held for: the server's now less the grant")
	assert.Positive(t, l.LeaseLeftMS)
	assert.NotEmpty(t, l.Owner)
	require.Len(t, got.Candidates, 2)
	for i, cj := range got.Candidates {
		assert.Equal(t, candidateJSON{Position: i + 1, Value: schedValue(i + 1), Client: el.candidates[i].ID(),
			ClientName: fmt.Sprintf("sched-%d", i+1), Owner: cj.Owner, WaitedForMS: cj.WaitedForMS, TimeLeftMS: cj.TimeLeftMS}, cj)
		assert.Positive(t, cj.TimeLeftMS)
		assert.NotEqual(t, l.Owner, cj.Owner)
	}
	assert.GreaterOrEqual(t, got.Candidates[0].WaitedForMS, got.Candidates[1].WaitedForMS, "sched-1 joined first")

	// The next leader, once the first resigns.
	require.NoError(t, el.leader.Election("jobs").Resign(el.lead))
	granted(t, el.elected[0], "sched-1's campaign")
	code, out, errs = r.cmd("leader", "-json", "jobs")
	require.Equal(t, exitOK, code, errs)
	got = decode[leaderJSON](t, out)
	require.NotNil(t, got.Leader)
	assert.Equal(t, schedValue(1), got.Leader.Value)
	assert.Greater(t, got.Leader.Term, el.term)
	require.Len(t, got.Candidates, 1)
	assert.Equal(t, 1, got.Candidates[0].Position)
	assert.Equal(t, schedValue(2), got.Candidates[0].Value)
}

// An election without a leader: the record says so (exit status 1), in
// text and in JSON, and a long value is cut in text, whole in JSON.
func TestLeaderOfAnElectionWithoutALeaderExitsWithStatus1(t *testing.T) {
	t.Parallel()
	r := sharedRig(t)
	code, out, errs := r.cmd("leader", "nobody-leads")
	assert.Equal(t, exitNotFound, code)
	assert.Regexp(t, `^election "nobody-leads" at [^\n]+ \(server clock\)\nleader: none\nno candidates in line\n$`, out)
	assert.Contains(t, errs, `election "nobody-leads" has no leader`)

	code, out, _ = r.cmd("leader", "nobody-leads", "-json")
	assert.Equal(t, exitNotFound, code)
	got := decode[leaderJSON](t, out)
	assert.Nil(t, got.Leader)
	assert.NotNil(t, got.Candidates, "[] rather than null")
	assert.Empty(t, got.Candidates)
	assert.Contains(t, out, `"leader":null`)

	long := strings.Repeat("é", 100) // 200 bytes
	c := r.client()
	lead, err := c.Election("long").Campaign(context.Background(), long)
	require.NoError(t, err)
	code, out, errs = r.cmd("leader", "long")
	require.Equal(t, exitOK, code, errs)
	assert.Contains(t, out, `leader: "`+strings.Repeat("é", valueShown/2)+`"... (200 bytes)  term `)
	code, out, errs = r.cmd("leader", "-json", "long")
	require.Equal(t, exitOK, code, errs)
	assert.Equal(t, long, decode[leaderJSON](t, out).Leader.Value)
	require.NoError(t, c.Election("long").Resign(lead))
}

// leaderLines waits for the next line of a leader -watch -json that ok
// accepts, and returns it with the time it was written; seen counts the
// lines looked at.
func leaderLines(t *testing.T, out *syncBuffer, seen *int, within time.Duration) (leaderChangeJSON, time.Time) {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if views := out.views(); *seen < len(views) {
			*seen++
			return decode[leaderChangeJSON](t, views[*seen-1].text), views[*seen-1].at
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("no line within %v; the output:\n%s", within, out)
	return leaderChangeJSON{}, time.Time{}
}

// leader -watch writes the leadership when it starts, then one line per
// change: a new value, a new leader on a resignation and on a forced
// one, and no leader. Each change is pushed: it is written within
// milliseconds, not at a lease's end.
func TestLeaderWatchPrintsEachChange(t *testing.T) {
	t.Parallel()
	r := sharedRig(t)
	el := r.electionLine("jobs", 2)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out, errs, code := startWatch(ctx, r.args("leader", "-json", "jobs", "watch")...) // the word watch after NAME, as -watch
	seen := 0
	next := func(what string, start time.Time) leaderChangeJSON {
		t.Helper()
		l, at := leaderLines(t, out, &seen, 10*time.Second)
		require.Equal(t, schemaVersion, l.Schema)
		require.Equal(t, "leader-watch", l.Command)
		require.Equal(t, "jobs", l.Name)
		if !start.IsZero() {
			t.Logf("%s: written %v after the change began", what, at.Sub(start))
			assert.Less(t, at.Sub(start), handOverBound, what)
		}
		return l
	}
	l := next("start", time.Time{})
	assert.Equal(t, leaderChangeJSON{Schema: schemaVersion, Command: "leader-watch", Name: "jobs", Why: "start",
		Leader: &leaderViewJSON{Value: schedValue(0), Term: el.term, Since: l.Leader.Since, Client: el.leader.ID(), ClientName: "sched-0"}}, l)
	assert.WithinDuration(t, time.Now(), l.Leader.Since, time.Minute)

	start := time.Now()
	require.NoError(t, el.leader.Election("jobs").Proclaim(el.lead, "10.0.0.1:9090"))
	l = next("proclaimed", start)
	assert.Equal(t, "proclaimed", l.Why)
	assert.Equal(t, "10.0.0.1:9090", l.Leader.Value)
	assert.Equal(t, el.term, l.Leader.Term)

	start = time.Now()
	require.NoError(t, el.leader.Election("jobs").Resign(el.lead))
	lead1 := granted(t, el.elected[0], "sched-1's campaign")
	l = next("elected on a resignation", start)
	assert.Equal(t, "elected", l.Why)
	assert.Equal(t, schedValue(1), l.Leader.Value)
	assert.Greater(t, l.Leader.Term, el.term)
	assert.Equal(t, el.candidates[0].ID(), l.Leader.Client)
	assert.Equal(t, "sched-1", l.Leader.ClientName)
	term1 := l.Leader.Term

	// The operator ends sched-1's leadership: sched-2 is elected.
	start = time.Now()
	c, _, uerrs := r.cmd("unlock", "--force", "--yes", "-kind", "election", "jobs")
	require.Equal(t, exitOK, c, uerrs)
	l = next("elected on a forced resignation", start)
	assert.Equal(t, "elected", l.Why)
	assert.Equal(t, schedValue(2), l.Leader.Value)
	assert.Greater(t, l.Leader.Term, term1)
	select {
	case <-lead1.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("sched-1's leadership did not end")
	}
	lead2 := granted(t, el.elected[1], "sched-2's campaign")

	start = time.Now()
	require.NoError(t, el.candidates[1].Election("jobs").Resign(lead2))
	l = next("ended", start)
	assert.Equal(t, leaderChangeJSON{Schema: schemaVersion, Command: "leader-watch", Name: "jobs", Why: "ended"}, l)
	assert.Contains(t, out.String(), `"leader":null`)

	cancel()
	select {
	case c := <-code:
		assert.Equal(t, exitOK, c, errs.String())
	case <-time.After(10 * time.Second):
		t.Fatal("leader -watch did not end when interrupted")
	}
	assert.Empty(t, errs.String())
}

// In text, one line per change, each saying why it was written; -for
// ends the watch.
func TestLeaderWatchInTextWritesOneLinePerChange(t *testing.T) {
	t.Parallel()
	r := sharedRig(t)
	out, errs, code := startWatch(t.Context(), r.args("leader", "-watch", "-for", "3s", "idle")...)
	waitOutput(t, out, "start: no leader\n", 5*time.Second)
	c := r.client(fairlock.WithName("sched-0"))
	lead, err := c.Election("idle").Campaign(context.Background(), "a")
	require.NoError(t, err)
	waitOutput(t, out, "elected: leader \"a\"", 5*time.Second)
	require.NoError(t, c.Election("idle").Resign(lead))
	waitOutput(t, out, "ended: no leader\n", 5*time.Second)
	select {
	case got := <-code:
		assert.Equal(t, exitOK, got, errs.String())
	case <-time.After(10 * time.Second):
		t.Fatal("leader -watch did not end after -for 3s")
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	require.Len(t, lines, 3, out.String())
	assert.Regexp(t, `^elected: leader "a"  term \d+  since \d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} UTC \(server clock\)  client `+c.ID()+`( \("sched-0"\))?$`, lines[1])
}

// inspect and list show an election among the other kinds: its leader
// with its value and term, its candidates with theirs.
func TestInspectAndListShowAnElection(t *testing.T) {
	t.Parallel()
	r := sharedRig(t)
	el := r.electionLine("jobs", 2)

	code, out, errs := r.cmd("inspect", "jobs")
	require.Equal(t, exitOK, code, errs)
	assert.Contains(t, out, `lock "jobs" (election) at `)
	assert.Contains(t, out, "\nled: the holder is the leader, its token the term\n")
	assert.Regexp(t, fmt.Sprintf(`  1\. leader  owner [0-9a-f-]{36}  %s  weight 1  count 1  token %d  held for [0-9.]+m?s  lease left [0-9.]+s  value "10\.0\.0\.1:8080"\n`,
		clientRE(el.leader, 0), el.term), out)
	assert.Regexp(t, `  1\. campaign owner [0-9a-f-]{36}  `+clientRE(el.candidates[0], 1)+`  weight 1  waited [0-9.]+m?s  [0-9.]+s left  value "10\.0\.0\.2:8080"\n`+
		`  2\. campaign owner [0-9a-f-]{36}  `+clientRE(el.candidates[1], 2)+`  weight 1  waited [0-9.]+m?s  [0-9.]+s left  value "10\.0\.0\.3:8080"\n`, out)

	code, out, errs = r.cmd("inspect", "-json", "jobs")
	require.Equal(t, exitOK, code, errs)
	got := decode[inspectJSON](t, out)
	require.Len(t, got.Locks, 1)
	lk := got.Locks[0]
	assert.Equal(t, "election", lk.Kind)
	assert.Equal(t, ptr(int64(1)), lk.Capacity)
	assert.Equal(t, ptr(int64(1)), lk.Used)
	require.Len(t, lk.Holders, 1)
	assert.Equal(t, ptr(schedValue(0)), lk.Holders[0].Value)
	assert.Equal(t, el.term, lk.Holders[0].Token)
	require.Len(t, lk.Waiters, 2)
	for i, w := range lk.Waiters {
		assert.Equal(t, "campaign", w.Kind)
		assert.Equal(t, ptr(schedValue(i+1)), w.Value)
		assert.Equal(t, el.candidates[i].ID(), w.Client)
	}
}

func TestInspectShowsNoValueForOtherKinds(t *testing.T) {
	t.Parallel()
	r := sharedRig(t)
	r.lineUp("plain", 1)
	r.electionLine("plain", 1)
	code, out, errs := r.cmd("inspect", "-json", "plain")
	require.Equal(t, exitOK, code, errs)
	got := decode[inspectJSON](t, out)
	require.Len(t, got.Locks, 2)
	assert.Equal(t, []string{"mutex", "election"}, []string{got.Locks[0].Kind, got.Locks[1].Kind}, "the election after the other kinds")
	assert.Nil(t, got.Locks[0].Holders[0].Value, "a Mutex's holder has no value")
	assert.Nil(t, got.Locks[0].Waiters[0].Value)
	assert.Equal(t, ptr(schedValue(0)), got.Locks[1].Holders[0].Value)
	assert.Equal(t, ptr(schedValue(1)), got.Locks[1].Waiters[0].Value)

	code, out, errs = r.cmd("list", "plain")
	require.Equal(t, exitOK, code, errs)
	assert.Equal(t, strings.Join([]string{
		"NAME   KIND      USE     HOLDERS  WAITERS",
		"plain  mutex     held    1        1",
		"plain  election  leader  1        1",
	}, "\n")+"\n", out)
}

// watch draws an election's changes at once: a new leader (published on
// the election's wake channel and its leader channel) and a new value
// (on its leader channel only).
func TestWatchShowsAnElectionsChangesAtOnce(t *testing.T) {
	t.Parallel()
	r := sharedRig(t)
	el := r.electionLine("jobs", 1)
	w := r.watch("-every", "1m", "jobs")
	leads := func(client, value string) func(watchJSON) bool {
		return func(v watchJSON) bool {
			return len(v.Locks) == 1 && len(v.Locks[0].Holders) == 1 && v.Locks[0].Holders[0].Client == client &&
				*v.Locks[0].Holders[0].Value == value
		}
	}
	start := time.Now()
	require.NoError(t, el.leader.Election("jobs").Proclaim(el.lead, "10.0.0.1:9090"))
	v, at := w.next(leads(el.leader.ID(), "10.0.0.1:9090"), 10*time.Second)
	handedOver(t, "election, a new value", start, v, at)

	start = time.Now()
	require.NoError(t, el.leader.Election("jobs").Resign(el.lead))
	v, at = w.next(leads(el.candidates[0].ID(), schedValue(1)), 10*time.Second)
	handedOver(t, "election, a new leader", start, v, at)
	assert.Equal(t, "election", v.Locks[0].Kind)
	assert.Empty(t, v.Locks[0].Waiters)
}

// unlock ends an election's leadership, whoever holds it: the first
// candidate is elected, the former leader's context ends, and the output
// speaks of terms.
func TestUnlockOfAnElectionElectsTheNextCandidate(t *testing.T) {
	t.Parallel()
	r := sharedRig(t)
	el := r.electionLine("jobs", 1)

	code, out, errs := r.cmd("unlock", "--force", "jobs")
	assert.Equal(t, exitError, code)
	assert.Empty(t, out)
	assert.Regexp(t, fmt.Sprintf(`refused without --yes: it would remove the hold of election "jobs" \(owner [0-9a-f-]{36}, client %s \("sched-0"\), the leader, value "10\.0\.0\.1:8080", 1 level\(s\), token %d, held for `,
		el.leader.ID(), el.term), errs)
	assert.Regexp(t, `the first candidate \(owner [0-9a-f-]{36}, client `+el.candidates[0].ID()+`, value "10\.0\.0\.2:8080"\) would be elected`, errs)
	assert.Contains(t, errs, "(it may still act as the leader beside the next one)")
	assert.Contains(t, errs, fmt.Sprintf("refuses the former\nleader (term %d)", el.term))
	st, err := el.leader.Election("jobs").Inspect(t.Context())
	require.NoError(t, err)
	assert.Equal(t, el.term, st.Token, "nothing removed")

	code, out, errs = r.cmd("unlock", "--force", "--yes", "-json", "-owner", "someone-else", "jobs")
	assert.Equal(t, exitNotFound, code)
	assert.Contains(t, errs, `election "jobs" is held by owner `)
	assert.False(t, decode[unlockJSON](t, out).Removed)

	code, out, errs = r.cmd("unlock", "--force", "--yes", "-json", "jobs")
	require.Equal(t, exitOK, code, errs)
	got := decode[unlockJSON](t, out)
	assert.True(t, got.Removed)
	assert.Equal(t, ptr("election"), got.Kind)
	require.NotNil(t, got.Holder)
	assert.Equal(t, ptr(schedValue(0)), got.Holder.Value)
	assert.Equal(t, el.term, got.Holder.Token)
	require.NotNil(t, got.Next)
	assert.Equal(t, "campaign", got.Next.Kind)
	assert.Equal(t, ptr(schedValue(1)), got.Next.Value)

	lead := granted(t, el.elected[0], "the first candidate")
	term, err := el.candidates[0].Election("jobs").Term(lead)
	require.NoError(t, err)
	assert.Greater(t, term, el.term)
	select {
	case <-el.lead.Done():
		require.ErrorIs(t, context.Cause(el.lead), fairlock.ErrLeaseLost)
	case <-time.After(10 * time.Second):
		t.Fatal("the former leader's context did not end")
	}

	require.NoError(t, el.candidates[0].Election("jobs").Resign(lead))
	code, _, errs = r.cmd("unlock", "--force", "--yes", "-kind", "election", "jobs")
	assert.Equal(t, exitNotFound, code)
	assert.Contains(t, errs, `no election "jobs" is held`)
}
