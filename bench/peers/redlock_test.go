package main

import (
	"context"
	"errors"
	"os/exec"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// quorumLibraries are the libraries that have a quorum lock, in their
// order; fencedLibraries, those of them whose holds carry fencing tokens.
var (
	quorumLibraries = []string{"fairlock", "redsync"}
	fencedLibraries = []string{"fairlock"}
)

func redlockWorkload(t *testing.T) workload {
	t.Helper()
	sel, err := selectWorkloads(redlockKey)
	if err != nil {
		t.Fatal(err)
	}
	return sel.workloads[0]
}

// startMasters starts n masters of the test's own, skipping the test when
// there is no redis-server on PATH.
func startMasters(t *testing.T, n int) servers {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("redis-server is not on PATH")
	}
	ms, err := openMasters(context.Background(), n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ms.close)
	return ms
}

// memFencer is a memLocker whose holds carry tokens: each grant takes the
// next number of a counter, or the same number every time when stuck, or
// its token cannot be read when broken.
type memFencer struct {
	memLocker
	next          *atomic.Int64
	stuck, broken bool
}

var errNoToken = errors.New("no token")

func (f memFencer) lockFenced(ctx context.Context, name string) (func(context.Context) error, func() (int64, error), error) {
	unlock, err := f.lock(ctx, name)
	if err != nil {
		return nil, nil, err
	}
	tok := f.next.Add(1)
	if f.stuck {
		tok = 7
	}
	return unlock, func() (int64, error) {
		if f.broken {
			return 0, errNoToken
		}
		return tok, nil
	}, nil
}

