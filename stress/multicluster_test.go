package main

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock/internal/redistest"
)

func TestMultiLockRunOnClusterFindsNoViolation(t *testing.T) {
	redistest.Slow(t)
	cl := redistest.ClusterFor(t, 3, 0)
	history := filepath.Join(t.TempDir(), "history.jsonl")
	code, out, errs := runCmd(t, "-cluster", strings.Join(cl.Addrs(), ","), "-kind", "multilock", "-names", "1..3", "-locks", "4",
		"-duration", "2s", "-clients", "3", "-goroutines", "3", "-hold", "0-1ms", "-reentry", "2",
		"-giveup", "0.3", "-patience", "1ms-30ms", "-try", "0.2", "-seed", "7", "-json", "-history", history)
	require.Equal(t, exitOK, code, "stderr: %s\nstdout: %s", errs, out)

	r := decodeReport(t, out)
	assert.Zero(t, r.ViolationSums.Total, "%v", r.ViolationSums)
	assert.Contains(t, r.Workload, "multilock of 1..3 names (one: a Mutex; more: one name after another) among 4 locks")

	as := readHistory(t, history)
	count := map[string]int{}
	for i := range as {
		a := &as[i]
		if !a.multi() {
			count["mutex"]++
			continue
		}
		// A Cluster: a call of its own for each name, in key order.
		for j, p := range a.Parts {
			require.False(t, p.Ticket, "%+v", a)
			require.Equal(t, a.Names[j], p.Name, "%+v", a)
			if j > 0 {
				require.NotEqual(t, a.Parts[j-1].Call, p.Call, "%+v", a)
			}
		}
		switch {
		case a.Held():
			count["multi granted"]++
			require.Len(t, a.Parts, len(a.Names))
		case a.Outcome == outTryFailed:
			count["multi try failed"]++
		case slices.ContainsFunc(a.Parts, func(p part) bool { return !p.Granted.IsZero() }):
			count["multi gave back a name"]++
		}
	}
	for _, k := range []string{"mutex", "multi granted", "multi try failed", "multi gave back a name"} {
		assert.Positive(t, count[k], "%s: %v", k, count)
	}
	orderedCheckerCatchesTampering(t, as)
}

// orderedCheckerCatchesTampering shows that the checker's rules for
// MultiLocks that take their names one after another can fail on a real
// history of a Cluster: it passes as recorded, each kind of tampering is
// caught, and judged as a history of one server it breaks the ticket's
// promise.
func orderedCheckerCatchesTampering(t *testing.T, as []attempt) {
	t.Helper()
	const ttl = 5 * time.Second
	require.Empty(t, check(as, ttl, oneByOne))

	// Two granted MultiLocks, one holding a name right after the other.
	var first, second holdRef
	found := false
	for _, hs := range holdsByName(as) {
		for i := 1; i < len(hs) && !found; i++ {
			first, second = hs[i-1], hs[i]
			found = first.p >= 0 && second.p >= 0
		}
	}
	require.True(t, found, "no name held by two MultiLocks one after the other")
	tamper := func(way multiWay, f func(h []attempt)) map[violationKind]int {
		h := make([]attempt, len(as))
		for i := range as {
			h[i] = as[i].clone()
		}
		f(h)
		return kinds(check(h, ttl, way))
	}
	overlap := tamper(oneByOne, func(h []attempt) {
		h[second.a].Parts[second.p].Granted = h[first.a].UnlockStart.Add(-time.Microsecond)
	})
	assert.Contains(t, overlap, overlapped)
	backwards := tamper(oneByOne, func(h []attempt) {
		p, q := &h[first.a].Parts[first.p], &h[second.a].Parts[second.p]
		p.Token, q.Token = q.Token, p.Token
	})
	assert.Contains(t, backwards, tokenOrder)
	partialHold := tamper(oneByOne, func(h []attempt) { h[first.a].Parts = h[first.a].Parts[:len(h[first.a].Parts)-1] })
	assert.Contains(t, partialHold, partial)
	swapped := tamper(oneByOne, func(h []attempt) {
		p := h[first.a].Parts
		p[0].Name, p[1].Name = p[1].Name, p[0].Name
	})
	assert.Contains(t, swapped, misordered)

	kept := -1
	for i := range as {
		if as[i].multi() && !as[i].Held() && as[i].Outcome != outPending && !as[i].Parts[0].Granted.IsZero() {
			kept = i
		}
	}
	require.GreaterOrEqual(t, kept, 0, "no MultiLock gave a name back")
	notGivenBack := tamper(oneByOne, func(h []attempt) { h[kept].Parts[0].Released = time.Time{} })
	assert.Contains(t, notGivenBack, partial)

	assert.Contains(t, tamper(oneTicket, func([]attempt) {}), partial, "names taken one by one on one server")
}
