package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/fairlock/fairlock/internal/redistest"
)

func TestMain(m *testing.M) {
	// With -procs the command runs its own executable as worker
	// processes: in the tests, this test binary.
	if spec := os.Getenv(workerEnv); spec != "" {
		os.Exit(workerMain(spec, os.Stdin, os.Stdout, os.Stderr))
	}
	goleak.VerifyTestMain(m)
}

// runCmd runs the command in this process and returns its exit status,
// stdout and stderr.
func runCmd(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

// smallLoad is a short, contended workload with every kind of attempt.
var smallLoad = []string{
	"-duration", "2s", "-locks", "2", "-clients", "3", "-goroutines", "3",
	"-hold", "0-1ms", "-reentry", "2", "-giveup", "0.3", "-patience", "1ms-30ms",
	"-try", "0.2", "-seed", "7", "-json",
}

func decodeReport(t *testing.T, out string) report {
	t.Helper()
	var r report
	require.NoError(t, json.Unmarshal([]byte(out), &r), out)
	return r
}

func TestRunOnEmbeddedRedisFindsNoViolation(t *testing.T) {
	dir := t.TempDir()
	svg, history := filepath.Join(dir, "timeline.svg"), filepath.Join(dir, "history.jsonl")
	code, out, errs := runCmd(t, append(smallLoad, "-svg", svg, "-history", history)...)
	require.Equal(t, exitOK, code, "stderr: %s\nstdout: %s", errs, out)

	r := decodeReport(t, out)
	assert.Zero(t, r.ViolationSums.Total, "%v", r.ViolationSums)
	assert.Positive(t, r.Outcomes[outGranted])
	assert.Positive(t, r.Outcomes[outGaveUp], "the workload should make waiters give up")
	assert.Positive(t, r.Outcomes[outTryFailed]+r.Outcomes[outGranted])
	assert.Zero(t, r.Outcomes[outPending])
	assert.Positive(t, r.Reentries)
	assert.Equal(t, 9, r.Fairness.Workers)
	assert.Greater(t, r.Fairness.Jain, 0.5)
	assert.Positive(t, r.Wait.N)
	assert.LessOrEqual(t, r.Wait.P50, r.Wait.P99)
	assert.LessOrEqual(t, r.Wait.P99, r.Wait.Max)
	assert.Positive(t, r.GrantsPerSec)
	require.NotNil(t, r.Commands)
	assert.Positive(t, r.Commands.PerGrant)

	f, err := os.Open(svg)
	require.NoError(t, err)
	defer f.Close()
	assert.Positive(t, countSVGElements(t, f)["rect"])

	checkerCatchesTampering(t, readHistory(t, history))
}

func readHistory(t *testing.T, path string) []attempt {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	var as []attempt
	dec := json.NewDecoder(f)
	for dec.More() {
		var a attempt
		require.NoError(t, dec.Decode(&a))
		as = append(as, a)
	}
	return as
}

// checkerCatchesTampering shows that the checker can fail on a real
// history: it passes as recorded, and each kind of tampering is caught.
func checkerCatchesTampering(t *testing.T, as []attempt) {
	t.Helper()
	const ttl = 5 * time.Second
	require.Empty(t, check(as, ttl, oneTicket))

	// Consecutive holds of one lock, the second granted to a waiter that
	// joined while the first held the lock.
	// Tokens rise with every grant but not by one (they follow the
	// server's clock), so the grant after i is the one with the next
	// higher token of the same lock.
	next := func(i int) int {
		n := -1
		for j := range as {
			if as[j].Lock == as[i].Lock && as[j].Held() && as[j].Token > as[i].Token &&
				(n < 0 || as[j].Token < as[n].Token) {
				n = j
			}
		}
		return n
	}
	first, second := -1, -1
	for i := range as {
		if !as[i].Held() {
			continue
		}
		if j := next(i); j >= 0 && len(as[j].Joins) == 1 && as[j].Joins[0].Answered.Before(as[i].UnlockStart) {
			first, second = i, j
		}
	}
	require.GreaterOrEqual(t, first, 0, "no hand-over in the history")
	tamper := func(f func(h []attempt)) []violation {
		h := slices.Clone(as)
		f(h)
		return check(h, ttl, oneTicket)
	}
	overlap := tamper(func(h []attempt) { h[second].Granted = h[first].UnlockStart.Add(-time.Microsecond) })
	assert.Contains(t, kinds(overlap), overlapped)
	backwards := tamper(func(h []attempt) { h[first].Token, h[second].Token = h[second].Token, h[first].Token })
	assert.Contains(t, kinds(backwards), tokenOrder)
	lost := tamper(func(h []attempt) { h[second].Granted, h[second].Outcome = time.Time{}, outPending })
	assert.Contains(t, kinds(lost), leftBehind)
}

func TestRunInWorkerProcessesFindsNoViolation(t *testing.T) {
	redistest.Slow(t)
	code, out, errs := runCmd(t, append(smallLoad, "-procs", "2", "-clients", "2")...)
	require.Equal(t, exitOK, code, "stderr: %s\nstdout: %s", errs, out)
	r := decodeReport(t, out)
	assert.Zero(t, r.ViolationSums.Total, "%v", r.ViolationSums)
	assert.Positive(t, r.Outcomes[outGranted])
	assert.Equal(t, 6, r.Fairness.Workers, "3 goroutines in each of 2 processes")
}

func TestRunWithOpsStopsAfterThem(t *testing.T) {
	code, out, errs := runCmd(t, "-ops", "60", "-locks", "1", "-clients", "2", "-goroutines", "2", "-json")
	require.Equal(t, exitOK, code, "stderr: %s", errs)
	assert.Equal(t, 60, decodeReport(t, out).Attempts)
}

func TestRunTouchesOnlyItsOwnKeysAndDeletesThem(t *testing.T) {
	m := miniredis.NewMiniRedis()
	require.NoError(t, m.Start())
	defer m.Close()
	m.ClockTTL(true)
	require.NoError(t, m.Set("fairlock:{lock-0}", "someone else's"))
	require.NoError(t, m.Set("fairlock-stress-other:{lock-0}:token", "7"))

	code, out, errs := runCmd(t, "-redis", "redis://"+m.Addr()+"/0", "-duration", "500ms", "-locks", "2", "-clients", "2", "-goroutines", "2")
	require.Equal(t, exitOK, code, "stderr: %s\nstdout: %s", errs, out)
	assert.Contains(t, out, "violations:  none")
	assert.ElementsMatch(t, []string{"fairlock:{lock-0}", "fairlock-stress-other:{lock-0}:token"}, m.Keys())
}

// Exit status 2 means nothing was checked: bad flags (below), or a Redis
// that cannot be reached.
func TestUnreachableRedisExitsWithStatus2(t *testing.T) {
	redistest.Slow(t)
	m := miniredis.NewMiniRedis()
	require.NoError(t, m.Start())
	addr := m.Addr()
	m.Close() // nothing listens there now
	for _, args := range [][]string{
		{"-redis", "redis://" + addr + "/0", "-duration", "200ms"},
	} {
		code, out, errs := runCmd(t, args...)
		assert.Equal(t, exitCannotRun, code, "%q: stderr %s", args, errs)
		assert.Empty(t, out, "%q", args)
	}
}

// Exit status 1 means the check found violations: here holds deleted
// behind the lock's back, so that two holders overlap.
func TestViolationsExitWithStatus1(t *testing.T) {
	redistest.Slow(t)
	m := miniredis.NewMiniRedis()
	require.NoError(t, m.Start())
	defer m.Close()
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
			for _, k := range m.Keys() {
				if strings.HasPrefix(k, "fairlock-stress-") && strings.HasSuffix(k, "}") {
					m.Del(k) // a hold
				}
			}
		}
	}()
	code, out, errs := runCmd(t, "-redis", "redis://"+m.Addr()+"/0", "-duration", "1s", "-locks", "1",
		"-clients", "2", "-goroutines", "2", "-hold", "2ms-5ms", "-giveup", "0", "-try", "0", "-json")
	require.Equal(t, exitViolations, code, "stderr: %s", errs)
	assert.Positive(t, decodeReport(t, out).ViolationSums.Total)
}

