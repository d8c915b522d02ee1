package main

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock/internal/redistest"
)

// chaosLoad is a short, contended workload for runs with faults. The
// lease and the waiter TTL are 1 s, so that a restart-empty keeps its
// server down for 2 s only.
var chaosLoad = []string{
	"-locks", "2", "-clients", "3", "-goroutines", "3",
	"-hold", "0-1ms", "-reentry", "1", "-giveup", "0.3", "-patience", "5ms-50ms",
	"-try", "0.2", "-lease", "1s", "-waiter-ttl", "1s", "-grace", "5s", "-seed", "7", "-json",
}

// excusable lists, for each kind of fault, the kinds of verdict it may
// excuse (see excuse).
var excusable = map[string][]violationKind{
	chaosRestartAOF:   {leaseLost, viewLag, viewFinal},
	chaosRestartEmpty: {leaseLost, outOfOrder, barged, viewLag, viewFinal, viewBack},
	chaosPause:        {leaseLost, viewLag, viewFinal},
	chaosFailover:     {leaseLost, outOfOrder, barged, viewLag, viewFinal, viewBack},
	chaosKillPrimary:  {leaseLost, outOfOrder, barged, viewLag, viewFinal, viewBack},
}

// runChaos runs the command with chaosLoad, -chaos kind and args, and
// checks what every run with faults must show: the faults it injected,
// in order, each with its target, its times and its outcome, none
// failed; verdicts excused only of kinds that kind of fault explains,
// each naming its fault; and an exit status that counts only the
// verdicts not excused. It returns the report.
func runChaos(t *testing.T, kind string, args ...string) report {
	t.Helper()
	return runChaosWith(t, chaosLoad, kind, args...)
}

// runChaosWith is runChaos with the workload load in place of chaosLoad.
func runChaosWith(t *testing.T, load []string, kind string, args ...string) report {
	t.Helper()
	code, out, errs := runCmd(t, slices.Concat(load, []string{"-chaos", kind}, args)...)
	require.NotEqual(t, exitCannotRun, code, "stderr: %s\nstdout: %s", errs, out)
	waitRedialsEnd(t)
	r := decodeReport(t, out)
	require.NotNil(t, r.Faults, "stdout: %s", out)
	t.Logf("-chaos %s %q: %d grants, %d faults, violations %v", kind, args, r.Outcomes[outGranted], len(r.Faults.Faults), r.ViolationSums)

	assert.Equal(t, kind, r.Faults.Kind)
	require.NotEmpty(t, r.Faults.Faults, "no fault injected")
	for i, f := range r.Faults.Faults {
		assert.Equal(t, i+1, f.N)
		assert.Equal(t, kind, f.Kind)
		assert.NotEmpty(t, f.Target)
		assert.Empty(t, f.Err)
		assert.Positive(t, f.InjectedAt, "%+v", f)
		assert.Greater(t, f.BackAt, f.InjectedAt, "%+v", f)
		assert.Contains(t, f.Outcome, faultSteps[kind][0]+" at +")
	}
	assert.Positive(t, r.Outcomes[outGranted])

	vs := r.ViolationSums
	assert.Equal(t, vs.Total-vs.Excused, vs.Counted)
	for k, n := range vs.ExcusedByKind {
		assert.Contains(t, excusable[kind], k, "%d %s verdicts excused by %s", n, k, kind)
	}
	for _, es := range vs.Examples {
		for _, e := range es {
			if strings.Contains(e, "[excused: ") {
				assert.Contains(t, e, "[excused: fault ")
				assert.Contains(t, e, " ("+kind+" of ")
			}
		}
	}
	if vs.Counted > 0 {
		assert.Equal(t, exitViolations, code)
	} else {
		assert.Equal(t, exitOK, code, "stderr: %s", errs)
	}
	return r
}

// The server restarts on its append-only file at once, with every write
// it acknowledged, so nothing is excused. Semaphores.
func TestChaosRestartAOFExcusesNoLostWrite(t *testing.T) {
	redistest.Slow(t)
	r := runChaos(t, chaosRestartAOF, "-kind", "semaphore", "-duration", "3s", "-every", "1s")
	for kind := range r.ViolationSums.ExcusedByKind {
		assert.Equal(t, leaseLost, kind, "only a hold whose renewals the restart held up is excused")
	}
	assert.Contains(t, r.Redis, "a redis-server started on loopback with an fsynced append-only file")
	for _, f := range r.Faults.Faults {
		assert.Contains(t, f.Outcome, "restarted on its append-only file at +")
	}
}

