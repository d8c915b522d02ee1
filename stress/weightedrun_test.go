package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock/internal/redistest"
)

// weightedLoad is a short, contended workload of the semaphore or
// rwmutex kind with every kind of attempt.
var weightedLoad = []string{
	"-duration", "2s", "-locks", "2", "-clients", "3", "-goroutines", "3",
	"-hold", "0-1ms", "-reentry", "2", "-giveup", "0.3", "-patience", "1ms-30ms",
	"-try", "0.2", "-seed", "7", "-json",
}

// runWeighted runs the command with weightedLoad and args, writing the
// history and the timeline to files, and requires a clean run. It returns
// the report, the history and the timeline.
func runWeighted(t *testing.T, args ...string) (report, []attempt, string) {
	t.Helper()
	dir := t.TempDir()
	history, svg := filepath.Join(dir, "history.jsonl"), filepath.Join(dir, "timeline.svg")
	code, out, errs := runCmd(t, append(append(weightedLoad, args...), "-history", history, "-svg", svg)...)
	require.Equal(t, exitOK, code, "stderr: %s\nstdout: %s", errs, out)
	r := decodeReport(t, out)
	assert.Zero(t, r.ViolationSums.Total, "%v", r.ViolationSums)
	assert.Positive(t, r.Outcomes[outGranted])
	assert.Positive(t, r.Outcomes[outGaveUp], "the workload should make waiters give up")
	assert.Zero(t, r.Outcomes[outPending])
	require.NotNil(t, r.Weighted)
	assert.Positive(t, r.Weighted.Refused, "re-entries that must be refused")
	assert.Greater(t, r.Weighted.MostHeld, int64(1), "holds held at once")
	return r, readHistory(t, history), svg
}

func TestSemaphoreRunOnEmbeddedRedisFindsNoViolation(t *testing.T) {
	redistest.Slow(t)
	r, as, svg := runWeighted(t, "-kind", "semaphore", "-permits", "3")
	assert.Equal(t, runSemaphore, r.Kind)
	assert.Contains(t, r.Workload, "semaphores of 3 permits (1 to 3 per attempt) on 2 locks")
	assert.LessOrEqual(t, r.Weighted.MostHeld, int64(3))
	weights := map[int64]int{}
	for _, a := range as {
		require.Equal(t, runSemaphore, a.Type)
		require.EqualValues(t, 3, a.Permits)
		weights[a.Weight]++
	}
	assert.Len(t, weights, 3, "weights 1 to 3: %v", weights)

	f, err := os.Open(svg)
	require.NoError(t, err)
	defer f.Close()
	assert.Positive(t, countSVGElements(t, f)["rect"])
	weightedCheckerCatchesTampering(t, as)
}

func TestRWMutexRunOnEmbeddedRedisFindsNoViolation(t *testing.T) {
	redistest.Slow(t)
	r, as, _ := runWeighted(t, "-kind", "rwmutex", "-readers", "0.7", "-downgrade", "0.3")
	assert.Equal(t, runRWMutex, r.Kind)
	assert.Contains(t, r.Workload, "rwmutexes (70% of attempts read, 30% of writers downgrade)")
	w := r.Weighted
	assert.Greater(t, w.Reads, w.Writes)
	assert.Positive(t, w.Writes)
	assert.Positive(t, w.Downgrades)
	assert.Positive(t, r.Reentries)
	weightedCheckerCatchesTampering(t, as)
}

func TestWeightedRunsOnClusterFindNoViolation(t *testing.T) {
	redistest.Slow(t)
	cl := redistest.ClusterFor(t, 3, 0)
	cluster := strings.Join(cl.Addrs(), ",")
	for _, kind := range [][]string{
		{"-kind", "semaphore", "-permits", "4"},
		{"-kind", "rwmutex", "-procs", "2", "-clients", "2"},
	} {
		t.Run(kind[1], func(t *testing.T) {
			_, as, _ := runWeighted(t, append(kind, "-cluster", cluster)...)
			weightedCheckerCatchesTampering(t, as)
		})
	}
}

// weightedCheckerCatchesTampering shows that the checker of Semaphores
// and RWMutexes can fail on a real history: it passes as recorded, and
// each kind of tampering is caught.
func weightedCheckerCatchesTampering(t *testing.T, as []attempt) {
	t.Helper()
	const ttl = 5 * time.Second
	require.Empty(t, check(as, ttl, oneTicket))
	tamper := func(f func(h []attempt)) map[violationKind]int {
		h := make([]attempt, len(as))
		for i := range as {
			h[i] = as[i].clone()
		}
		f(h)
		return kinds(check(h, ttl, oneTicket))
	}

	// Every hold as heavy as the whole lock (all permits, or a writer):
	// the holds that were held at once are too many.
	heavy := tamper(func(h []attempt) {
		for i := range h {
			if h[i].Type == runSemaphore {
				h[i].Weight = h[i].Permits
			} else {
				h[i].Write = true
			}
		}
	})
	if as[0].Type == runSemaphore {
		assert.Contains(t, heavy, overHeld)
	} else {
		assert.Contains(t, heavy, overlapped)
	}

	// Two holds of one lock, the second called after the first was
	// granted, with their tokens swapped.
	first, second := -1, -1
	for i := range as {
		for j := range as {
			if as[i].Held() && as[j].Held() && as[i].Lock == as[j].Lock && as[i].Granted.Before(as[j].Start) {
				first, second = i, j
				break
			}
		}
		if first >= 0 {
			break
		}
	}
	require.GreaterOrEqual(t, first, 0, "no two holds one after the other")
	backwards := tamper(func(h []attempt) { h[first].Token, h[second].Token = h[second].Token, h[first].Token })
	assert.Contains(t, backwards, tokenOrder)

	// A waiter that joined the line before another was granted, and was
	// granted after it, never granted.
	waiter, later := -1, -1
	for i := range as {
		w := &as[i]
		if w.Kind != kindLock || len(w.Joins) != 1 || !w.Held() {
			continue
		}
		for j := range as {
			g := &as[j]
			if g.Held() && g.Lock == w.Lock && g.Token > w.Token && w.Joins[0].Answered.Before(g.Entered()) &&
				g.Granted.Before(keptUntil(w, ttl)) {
				waiter, later = i, j
				break
			}
		}
		if waiter >= 0 {
			break
		}
	}
	require.GreaterOrEqual(t, waiter, 0, "no waiter granted before a later one")
	never := tamper(func(h []attempt) {
		h[waiter].Granted, h[waiter].Token, h[waiter].Outcome = time.Time{}, 0, outPending
	})
	assert.Contains(t, never, outOfOrder, "%v passed %v", as[later].Worker, as[waiter].Worker)
	assert.Contains(t, never, leftBehind)
}