func TestBadFlagsExitWithStatus2(t *testing.T) {
	tests := []struct {
		args []string
		want string // in stderr
	}{
		{[]string{"-locks", "0"}, "-locks 0"},
		{[]string{"-clients", "-1"}, "-clients -1"},
		{[]string{"-giveup", "1.5"}, "-giveup 1.5"},
		{[]string{"-try", "NaN"}, "-try NaN"},
		{[]string{"-hold", "5ms-1ms"}, "MIN <= MAX"},
		{[]string{"-hold", "soon"}, "want a duration"},
		{[]string{"-patience", "0"}, "-patience"},
		{[]string{"-lease", "1ms"}, "-lease 1ms"},
		{[]string{"-duration", "0"}, "-duration 0s"},
		{[]string{"-ops", "1", "-procs", "2"}, "fewer than -procs"},
		{[]string{"-procs", "1000"}, "-procs 1000"},
		{[]string{"-clients", "1000", "-goroutines", "1000"}, "workers"},
		{[]string{"-redis", "http://x"}, "-redis"},
		{[]string{"-redis", "redis://a:1", "-cluster", "b:2"}, "exclude each other"},
		{[]string{"-redis", "redis://a:1", "-sentinel", "b:2", "-master", "m"}, "-redis and -sentinel exclude each other"},
		{[]string{"-cluster", "a:1", "-sentinel", "b:2", "-master", "m"}, "-cluster and -sentinel exclude each other"},
		{[]string{"-redis", "redis://a:1", "-cluster", "a:1", "-sentinel", "b:2", "-master", "m"}, "-redis, -cluster and -sentinel exclude each other"},
		{[]string{"-sentinel", "a:1"}, "-sentinel needs -master NAME"},
		{[]string{"-master", "m"}, "-master needs -sentinel"},
		{[]string{"-sentinel", "a:1,nohost", "-master", "m"}, `-sentinel "nohost"`},
		{[]string{"-sentinel", " , ", "-master", "m"}, "no address"},
		{[]string{"-cluster", "a:1,b"}, `-cluster "b"`},
		{[]string{"-inspect", "x"}, "flag provided but not defined: -inspect"},
		{[]string{"-prefix", "x"}, "flag provided but not defined: -prefix"},
		{[]string{"-nosuchflag"}, "flag provided but not defined"},
		{[]string{"extra"}, "unexpected argument"},
		{[]string{"-kind", "rwlock"}, `-kind "rwlock": want mutex, multilock, semaphore, rwmutex or election`},
		{[]string{"-observers", "2"}, "-observers needs -kind election"},
		{[]string{"-kind", "mutex", "-lag", "1s"}, "-lag needs -kind election"},
		{[]string{"-proclaim", "0.5"}, "-proclaim needs -kind election"},
		{[]string{"-kind", "election", "-try", "0.1"}, "-try does not go with -kind election"},
		{[]string{"-kind", "election", "-reentry", "1"}, "-reentry does not go with -kind election"},
		{[]string{"-kind", "election", "-observers", "-1"}, "-observers -1: want 0 to 1000"},
		{[]string{"-kind", "election", "-lag", "0s"}, "-lag 0s: want a positive duration"},
		{[]string{"-kind", "election", "-proclaim", "2"}, "-proclaim 2: want a fraction"},
		{[]string{"-kind", "election", "-masters", "3", "-try", "0.1"}, "-try does not go with -kind election"},
		{[]string{"-permits", "3"}, "-permits needs -kind semaphore"},
		{[]string{"-kind", "rwmutex", "-permits", "3"}, "-permits needs -kind semaphore"},
		{[]string{"-readers", "0.5"}, "-readers needs -kind rwmutex"},
		{[]string{"-kind", "semaphore", "-downgrade", "0.5"}, "-downgrade needs -kind rwmutex"},
		{[]string{"-kind", "semaphore", "-permits", "0"}, "-permits 0: want 1 to 1000"},
		{[]string{"-kind", "semaphore", "-permits", "1001"}, "-permits 1001: want 1 to 1000"},
		{[]string{"-kind", "rwmutex", "-readers", "1.5"}, "-readers 1.5: want a fraction"},
		{[]string{"-kind", "rwmutex", "-downgrade", "-0.1"}, "-downgrade -0.1: want a fraction"},
		{[]string{"-names", "2"}, "-names needs -kind multilock"},
		{[]string{"-kind", "mutex", "-names", "2"}, "-names needs -kind multilock"},
		{[]string{"-kind", "multilock", "-names", "0..2"}, "-names 0..2: want 1 <= LO <= HI <= -locks 3"},
		{[]string{"-kind", "multilock", "-names", "2..4"}, "-names 2..4: want 1 <= LO <= HI <= -locks 3"},
		{[]string{"-kind", "multilock", "-names", "3..2"}, "want LO <= HI"},
		{[]string{"-kind", "multilock", "-names", "two"}, "want a number or LO..HI"},
		{[]string{"-kind", "multilock", "-names", "2..", "-locks", "8"}, "want a number or LO..HI"},
	}
	for _, tt := range tests {
		code, out, errs := runCmd(t, tt.args...)
		assert.Equal(t, exitCannotRun, code, "%q", tt.args)
		assert.Contains(t, errs, tt.want, "%q", tt.args)
		assert.Empty(t, out, "%q", tt.args)
	}
	code, _, errs := runCmd(t, "-h")
	assert.Equal(t, exitOK, code)
	assert.Contains(t, errs, "Usage: stress")
	assert.Contains(t, errs, "-sentinel addresses")
	assert.Contains(t, errs, "-master NAME")
}

func TestWorkerRejectsABadSpec(t *testing.T) {
	var out, errb bytes.Buffer
	assert.Equal(t, exitCannotRun, workerMain("{not json", nil, &out, &errb))
	assert.True(t, strings.Contains(errb.String(), workerEnv), errb.String())
}

func TestSpanParsesDurationsAndRanges(t *testing.T) {
	var s span
	require.NoError(t, s.Set("3ms"))
	assert.Equal(t, span{3e6, 3e6}, s)
	require.NoError(t, s.Set("1ms-5ms"))
	assert.Equal(t, span{1e6, 5e6}, s)
	assert.Equal(t, "1ms-5ms", s.String())
	for _, bad := range []string{"", "-1ms", "5ms-1ms", "1ms-", "x-1ms"} {
		assert.Error(t, s.Set(bad), "%q", bad)
	}
}
