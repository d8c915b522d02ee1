package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/fairlock/fairlock/internal/redistest"
)

func TestMain(m *testing.M) {
	redis.SetLogger(quietSevered{os.Stderr})
	goleak.VerifyTestMain(m)
}

// schedRig is a redis-server of the test's own and the flags that point
// the command at it, under a key prefix of the test's.
type schedRig struct {
	t     *testing.T
	rdb   *redis.Client
	flags []string
}

// newSchedRig starts a redis-server for t, or skips t when none can be
// started, saying why.
func newSchedRig(t *testing.T) *schedRig {
	s, err := redistest.Start()
	if err != nil {
		t.Skipf("the schedulers need a redis-server, and none could be started: %v", err)
	}
	t.Cleanup(s.Stop)
	return &schedRig{t: t, rdb: s.Client(t), flags: []string{"-redis", "redis://" + s.Addr + "/0", "-prefix", redistest.Prefix(t)}}
}

// run runs the command with the rig's flags and args, and returns its
// config, its outcome and what it printed: the events, then the report.
func (r *schedRig) run(args ...string) (config, outcome, string) {
	r.t.Helper()
	var stderr bytes.Buffer
	c, err := parseFlags(append(append([]string{}, r.flags...), args...), &stderr)
	require.NoError(r.t, err, stderr.String())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	o, err := run(ctx, c, &out)
	require.NoError(r.t, err, out.String())
	report(&out, c, o)
	r.t.Log("\n" + out.String())
	return c, o, out.String()
}

// jobs are the jobs of a term, job-1 to job-n.
func jobs(n int) []string {
	var out []string
	for i := 1; i <= n; i++ {
		out = append(out, fmt.Sprintf("job-%d", i))
	}
	return out
}

// checkRun checks what every run must show: c.terms leaderships under
// rising terms; the store's writes as Redis has them, none of a term
// lower than one it took before, each by its term's leader, each job
// once per term and, for a term that ended in a resignation, every job;
// and every follower saw every leader elected while it was connected.
func (r *schedRig) checkRun(c config, o outcome) {
	t := r.t
	t.Helper()
	require.Len(t, o.terms, c.terms)
	leaderOf := map[int64]string{}
	for i, tm := range o.terms {
		if i > 0 {
			assert.Greater(t, tm.term, o.terms[i-1].term, "terms rise with every election")
		}
		leaderOf[tm.term] = tm.leader
	}

	st := newStore(r.rdb, c.prefix)
	inRedis, err := st.accepted(context.Background())
	require.NoError(t, err)
	assert.Equal(t, inRedis, o.accepted, "the outcome's writes are the store's")
	assert.True(t, o.rising(), "no write of a stale term was taken: %v", o.accepted)
	for _, w := range o.accepted {
		assert.Equal(t, leaderOf[w.term], w.by, "a write of term %d by its leader", w.term)
	}
	for _, tm := range o.terms {
		got := o.jobsOf(tm.term)
		assert.Len(t, slices.Compact(slices.Sorted(slices.Values(got))), len(got), "term %d ran a job twice: %v", tm.term, got)
		if tm.end == "resigned" {
			assert.Equal(t, jobs(c.jobs), got, "term %d ran every job once, in order", tm.term)
		}
	}
	refused, err := st.list(context.Background(), st.refusedLog)
	require.NoError(t, err)
	require.Len(t, refused, len(o.refused), "the refused writes are the store's")
	assert.Empty(t, o.unseen(), "every follower saw every leader")
}

