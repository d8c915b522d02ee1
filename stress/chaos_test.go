package main

import (
	"context"
	"errors"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestChaosFlags(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string // in stderr
	}{
		{[]string{"-chaos", "crash"}, `-chaos "crash": want restart-aof, restart-empty, pause, failover, kill-primary`},
		{[]string{"-chaos", "pause", "-redis", "redis://a:1"}, "-chaos and -redis exclude each other: faults go only into servers this command starts"},
		{[]string{"-chaos", "pause", "-cluster", "a:1"}, "-chaos and -cluster exclude each other"},
		{[]string{"-chaos", "failover", "-sentinel", "a:1", "-master", "m"}, "-chaos and -sentinel exclude each other"},
		{[]string{"-chaos", "pause", "-masters", "a:1,b:2,c:3"}, "-chaos needs -masters N, not addresses"},
		{[]string{"-chaos", "failover", "-masters", "3"}, "-chaos failover acts on a primary and its replicas: not with -masters"},
		{[]string{"-chaos", "kill-primary", "-masters", "3"}, "-chaos kill-primary acts on a primary and its replicas"},
		{[]string{"-chaos", "pause", "-masters", "2"}, "-chaos with -masters needs 3 or more masters"},
		{[]string{"-chaos", "pause", "-masters", "3", "-restart-master", "1s"}, "-chaos and -restart-master exclude each other"},
		{[]string{"-every", "1s"}, "-every needs -chaos"},
		{[]string{"-chaos", "pause", "-every", "0"}, "-every 0s: want a positive duration"},
		{[]string{"-chaos", "pause", "-every", "2s..1s"}, "want 0 <= MIN <= MAX"},
		{[]string{"-chaos", "restart-aof", "-down", "1s"}, "-down needs -chaos pause"},
		{[]string{"-chaos", "pause", "-down", "0s"}, "-down 0s: want a positive duration"},
		{[]string{"-chaos", "failover", "-topology", "cluster"}, "-topology needs -chaos kill-primary"},
		{[]string{"-chaos", "kill-primary", "-topology", "ring"}, `-topology "ring": want sentinel or cluster`},
		{[]string{"-chaos", "restart-empty", "-lease", "10s"}, "-grace 10s: want longer than the 11.1s a server stays down with -chaos restart-empty"},
		{[]string{"-chaos", "pause", "-down", "10s"}, "-grace 10s: want longer than the 10s a server stays down with -chaos pause"},
	} {
		code, out, errs := runCmd(t, tt.args...)
		assert.Equal(t, exitCannotRun, code, "%q", tt.args)
		assert.Contains(t, errs, tt.want, "%q", tt.args)
		assert.Empty(t, out, "%q", tt.args)
	}

	c, err := parseFlags([]string{"-chaos", "kill-primary", "-topology", "cluster", "-every", "1s..3s"}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, span{time.Second, 3 * time.Second}, c.Every)
	assert.True(t, c.onCluster())
	_, err = parseFlags([]string{"-chaos", "restart-empty", "-lease", "10s", "-masters", "3"}, io.Discard)
	require.NoError(t, err, "a quorum's attempts do not wait for one master")
	c, err = parseFlags([]string{"-chaos", "pause"}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, span{defaultEvery, defaultEvery}, c.Every)
	assert.Equal(t, defaultDown, c.Down)
	assert.False(t, c.onCluster())

	code, _, errs := runCmd(t, "-h")
	assert.Equal(t, exitOK, code)
	for _, f := range []string{"-chaos KIND", "-every D", "-down duration", "-topology string"} {
		assert.Contains(t, errs, f)
	}
}

// fakePlan is a plan whose faults take busy each, as long as step
// records them, on targets targets, limit at once.
func fakePlan(every span, targets, limit int, busy time.Duration, fail func(n int) bool) (*chaosPlan, *sync.Map) {
	var hits sync.Map // fault number -> target
	return &chaosPlan{kind: chaosPause, every: every, targets: targets, limit: limit,
		strike: func(_ context.Context, i int, log faultLog) {
			n := 0
			log.set(func(f *fault) { n, f.Target = f.N, "s" })
			hits.Store(n, i)
			log.now(func(f *fault, t time.Time) { f.Injected = t })
			time.Sleep(busy) // the fault's length
			if fail != nil && fail(n) {
				log.fail(errors.New("no"))
				return
			}
			log.now(func(f *fault, t time.Time) { f.Back, f.Ready = t, t })
		}}, &hits
}

