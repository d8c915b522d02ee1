package main

import (
	"io"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock/internal/redistest"
)

func TestNamesFlagTakesANumberOrARange(t *testing.T) {
	cfg, err := parseFlags([]string{"-kind", "multilock", "-names", "2..4", "-locks", "8"}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, nameRange{2, 4}, cfg.Names)
	cfg, err = parseFlags([]string{"-kind", "multilock", "-names", "3"}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, nameRange{3, 3}, cfg.Names)
	cfg, err = parseFlags([]string{"-kind", "multilock"}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, nameRange{2, 3}, cfg.Names, "the default fits the default 3 locks")
	cfg, err = parseFlags(nil, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, runMutex, cfg.Kind)

	var r nameRange
	require.NoError(t, r.Set(" 1 .. 4 "))
	assert.Equal(t, "1..4", r.String())
	seen := map[int]bool{}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		n := r.draw(rng)
		require.True(t, n >= 1 && n <= 4, n)
		seen[n] = true
	}
	assert.Len(t, seen, 4, "every count is drawn")
	for _, bad := range []string{"", "..", "1..", "..2", "2..1", "1.5", "a..b"} {
		assert.Error(t, r.Set(bad), "%q", bad)
	}
}

func TestMultiLockRunOnRedisServerFindsNoViolation(t *testing.T) {
	redistest.Slow(t)
	srv, err := redistest.Start()
	require.NoError(t, err)
	defer srv.Stop()
	history := filepath.Join(t.TempDir(), "history.jsonl")
	code, out, errs := runCmd(t, "-redis", "redis://"+srv.Addr+"/0", "-kind", "multilock", "-names", "1..3", "-locks", "4",
		"-duration", "2s", "-clients", "3", "-goroutines", "3", "-hold", "0-1ms", "-reentry", "2",
		"-giveup", "0.3", "-patience", "1ms-30ms", "-try", "0.2", "-seed", "7", "-json", "-history", history)
	require.Equal(t, exitOK, code, "stderr: %s\nstdout: %s", errs, out)

	r := decodeReport(t, out)
	assert.Zero(t, r.ViolationSums.Total, "%v", r.ViolationSums)
	assert.Equal(t, runMultiLock, r.Kind)
	assert.Equal(t, "1..3", r.Names)
	assert.Contains(t, r.Workload, "multilock of 1..3 names (one: a Mutex) among 4 locks")
	assert.Positive(t, r.Reentries)

	as := readHistory(t, history)
	count := map[string]int{}
	for i := range as {
		a := &as[i]
		switch {
		case !a.multi():
			count["mutex"]++
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
	multiCheckerCatchesTampering(t, as)
}

// multiCheckerCatchesTampering shows that the checker's rules for
// MultiLocks can fail on a real history: it passes as recorded, and each
// kind of tampering is caught.
func multiCheckerCatchesTampering(t *testing.T, as []attempt) {
	t.Helper()
	const ttl = 5 * time.Second
	require.Empty(t, check(as, ttl))

	// Two granted MultiLocks, one holding a name right after the other.
	type at struct{ a, p int } // attempt and part
	var holds []at
	for i := range as {
		if as[i].multi() && as[i].Held() {
			for j := range as[i].Parts {
				holds = append(holds, at{i, j})
			}
		}
	}
	partOf := func(x at) *part { return &as[x.a].Parts[x.p] }
	// Tokens of a name rise with every grant, so the hold after x is the
	// one with the next higher token of the same name.
	next := func(x at) at {
		n := at{-1, -1}
		for _, y := range holds {
			px, py := partOf(x), partOf(y)
			if px.Name == py.Name && py.Token > px.Token && (n.a < 0 || py.Token < partOf(n).Token) {
				n = y
			}
		}
		return n
	}
	first, second := at{-1, -1}, at{-1, -1}
	for _, x := range holds {
		if y := next(x); y.a >= 0 {
			first, second = x, y
			break
		}
	}
	require.GreaterOrEqual(t, first.a, 0, "no name held by two MultiLocks")
	tamper := func(f func(h []attempt)) map[violationKind]int {
		h := slices.Clone(as)
		for i := range h {
			h[i] = as[i].clone()
		}
		f(h)
		return kinds(check(h, ttl))
	}
	overlap := tamper(func(h []attempt) {
		h[second.a].Parts[second.p].Granted = h[first.a].UnlockStart.Add(-time.Microsecond)
	})
	assert.Contains(t, overlap, overlapped)
	backwards := tamper(func(h []attempt) {
		p, q := &h[first.a].Parts[first.p], &h[second.a].Parts[second.p]
		p.Token, q.Token = q.Token, p.Token
	})
	assert.Contains(t, backwards, tokenOrder)

	partialHold := tamper(func(h []attempt) { h[first.a].Parts = h[first.a].Parts[:len(h[first.a].Parts)-1] })
	assert.Contains(t, partialHold, partial)
	kept := -1
	for i := range as {
		if as[i].multi() && !as[i].Held() && as[i].Outcome != outPending && !as[i].Parts[0].Granted.IsZero() {
			kept = i
		}
	}
	require.GreaterOrEqual(t, kept, 0, "no MultiLock gave a name back")
	notGivenBack := tamper(func(h []attempt) { h[kept].Parts[0].Released = time.Time{} })
	assert.Contains(t, notGivenBack, partial)
}