// The redlock workload reads the token of every hold of a locker whose
// holds carry one, and counts a token no greater than the one before it,
// and a token that cannot be read; it reads none of a locker without
// tokens.
func TestRedlockWorkloadChecksThatTokensRiseFromGrantToGrant(t *testing.T) {
	w := redlockWorkload(t)
	tests := []struct {
		name          string
		fenced        bool
		stuck, broken bool
	}{
		{name: "rising tokens", fenced: true},
		{name: "the same token every time", fenced: true, stuck: true},
		{name: "tokens that cannot be read", fenced: true, broken: true},
		{name: "no tokens"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := newMemLocks()
			var next atomic.Int64
			var lockers []locker
			for range w.clients {
				l := memLocker{m: m}
				if tt.fenced {
					lockers = append(lockers, memFencer{memLocker: l, next: &next, stuck: tt.stuck, broken: tt.broken})
				} else {
					lockers = append(lockers, l)
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			tl := drive(ctx, w, lockers, "test", w.goroutines)
			cancel()
			if tl.grants() == 0 {
				t.Fatal("no grant")
			}
			if v := tl.violations.Load(); v != 0 {
				t.Errorf("%d violations over locks that exclude", v)
			}
			read, backwards, errs := tl.tokens.Load(), tl.backwards.Load(), tl.errors.Load()
			switch {
			case !tt.fenced:
				if read != 0 || errs != 0 {
					t.Errorf("%d tokens read and %d errors over locks without tokens", read, errs)
				}
			case tt.broken:
				if read != 0 || errs == 0 || !errors.Is(tl.firstError(), errNoToken) {
					t.Errorf("%d tokens read, %d errors (first: %v); want none read and the reads counted as errors", read, errs, tl.firstError())
				}
			case read < tl.grants():
				t.Errorf("%d tokens read in %d grants: every hold reads its token", read, tl.grants())
			case tt.stuck && backwards != read-1:
				t.Errorf("%d of %d tokens not rising, want all but the first", backwards, read)
			case !tt.stuck && (backwards != 0 || errs != 0):
				t.Errorf("%d of %d rising tokens counted as not rising, %d errors (first: %v)", backwards, read, errs, tl.firstError())
			}
			if got := m.held(); len(got) != 0 {
				t.Errorf("still held after the run: %v", got)
			}
		})
	}
}

func TestOnlyTheQuorumLocksRunOnSeveralMasters(t *testing.T) {
	w := redlockWorkload(t)
	if w.masters != 3 || w.goroutines != 16 || w.clients != 4 || w.names != 1 || w.hold != 0 {
		t.Errorf("redlock: %d masters, %d goroutines over %d clients, %d names, hold %v; want hold0's shape on 3 masters",
			w.masters, w.goroutines, w.clients, w.names, w.hold)
	}
	all := libraries(libConfig{ttl: time.Second})
	var ran []string
	for _, lib := range all {
		if lib.runsIn(w) {
			ran = append(ran, lib.name)
		}
		for _, other := range workloads {
			if other.masters == 0 && lib.name != atomicName && !lib.runsIn(other) {
				t.Errorf("%s does not run in %s", lib.name, other.key)
			}
		}
	}
	if want := quorumLibraries; !slices.Equal(ran, want) {
		t.Errorf("%v run in %s, want %v", ran, redlockKey, want)
	}
	if n := quorumMasters([]workload{w}, all); n != 3 {
		t.Errorf("the masters to start for %s: %d, want 3", redlockKey, n)
	}
	redislock, err := selectLibraries(all, "redislock")
	if err != nil {
		t.Fatal(err)
	}
	if n := quorumMasters([]workload{w}, redislock); n != 0 {
		t.Errorf("%d masters to start for a library without a quorum lock", n)
	}
	if n := quorumMasters(workloads[:1], all); n != 0 {
		t.Errorf("%d masters to start for %s", n, workloads[0].key)
	}
	opts := []*redis.Options{{Addr: "127.0.0.1:1"}, {Addr: "127.0.0.1:2"}, {Addr: "127.0.0.1:3"}}
	if _, err := openClients(redislock[0], opts, 1); !errors.Is(err, errNoQuorumLock) {
		t.Errorf("redislock's locker over 3 masters: %v, want errNoQuorumLock", err)
	}
}

func TestServersSumTheCountersOfEveryMaster(t *testing.T) {
	ms := startMasters(t, 3)
	ctx := context.Background()
	if err := ms.resetStats(ctx); err != nil {
		t.Fatal(err)
	}
	before, err := ms.stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Master i runs i+1 GETs: 6 commands in all.
	for i, s := range ms {
		for range i + 1 {
			if err := s.admin.Get(ctx, "test:sum").Err(); !errors.Is(err, redis.Nil) {
				t.Fatal(err)
			}
		}
	}
	after, err := ms.stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := after.commands - before.commands; got != 6 {
		t.Errorf("%d commands over the masters, want 6", got)
	}
	desc := ms.describe()
	for _, s := range ms {
		if !strings.Contains(desc, s.opts.Addr) {
			t.Errorf("%q does not name %s", desc, s.opts.Addr)
		}
	}
}

// TestEveryQuorumLockGrantsAndExcludesOnThreeMasters runs the redlock
// workload briefly on 3 masters with each library that has a quorum
// lock. Each must be granted, keep its holders apart, reach every master,
// and read under each hold a token that rose since the last, when its
// locks carry tokens.
func TestEveryQuorumLockGrantsAndExcludesOnThreeMasters(t *testing.T) {
	ms := startMasters(t, 3)
	w := redlockWorkload(t)
	cfg := libConfig{ttl: 30 * time.Second, redsyncDelay: 10 * time.Millisecond, redislockBackoff: 10 * time.Millisecond}
	for _, lib := range libraries(cfg) {
		if !lib.runsIn(w) {
			continue
		}
		t.Run(lib.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			res, err := measure(ctx, ms, w, lib, 300*time.Millisecond, 30*time.Millisecond, "test")
			if err != nil {
				t.Fatal(err)
			}
			if res.Grants == 0 || res.Errors != 0 || res.Violations != 0 {
				t.Errorf("%d grants, %d errors (first: %s), %d violations", res.Grants, res.Errors, res.FirstError, res.Violations)
			}
			// Every lock and unlock speaks to every master.
			if res.RoundTripsPerGrant < float64(len(ms)) {
				t.Errorf("%.2f round trips per grant, want at least one per master", res.RoundTripsPerGrant)
			}
			for _, s := range ms {
				st, err := s.stats(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if st.commands == 0 {
					t.Errorf("master %s ran no command", s.opts.Addr)
				}
			}
			fenced := slices.Contains(fencedLibraries, lib.name)
			switch {
			case res.Fenced != fenced:
				t.Errorf("fenced %v, want %v", res.Fenced, fenced)
			case fenced && (res.Tokens < res.Grants || res.TokensNotRising != 0):
				t.Errorf("%d tokens read in %d grants, %d not rising", res.Tokens, res.Grants, res.TokensNotRising)
			case !fenced && res.Tokens != 0:
				t.Errorf("%d tokens read of locks without tokens", res.Tokens)
			}
		})
	}
}

func TestTokensCellSaysWhetherEveryTokenRose(t *testing.T) {
	tests := []struct {
		r    result
		want string
	}{
		{result{}, "none"},
		{result{Fenced: true, Tokens: 12345}, "12,345 read, each rising"},
		{result{Fenced: true, Tokens: 12345, TokensNotRising: 2}, "2 of 12,345 not rising"},
		{result{Fenced: true}, "none read"},
	}
	for _, tt := range tests {
		if got := tokensCell(tt.r); got != tt.want {
			t.Errorf("tokensCell(%+v) = %q, want %q", tt.r, got, tt.want)
		}
	}
}
