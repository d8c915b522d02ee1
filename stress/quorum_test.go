package main

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/fairlock/fairlock/queue"
)

func TestQuorumFlags(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string // in stderr
	}{
		{[]string{"-masters", "0"}, "0 masters: want 1 to 15"},
		{[]string{"-masters", "16"}, "16 masters: want 1 to 15"},
		{[]string{"-masters", "a:1,b"}, `"b": want a number or host:port`},
		{[]string{"-masters", "a:1,a:1"}, "a:1 given twice"},
		{[]string{"-masters", " , "}, "no address"},
		{[]string{"-masters", "3", "-redis", "redis://a:1"}, "-masters and -redis exclude each other"},
		{[]string{"-masters", "a:1,b:2,c:3", "-cluster", "d:4"}, "-masters and -cluster exclude each other"},
		{[]string{"-masters", "3", "-kind", "semaphore"}, "-masters needs -kind mutex or election"},
		{[]string{"-masters", "3", "-kind", "multilock"}, "-masters needs -kind mutex or election"},
		{[]string{"-masters", "3", "-kind", "rwmutex"}, "a quorum Client has Mutexes and Elections only"},
		{[]string{"-restart-master", "1s"}, "-restart-master needs -masters N"},
		{[]string{"-masters", "a:1,b:2,c:3", "-restart-master", "1s"}, "-restart-master needs -masters N"},
		{[]string{"-masters", "2", "-restart-master", "1s"}, "-restart-master needs -masters 3 or more"},
		{[]string{"-masters", "3", "-restart-master", "10s", "-duration", "10s"}, "not within -duration 10s"},
		{[]string{"-masters", "3", "-restart-master", "-1s"}, "-restart-master -1s: negative"},
	} {
		code, out, errs := runCmd(t, tt.args...)
		assert.Equal(t, exitCannotRun, code, "%q", tt.args)
		assert.Contains(t, errs, tt.want, "%q", tt.args)
		assert.Empty(t, out, "%q", tt.args)
	}

	c, err := parseFlags([]string{"-masters", "a:1, b:2,c:3"}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, []string{"a:1", "b:2", "c:3"}, c.Masters)
	assert.Zero(t, c.StartMasters)
	assert.True(t, c.quorum())

	c, err = parseFlags([]string{"-masters", "5", "-restart-master", "2s"}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, 5, c.StartMasters)
	assert.Empty(t, c.Masters)
	assert.Equal(t, 2*time.Second, c.RestartMaster)

	c, err = parseFlags([]string{"-masters", "3", "-kind", "election", "-restart-master", "2s"}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, runElection, c.Kind)
	assert.True(t, c.quorum())

	code, _, errs := runCmd(t, "-h")
	assert.Equal(t, exitOK, code)
	assert.Contains(t, errs, "-masters addresses")
	assert.Contains(t, errs, "-restart-master D")
}

// The masters the command starts run until it closes them; with
// -restart-master, the first is killed at its time, stays down for its
// delay, and comes back empty on its port, once.
func TestRestartMasterKillsTheFirstMasterAndRestartsItEmptyOnItsPort(t *testing.T) {
	redistest.Slow(t)
	tgt, err := startMasters(3)
	require.NoError(t, err)
	defer tgt.close()
	require.Len(t, tgt.masters, 3)
	assert.True(t, tgt.quorum())
	assert.Contains(t, tgt.String(), "quorum of 3 masters "+strings.Join(tgt.masters, ","))

	ctx := context.Background()
	rdbs := tgt.clients()
	defer func() {
		for _, r := range rdbs {
			_ = r.Close()
		}
	}()
	for _, r := range rdbs {
		require.NoError(t, r.Set(ctx, "k", "v", 0).Err())
	}

	cfg := config{RestartMaster: 50 * time.Millisecond, Lease: 100 * time.Millisecond, WaiterTTL: 100 * time.Millisecond}
	delay := restartDelay(cfg)
	start := time.Now()
	in := newChaosPlan(cfg, tgt).start(start, time.Time{}, 1)
	first := rdbs[0].(*redis.Client)
	require.Eventually(t, func() bool { return first.Exists(ctx, "k").Val() == 0 && first.Ping(ctx).Err() == nil },
		20*time.Second, 20*time.Millisecond, "master 1 never came back empty")
	faults := in.finish()

	require.Len(t, faults, 1)
	f := faults[0]
	assert.Empty(t, f.Err)
	assert.Equal(t, chaosRestartEmpty, f.Kind)
	assert.Equal(t, "master 1 ("+tgt.masters[0]+")", f.Target)
	assert.False(t, f.Injected.Before(start.Add(50*time.Millisecond).Round(0)))
	assert.False(t, f.Exited.Before(f.Injected))
	assert.GreaterOrEqual(t, f.Back.Sub(f.Injected), delay)
	o, ok := f.lostWrites()
	require.True(t, ok)
	assert.Equal(t, outage{f.Injected, f.Exited}, o)
	for _, r := range rdbs[1:] {
		assert.Equal(t, "v", r.Get(ctx, "k").Val(), "the other masters keep their keys")
	}

	var b strings.Builder
	quorumReport(tgt, &quorumCheck{Tally: bakeryTally{Pairs: 7}}).write(&b)
	(&faultSums{Kind: chaosRestartEmpty, Plan: newChaosPlan(cfg, tgt).desc, Faults: faults}).write(&b)
	assert.Contains(t, b.String(), "quorum:      3 masters ("+strings.Join(tgt.masters, ",")+", started on loopback)")
	assert.Contains(t, b.String(), "bakery:      7 pairs checked")
	assert.Contains(t, b.String(), "faults:      restart-empty of master 1 at +50ms, down "+delay.String()+": 1 injected\n")
	assert.Contains(t, b.String(), "    1. +0.")
	assert.Contains(t, b.String(), "s restart-empty master 1 ("+tgt.masters[0]+"): SIGKILL (its keys lost) at +0.")
	assert.Contains(t, b.String(), ", restarted empty at +")
}