// The server is restarted empty once the lease and the waiter TTL have
// passed. MultiLocks, one ticket each.
func TestChaosRestartEmptyKeepsTheServerDownForTheLeaseAndTheWaiterTTL(t *testing.T) {
	redistest.Slow(t)
	r := runChaos(t, chaosRestartEmpty, "-kind", "multilock", "-names", "1..2", "-duration", "3s", "-every", "800ms")
	delay := restartDelay(config{Lease: time.Second, WaiterTTL: time.Second})
	for _, f := range r.Faults.Faults {
		assert.GreaterOrEqual(t, f.BackAt-f.InjectedAt, delay.Seconds(), "%+v", f)
		assert.Contains(t, f.Outcome, "SIGKILL (its keys lost) at +")
	}
	assert.Contains(t, r.Faults.Plan, "down "+delay.String())
}

// The server is stopped for -down, and faults come one after another,
// each after its quiet time. RWMutexes.
func TestChaosPauseStopsTheServerForDown(t *testing.T) {
	redistest.Slow(t)
	r := runChaos(t, chaosPause, "-kind", "rwmutex", "-duration", "3s", "-every", "300ms..500ms", "-down", "300ms")
	fs := r.Faults.Faults
	require.GreaterOrEqual(t, len(fs), 2, "%+v", fs)
	for i, f := range fs {
		assert.GreaterOrEqual(t, f.BackAt-f.InjectedAt, 0.3, "%+v", f)
		if i > 0 {
			assert.GreaterOrEqual(t, f.InjectedAt-fs[i-1].BackAt, 0.3, "quiet before %+v", f)
		}
	}
}

// SENTINEL FAILOVER moves the primary; the clients follow it through the
// sentinels.
func TestChaosFailoverMovesThePrimary(t *testing.T) {
	redistest.Slow(t)
	r := runChaos(t, chaosFailover, "-duration", "4s", "-every", "1s")
	assert.Contains(t, r.Redis, "a primary, 2 replicas and 3 sentinels started on loopback")
	for _, f := range r.Faults.Faults {
		old, ok := strings.CutPrefix(f.Target, "primary ")
		require.True(t, ok, f.Target)
		assert.NotEmpty(t, f.Primary)
		assert.NotEqual(t, old, f.Primary)
	}
}

// The primary is killed; a replica takes over. Worker processes.
func TestChaosKillPrimaryOfASentinelSetInWorkerProcesses(t *testing.T) {
	redistest.Slow(t)
	r := runChaos(t, chaosKillPrimary, "-procs", "2", "-duration", "4s", "-every", "1s")
	assert.Contains(t, r.Workload, "in 2 processes")
	for _, f := range r.Faults.Faults {
		assert.True(t, strings.HasPrefix(f.Target, "primary "), f.Target)
		assert.NotEmpty(t, f.Primary)
		assert.NotEqual(t, strings.TrimPrefix(f.Target, "primary "), f.Primary)
	}
}

// On a Cluster, the master of a lock's slot is killed, and the fault
// names the locks it served.
func TestChaosKillPrimaryOfAClusterNamesTheLocksItServed(t *testing.T) {
	redistest.Slow(t)
	r := runChaos(t, chaosKillPrimary, "-topology", "cluster", "-duration", "4s", "-every", "1s")
	assert.Contains(t, r.Redis, "3 masters and 3 replicas started on loopback")
	for _, f := range r.Faults.Faults {
		assert.True(t, strings.HasPrefix(f.Target, "master "), f.Target)
		assert.NotEmpty(t, f.Locks)
		assert.NotEmpty(t, f.Primary)
	}
}

// On a quorum of three masters, one master at a time is paused: faults
// never overlap.
func TestChaosOnAQuorumHitsOneMasterAtATime(t *testing.T) {
	redistest.Slow(t)
	r := runChaos(t, chaosPause, "-masters", "3", "-duration", "3s", "-every", "200ms..400ms", "-down", "300ms")
	require.NotNil(t, r.Quorum)
	fs := r.Faults.Faults
	require.GreaterOrEqual(t, len(fs), 2, "%+v", fs)
	for i, f := range fs {
		assert.True(t, strings.HasPrefix(f.Target, "master "), f.Target)
		if i > 0 {
			assert.GreaterOrEqual(t, f.InjectedAt, fs[i-1].BackAt, "%+v overlaps the fault before it", f)
		}
	}
	assert.Contains(t, r.Faults.Plan, "on a random master, at most 1 down at once")
}
