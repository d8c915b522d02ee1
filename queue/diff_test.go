package queue_test

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock/internal/redistest"
)

var (
	seedFlag  = flag.Uint64("diff.seed", 0, "run the differential tests with this seed only (or set "+seedEnv+")")
	stepsFlag = flag.Int("diff.steps", 2000, "calls per seed in the differential tests (a third of it with -race, a quarter with -short)")
)

// steps returns how many calls each seed makes.
func steps() int {
	n := *stepsFlag
	if raceEnabled {
		n /= 3
	}
	if testing.Short() {
		n /= 4 // the quick loop; the full run explores the rest
	}
	return max(n, 1)
}

const seedEnv = "FAIRLOCK_DIFF_SEED"

// seeds returns the seed given with -diff.seed or in the environment, or
// else n fresh random seeds: every run explores new sequences, and a
// failure prints the seed that reproduces it.
func seeds(t *testing.T, n int) []uint64 {
	if *seedFlag != 0 {
		return []uint64{*seedFlag}
	}
	if s := os.Getenv(seedEnv); s != "" {
		seed, err := strconv.ParseUint(s, 10, 64)
		require.NoError(t, err, "%s=%q", seedEnv, s)
		return []uint64{seed}
	}
	out := make([]uint64, n)
	for i := range out {
		out[i] = rand.Uint64()
	}
	return out
}

func reproduce(test string, seed uint64) string {
	return fmt.Sprintf("seed %d: reproduce with go test ./queue -run '^%s$' -diff.seed=%d (or %s=%d)",
		seed, test, seed, seedEnv, seed)
}

// On miniredis the clock is ours: time passes in small steps and exactly
// to deadlines and expiries, and every TTL must match to the millisecond.
func TestScriptsMatchModelOnMiniredis(t *testing.T) {
	for _, seed := range seeds(t, halfIfShort(4)) {
		t.Run(strconv.FormatUint(seed, 10), func(t *testing.T) {
			t.Parallel()
			d := newDiffer(t, newMiniRig(t, receiptTTL), newWorld(1, false, "lock"), rigStart, 0,
				reproduce("TestScriptsMatchModelOnMiniredis", seed))
			d.run(newRandSource(seed), steps())
		})
	}
}

// A real server's clock cannot be moved, so there every lease and waiter
// TTL lasts long enough that nothing expires during the run, time never
// advances on purpose, and times are compared within a second.
func TestScriptsMatchModelOnRedisServer(t *testing.T) {
	srv, err := redistest.Start()
	require.NoError(t, err)
	t.Cleanup(srv.Stop)
	const scale = 100_000
	for _, seed := range seeds(t, 2) {
		t.Run(strconv.FormatUint(seed, 10), func(t *testing.T) {
			t.Parallel()
			r := newRig(t, srv.Addr, redistest.Prefix(t), receiptTTL*scale)
			now, err := r.now(context.Background())
			require.NoError(t, err)
			d := newDiffer(t, r, newWorld(scale, true, "lock"), now, 1000,
				reproduce("TestScriptsMatchModelOnRedisServer", seed))
			d.run(newRandSource(seed), steps()/2)
		})
	}
}

// halfIfShort returns n, or half of it with -short: the quick loop runs
// half the seeds of the runs that cost most (on miniredis, whose every
// script call compiles the scripts afresh; a call on several locks costs
// about twice one on one lock, as the differ reads every lock after each
// call); the full run explores the rest.
func halfIfShort(n int) int {
	if testing.Short() {
		return max(n/2, 1)
	}
	return n
}

// lockNames are the locks of the runs on several locks of one server, in
// key order: MultiLocks take two or three of them at once, with tickets,
// among the calls on each one alone.
var lockNames = []string{"a", "b", "c", "d"}