// Faults come one after another, each after its quiet time counted from
// the end of the one before, and none from the end of the workload on.
func TestInjectorWaitsTheQuietTimeAfterEachFault(t *testing.T) {
	p, _ := fakePlan(span{50 * time.Millisecond, 50 * time.Millisecond}, 1, 1, 30*time.Millisecond, nil)
	start := time.Now()
	in := p.start(start, start.Add(500*time.Millisecond), 1)
	<-in.done // the workload's end stops it
	fs := in.finish()
	require.NotEmpty(t, fs)
	assert.LessOrEqual(t, len(fs), 7, "50ms of quiet and 30ms of fault each, in 500ms")
	for i, f := range fs {
		assert.Equal(t, i+1, f.N)
		assert.True(t, f.Injected.Before(start.Add(500*time.Millisecond)), "fault %d after the workload", f.N)
		assert.GreaterOrEqual(t, f.InjectedAt, 0.05*float64(i+1))
		assert.Regexp(t, `^SIGSTOP at \+0\.\d\ds, SIGCONT at \+0\.\d\ds \(0\.\d\ds after\)$`, f.Outcome)
		if i > 0 {
			assert.GreaterOrEqual(t, f.Injected.Sub(fs[i-1].Back), 50*time.Millisecond, "quiet before fault %d", f.N)
		}
	}
}

// On a quorum, faults hit different masters, never more at once than the
// limit.
func TestInjectorKeepsToItsLimitOfFaultsAtOnce(t *testing.T) {
	p, hits := fakePlan(span{5 * time.Millisecond, 20 * time.Millisecond}, 5, 2, 100*time.Millisecond, nil)
	start := time.Now()
	in := p.start(start, start.Add(700*time.Millisecond), 7)
	<-in.done
	fs := in.finish()
	require.GreaterOrEqual(t, len(fs), 4)
	for _, f := range fs {
		under, targets := 0, map[int]bool{}
		for _, g := range fs {
			if !g.Injected.After(f.Injected) && g.Back.After(f.Injected) {
				under++
				i, _ := hits.Load(g.N)
				targets[i.(int)] = true
			}
		}
		assert.LessOrEqual(t, under, 2, "faults under way as fault %d came", f.N)
		assert.Len(t, targets, under, "faults under way at once hit different masters")
	}
}

// A fault that failed stops the faults: the deployment may no longer be
// what the plan assumes.
func TestInjectorStopsAfterAFaultFailed(t *testing.T) {
	p, _ := fakePlan(span{time.Millisecond, time.Millisecond}, 1, 1, 0, func(n int) bool { return n == 2 })
	in := p.start(time.Now(), time.Time{}, 1)
	<-in.done
	fs := in.finish()
	require.Len(t, fs, 2)
	assert.Empty(t, fs[0].Err)
	assert.Equal(t, "no", fs[1].Err)
	assert.Contains(t, fs[1].Outcome, "failed: no")
}

// Off a terminal, only a run of more than a minute, or of -ops, tells
// its progress; the line gives the faults and the verdicts so far.
func TestProgressOfALongRunGivesFaultsAndVerdicts(t *testing.T) {
	h := &history{}
	h.Record(attempt{Outcome: outGranted, Err: "unlock: refused"})
	h.Record(attempt{Outcome: outGranted, LeaseLost: true})
	in := &injector{faults: []*fault{{N: 1, Back: time.Now()}, {N: 2}}}
	start := time.Now()

	assert.Nil(t, startProgress(io.Discard, false, h, config{Duration: time.Minute}, start, in))
	for _, c := range []config{{Duration: 2 * time.Minute}, {Ops: 1000}} {
		p := startProgress(io.Discard, false, h, c, start, in)
		require.NotNil(t, p, "%+v", c)
		p.stop()
	}
	line := statusLine(h, config{Duration: 2 * time.Minute}, 65*time.Second, in)
	assert.Contains(t, line, " 65.0s/2m0s  2 attempts: 2 granted (0/s)")
	assert.Contains(t, line, "; 2 faults (1 over); verdicts so far: 1 error, 1 lease-lost")
	assert.NotContains(t, statusLine(h, config{Duration: 2 * time.Minute}, time.Second, nil), "faults")
}