// The default run: the second leader stalls in the middle of its jobs,
// cut off from Redis; its lease runs out, the next candidate is elected
// and writes under a higher term, and the stalled leader's late write of
// its old term is refused. Every other term runs each job once.
func TestAStalledLeaderIsReplacedAndItsLateWriteRefused(t *testing.T) {
	r := newSchedRig(t)
	c, o, out := r.run()
	r.checkRun(c, o)

	stalled := o.terms[c.kill-1]
	assert.Contains(t, stalled.end, "cut off from Redis")
	assert.Equal(t, jobs(c.jobs/2), o.jobsOf(stalled.term), "the jobs before the stall, and not the one it stalled in")
	require.Len(t, o.refused, 1, "the stalled leader's late write, and none other")
	late := o.refused[0]
	assert.Equal(t, write{term: stalled.term, job: fmt.Sprintf("job-%d", c.jobs/2+1), by: stalled.leader, highest: late.highest}, late)
	next := o.terms[c.kill]
	assert.GreaterOrEqual(t, late.highest, next.term, "refused for the next leader's write")
	assert.NotEqual(t, stalled.leader, next.leader)
	for _, tm := range o.terms[c.kill:] {
		assert.NotEqual(t, stalled.leader, tm.leader, "a scheduler cut off from Redis is not elected again")
	}
	for i, tm := range o.terms {
		if i != c.kill-1 {
			assert.Equal(t, "resigned", tm.end)
		}
	}
	// Its followers saw the stalled leader too, and the next.
	for s, seen := range o.seen {
		if s != stalled.leader && s != next.leader {
			assert.Contains(t, seen, stalled.term, s)
			assert.Contains(t, seen, next.term, s)
		}
	}

	assert.Contains(t, out, fmt.Sprintf("%s wakes and writes job-%d under term %d: REFUSED, the store has seen term ", stalled.leader, c.jobs/2+1, stalled.term))
	assert.Contains(t, out, fmt.Sprintf("store: %d writes accepted, in rising terms; 1 refused\n", len(o.accepted)))
	assert.Contains(t, out, "followers: every scheduler saw every leader elected while it was connected\n")
	assert.Contains(t, out, fmt.Sprintf("follows: %s leads, term %d\n", stalled.leader, stalled.term))
}

// Without a stall, every leader resigns when it has run its jobs: each
// term runs each job once, nothing is refused, and every scheduler
// leads in turn, in the order they line up.
func TestEveryLeaderResignsAndEveryTermRunsEachJobOnce(t *testing.T) {
	r := newSchedRig(t)
	c, o, out := r.run("-kill", "0", "-schedulers", "3", "-terms", "6", "-jobs", "4", "-job-time", "5ms")
	r.checkRun(c, o)
	assert.Empty(t, o.refused)
	assert.Len(t, o.accepted, c.terms*c.jobs)
	leaders := map[string]int{}
	for i, tm := range o.terms {
		assert.Equal(t, "resigned", tm.end)
		if i > 0 {
			assert.NotEqual(t, o.terms[i-1].leader, tm.leader, "a resigning leader goes to the back of the line")
		}
		leaders[tm.leader]++
	}
	assert.Equal(t, map[string]int{"scheduler-1": 2, "scheduler-2": 2, "scheduler-3": 2}, leaders, "each leads in turn")
	for s, seen := range o.seen {
		var terms []int64
		for _, x := range seen {
			if x != 0 {
				terms = append(terms, x)
			}
		}
		var want []int64
		for _, tm := range o.terms {
			want = append(want, tm.term)
		}
		assert.Equal(t, want, terms, "%s saw every leader, in order", s)
	}
	assert.Contains(t, out, "; 0 refused\n")
	assert.NotContains(t, out, "REFUSED")
	assert.Equal(t, c.terms, strings.Count(out, ", resigned\n"))
}

func TestParseFlagsRefusesWhatCannotRun(t *testing.T) {
	for _, args := range [][]string{
		{"-schedulers", "1"},
		{"-jobs", "0"},
		{"-terms", "0"},
		{"-kill", "-1"},
		{"-kill", "4", "-terms", "4"}, // nobody after the stalled leader
		{"-lease", "10ms"},
		{"-job-time", "-1ms"},
		{"-nope"},
	} {
		_, err := parseFlags(args, &bytes.Buffer{})
		assert.Error(t, err, "%v", args)
	}
	c, err := parseFlags(nil, &bytes.Buffer{})
	require.NoError(t, err)
	assert.Equal(t, "redis://127.0.0.1:6379/0", c.redisURL)
	assert.Equal(t, 2, c.kill)
}