// The same on several locks of one server, with MultiLocks' tickets: every
// lock's state (the keys of its tickets included) and every wake message are
// compared after each step, and the invariants of tickets checked.
func TestScriptsOfSeveralLocksMatchModelOnMiniredis(t *testing.T) {
	for _, seed := range seeds(t, halfIfShort(4)) {
		t.Run(strconv.FormatUint(seed, 10), func(t *testing.T) {
			t.Parallel()
			d := newDiffer(t, newMiniRig(t, receiptTTL, lockNames...), newWorld(1, false, lockNames...), rigStart, 0,
				reproduce("TestScriptsOfSeveralLocksMatchModelOnMiniredis", seed))
			d.run(newRandSource(seed), steps())
		})
	}
}

func TestScriptsOfSeveralLocksMatchModelOnRedisServer(t *testing.T) {
	srv, err := redistest.Start()
	require.NoError(t, err)
	t.Cleanup(srv.Stop)
	const scale = 100_000
	for _, seed := range seeds(t, halfIfShort(2)) {
		t.Run(strconv.FormatUint(seed, 10), func(t *testing.T) {
			t.Parallel()
			r := newRig(t, srv.Addr, redistest.Prefix(t), receiptTTL*scale, lockNames...)
			now, err := r.now(context.Background())
			require.NoError(t, err)
			d := newDiffer(t, r, newWorld(scale, true, lockNames...), now, 1000,
				reproduce("TestScriptsOfSeveralLocksMatchModelOnRedisServer", seed))
			d.run(newRandSource(seed), steps()/2)
		})
	}
}

// FuzzScriptsMatchModel decodes its input into calls (three bytes each:
// the kind, then two arguments; see gen_test.go) and runs them against
// the model and the scripts on miniredis.
func FuzzScriptsMatchModel(f *testing.F) {
	// A holder, two waiters; the release hands over to the first, which
	// then claims the hold by polling.
	f.Add([]byte{4, 0, 0, 0, 0, 1, 0, 1, 3, 6, 1, 1, 0, 0, 1})
	// The head dies; time runs to its deadline, 1 ms short and exactly;
	// then the release skips it.
	f.Add([]byte{4, 0, 0, 0, 0, 1, 0, 1, 3, 10, 0, 0, 12, 1, 0, 12, 3, 0, 6, 1, 1, 0, 1, 3})
	// Re-sent try, re-entry and releases, now and after receipts expire.
	f.Add([]byte{4, 0, 0, 15, 0, 0, 5, 1, 0, 15, 0, 0, 6, 1, 0, 15, 0, 0, 6, 1, 0, 15, 1, 0, 12, 0, 8, 15, 2, 0})
	// A hand-over races with the waiter's cancel; then a force-unlock.
	f.Add([]byte{4, 0, 0, 0, 0, 1, 0, 1, 3, 6, 1, 1, 9, 0, 0, 9, 0, 0, 11, 0, 0})
	// An election: a candidate leads, another waits with its value; the
	// release hands the leadership on, whose holder proclaims a new value;
	// a force-unlock then leaves no leader.
	f.Add([]byte{0, 24, 2, 0, 43, 3, 6, 1, 1, 16, 1, 3, 11, 0, 0})
	for seed := range uint64(3) {
		b := make([]byte, 600)
		src := newRandSource(seed)
		for i := range b {
			b[i], _ = src.next()
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		d := newDiffer(t, newMiniRig(t, receiptTTL), newWorld(1, false, "lock"), rigStart, 0, "a fuzz input")
		d.run(&bytesSource{data}, 400)
	})
}

// FuzzScriptsOfSeveralLocksMatchModel is FuzzScriptsMatchModel on the
// locks lockNames, four bytes a call (the fourth picks the lock, or the
// locks of a MultiLock).
func FuzzScriptsOfSeveralLocksMatchModel(f *testing.F) {
	for seed := range uint64(3) {
		b := make([]byte, 800)
		src := newRandSource(seed)
		for i := range b {
			b[i], _ = src.next()
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		d := newDiffer(t, newMiniRig(t, receiptTTL, lockNames...), newWorld(1, false, lockNames...), rigStart, 0, "a fuzz input")
		d.run(&bytesSource{data}, 400)
	})
}
