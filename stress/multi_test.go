package main

import (
	"cmp"
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
	assert.Contains(t, r.Workload, "multilock of 1..3 names (one: a Mutex; more: one ticket each) among 4 locks")
	assert.Positive(t, r.Reentries)

	as := readHistory(t, history)
	count := map[string]int{}
	for i := range as {
		a := &as[i]
		if !a.multi() {
			count["mutex"]++
			continue
		}
		// One server: one ticket for all the names, its events naming
		// each of them in key order.
		require.Len(t, a.Parts, len(a.Names), "%+v", a)
		for j, p := range a.Parts {
			require.True(t, p.Ticket && p.Call == a.Parts[0].Call && p.Name == a.Names[j], "%+v", a)
		}
		switch {
		case a.Held() && len(a.Parts[0].Joins) > 0:
			count["ticket granted in line"]++
		case a.Held():
			count["ticket granted at once"]++
		case a.Outcome == outTryFailed:
			count["ticket try failed"]++
		case a.Outcome == outGaveUp:
			count["ticket gave up"]++
		}
	}
	// (A ticket granted at once needs every line of its names empty: in
	// this contended run it may never happen.)
	for _, k := range []string{"mutex", "ticket granted in line", "ticket try failed", "ticket gave up"} {
		assert.Positive(t, count[k], "%s: %v", k, count)
	}
	ticketCheckerCatchesTampering(t, as)
}

// holdRef is a hold of a name in a history: the Mutex attempt as[a]
// (p < 0), or the part p of MultiLock attempt as[a].
type holdRef struct{ a, p int }

// holdsByName returns the holds of each name in as, in the order of
// their tokens (the order they were granted in).
func holdsByName(as []attempt) map[string][]holdRef {
	token := func(h holdRef) int64 {
		if h.p < 0 {
			return as[h.a].Token
		}
		return as[h.a].Tokens[as[h.a].Parts[h.p].Name]
	}
	byName := map[string][]holdRef{}
	for i := range as {
		switch a := &as[i]; {
		case !a.Held():
		case !a.multi():
			byName[a.Lock] = append(byName[a.Lock], holdRef{i, -1})
		default:
			for j := range a.Parts {
				byName[a.Parts[j].Name] = append(byName[a.Parts[j].Name], holdRef{i, j})
			}
		}
	}
	for _, hs := range byName {
		slices.SortFunc(hs, func(x, y holdRef) int { return cmp.Compare(token(x), token(y)) })
	}
	return byName
}

// ticketCheckerCatchesTampering shows that the checker's rules for
// tickets can fail on a real history of one server: it passes as
// recorded, and each kind of tampering is caught.
func ticketCheckerCatchesTampering(t *testing.T, as []attempt) {
	t.Helper()
	const ttl = 5 * time.Second
	require.Empty(t, check(as, ttl, oneTicket))

	// Two tickets that held a name one after the other, and a ticket that
	// waited in line and was granted a name right after another hold.
	first, second, before, waited := holdRef{-1, -1}, holdRef{-1, -1}, holdRef{-1, -1}, holdRef{-1, -1}
	for _, hs := range holdsByName(as) {
		for i := 1; i < len(hs); i++ {
			x, y := hs[i-1], hs[i]
			if x.p >= 0 && y.p >= 0 {
				first, second = x, y
			}
			if y.p >= 0 && as[y.a].Kind == kindLock && len(as[y.a].Parts[y.p].Joins) == 1 {
				before, waited = x, y
			}
		}
	}
	require.GreaterOrEqual(t, first.a, 0, "no name held by two tickets one after the other")
	require.GreaterOrEqual(t, waited.a, 0, "no ticket granted after waiting in line")
	tamper := func(f func(h []attempt)) map[violationKind]int {
		h := make([]attempt, len(as))
		for i := range as {
			h[i] = as[i].clone()
		}
		f(h)
		return kinds(check(h, ttl, oneTicket))
	}
	name := as[first.a].Parts[first.p].Name

	overlap := tamper(func(h []attempt) {
		for j := range h[second.a].Parts {
			h[second.a].Parts[j].Granted = h[first.a].UnlockStart.Add(-time.Microsecond)
		}
	})
	assert.Contains(t, overlap, overlapped)
	backwards := tamper(func(h []attempt) {
		x, y := h[first.a].Tokens, h[second.a].Tokens
		x[name], y[name] = y[name], x[name]
		for _, r := range []holdRef{first, second} {
			if p := &h[r.a].Parts[r.p]; p.Token != 0 {
				p.Token = h[r.a].Tokens[name] // the Observer's token of a ticket's first name
			}
		}
	})
	assert.Contains(t, backwards, tokenOrder)
	someNames := tamper(func(h []attempt) { h[first.a].Parts[first.p].Granted = time.Time{} })
	assert.Contains(t, someNames, partial)
	lastDropped := tamper(func(h []attempt) { h[first.a].Parts = h[first.a].Parts[:len(h[first.a].Parts)-1] })
	assert.Contains(t, lastDropped, partial)

	// The waiting ticket's join moved to before the hold granted ahead of
	// it took its place: it was passed.
	passed := tamper(func(h []attempt) {
		var entered time.Time
		if before.p < 0 {
			entered = h[before.a].Entered()
		} else {
			entered = firstSet(lastJoinSent(h[before.a].Parts[before.p]), h[before.a].Parts[before.p].Start)
		}
		w := &h[waited.a]
		w.Start = entered.Add(-3 * time.Microsecond)
		for j := range w.Parts {
			p := &w.Parts[j]
			p.Start, p.Kept = w.Start, time.Time{}
			p.Joins = []join{{Sent: entered.Add(-2 * time.Microsecond), Answered: entered.Add(-time.Microsecond)}}
		}
	})
	assert.Contains(t, passed, outOfOrder)
}

// lastJoinSent returns when part p sent its last join, or zero.
func lastJoinSent(p part) time.Time {
	if n := len(p.Joins); n > 0 {
		return p.Joins[n-1].Sent
	}
	return time.Time{}
}