// A restart not due by the end of the run is not made.
func TestRestartMasterDoesNothingAfterTheRun(t *testing.T) {
	cfg := config{RestartMaster: time.Hour}
	p := newChaosPlan(cfg, &target{})
	faults := p.start(time.Now(), time.Time{}, 1).finish()
	assert.Empty(t, faults)

	var b strings.Builder
	(&faultSums{Kind: p.kind, Plan: p.desc, Faults: faults}).write(&b)
	assert.Equal(t, "faults:      restart-empty of master 1 at +1h0m0s, down 1s: none injected, the run ended first\n", b.String())
}

func TestRestartDelayOutlastsTheLeaseAndTheWaiterTTL(t *testing.T) {
	for _, c := range []config{
		{Lease: 5 * time.Second, WaiterTTL: 5 * time.Second},
		{Lease: 30 * time.Second, WaiterTTL: 10 * time.Second},
		{Lease: time.Second, WaiterTTL: 8 * time.Second},
	} {
		d := restartDelay(c)
		longest := max(c.Lease, c.WaiterTTL)
		assert.Greater(t, d, longest+time.Duration(float64(longest)*driftAllowance), "%+v", c)
	}
}

func TestQuorumResidue(t *testing.T) {
	clean := quorumState{Name: "lock-0", Master: "master 1 (a:1)", LastToken: 9, TokenTTL: time.Second, Ticket: 8, TicketTTL: time.Second}
	assert.Empty(t, clean.residue())
	assert.Empty(t, quorumState{Name: "lock-0"}.residue(), "a master that never saw the lock")

	dirty := quorumState{
		Name: "lock-0", Master: "master 2 (b:2)",
		Hold:  map[string]string{"owner": "o1", "token": "9", "count": "1"},
		Queue: []string{"e1"}, Deadlines: 2,
		LastToken: 9, TokenTTL: -1, Ticket: 8, TicketTTL: -1,
	}
	vs := dirty.residue()
	assert.Equal(t, map[violationKind]int{residual: 5}, kinds(vs))
	for _, v := range vs {
		assert.Equal(t, "lock-0", v.Lock)
		assert.True(t, strings.HasPrefix(v.Detail, "master 2 (b:2): "), v.Detail)
	}
	assert.Contains(t, dirty.String(), "lock-0 on master 2 (b:2): held by o1 (entry , token 9, 1 level(s), lease left 0s), 1 waiter(s)")

	// An election's: a candidate's value left beside the line too.
	values := quorumState{Name: "lock-0", Master: "master 1 (a:1)", Values: map[string]string{"e2": "w#2", "e1": "w#1"}}
	vs = values.residue()
	require.Len(t, vs, 1)
	assert.Equal(t, `master 1 (a:1): 2 candidate value(s) left beside the line after the run, first e1 ("w#1")`, vs[0].Detail)
	assert.Contains(t, values.String(), "\n  value of e1: \"w#1\"\n  value of e2: \"w#2\"\n")
}

func TestQuorumFinalStateReadsTheLockOnEveryMaster(t *testing.T) {
	redistest.Slow(t)
	tgt, err := startMasters(2)
	require.NoError(t, err)
	defer tgt.close()
	rdbs := tgt.clients()
	defer func() {
		for _, r := range rdbs {
			_ = r.Close()
		}
	}()
	ctx := context.Background()
	k, err := queue.Quorum("p", "lock-0")
	require.NoError(t, err)
	require.NoError(t, rdbs[0].Set(ctx, k.Token, "5", time.Minute).Err())
	require.NoError(t, rdbs[1].HSet(ctx, k.Lock, "owner", "o1", "token", "5", "count", "1").Err())

	var vs []violation
	snaps := quorumFinalState(ctx, rdbs, tgt.masters, config{Prefix: "p", Locks: 2}, &vs)
	require.Len(t, vs, 1)
	assert.Equal(t, residual, vs[0].Kind)
	assert.Equal(t, "master 2 ("+tgt.masters[1]+"): still held after the run by o1 (entry , token 5, 1 level(s), lease left -1ns)", vs[0].Detail)
	require.Contains(t, snaps, "lock-0")
	assert.NotContains(t, snaps, "lock-1")
	assert.Contains(t, snaps["lock-0"], "lock-0 on master 1 ("+tgt.masters[0]+"): free, 0 waiter(s), 0 deadline(s), token counter 5")
	assert.Contains(t, snaps["lock-0"], "lock-0 on master 2 ("+tgt.masters[1]+"): held by o1")

	// The elections' keys, for -kind election: a candidate's value left
	// on master 1; the Mutex's hold above is another lock's.
	e, err := queue.QuorumElection("p", "lock-1")
	require.NoError(t, err)
	require.NoError(t, rdbs[0].HSet(ctx, e.Values, "e1", "w#1").Err())
	vs = nil
	snaps = quorumFinalState(ctx, rdbs, tgt.masters, config{Prefix: "p", Locks: 2, Kind: runElection}, &vs)
	require.Len(t, vs, 1)
	assert.Equal(t, "lock-1", vs[0].Lock)
	assert.Equal(t, "master 1 ("+tgt.masters[0]+`): 1 candidate value(s) left beside the line after the run, first e1 ("w#1")`, vs[0].Detail)
	assert.NotContains(t, snaps, "lock-0")
	assert.Contains(t, snaps["lock-1"], "lock-1 on master 1 ("+tgt.masters[0]+"): free, 0 waiter(s)")
}
