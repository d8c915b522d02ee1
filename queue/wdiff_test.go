package queue_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock/internal/redistest"
)

// The differential tests of weighted locks: random sequences of calls on
// a RWMutex and a Semaphore (see wgen_test.go), run on the model and on
// the scripts, compared after every step (see wdiffer).

// newWeightedMiniRig returns a rig of the weighted locks on a fresh
// miniredis whose clock is ours (see newMiniRig).
func newWeightedMiniRig(t testing.TB, receiptTTL int64) *rig {
	mr := startMiniredis(t)
	keys, err := weightedLocks("m")
	require.NoError(t, err)
	return newRigOf(t, mr.Addr(), receiptTTL, keys).onMiniredis(mr)
}

// On miniredis the clock is ours: leases, deadlines and receipts run out
// during the run, exactly to the millisecond.
func TestWeightedScriptsMatchModelOnMiniredis(t *testing.T) {
	for _, seed := range seeds(t, halfIfShort(4)) {
		t.Run(strconv.FormatUint(seed, 10), func(t *testing.T) {
			t.Parallel()
			d := newWDiffer(t, newWeightedMiniRig(t, receiptTTL), newWWorld(1, false), rigStart, 0,
				reproduce("TestWeightedScriptsMatchModelOnMiniredis", seed))
			d.run(newRandSource(seed), steps())
		})
	}
}

// A real server's clock cannot be moved, so there, as for the Mutex
// (TestScriptsMatchModelOnRedisServer), every duration lasts long enough
// that nothing expires during the run, and times are compared within a
// second.
func TestWeightedScriptsMatchModelOnRedisServer(t *testing.T) {
	srv, err := redistest.Start()
	require.NoError(t, err)
	t.Cleanup(srv.Stop)
	const scale = 100_000
	for _, seed := range seeds(t, 2) {
		t.Run(strconv.FormatUint(seed, 10), func(t *testing.T) {
			t.Parallel()
			keys, err := weightedLocks(redistest.Prefix(t))
			require.NoError(t, err)
			r := newRigOf(t, srv.Addr, receiptTTL*scale, keys)
			now, err := r.now(context.Background())
			require.NoError(t, err)
			d := newWDiffer(t, r, newWWorld(scale, true), now, 1000,
				reproduce("TestWeightedScriptsMatchModelOnRedisServer", seed))
			d.run(newRandSource(seed), steps()/2)
		})
	}
}

// FuzzWeightedScriptsMatchModel decodes its input into calls on the
// weighted locks (four bytes each: the kind, two arguments and the lock;
// see wgen_test.go) and runs them against the model and the scripts on
// miniredis.
func FuzzWeightedScriptsMatchModel(f *testing.F) {
	// The Semaphore: a holder of 2, a waiter of 2 and one of 1 behind it;
	// the release grants both, and their polls claim the grants.
	f.Add([]byte{0, 0, 57, 1, 0, 1, 57, 1, 0, 2, 56, 1, 8, 1, 1, 1, 0, 1, 57, 1, 0, 2, 56, 1})
	// The RWMutex: a writer, a reader behind it; the writer takes a read
	// level, gives up its write level (a downgrade, which grants the
	// reader), then is refused an upgrade.
	f.Add([]byte{0, 0, 57, 0, 0, 1, 56, 0, 6, 1, 1, 0, 8, 1, 1, 0, 6, 2, 3, 0, 0, 1, 56, 0})
	// The Semaphore's capacity lowered below what is held and the head's
	// weight (refused at its poll), then raised, which grants the next
	// waiter; time runs past the leases' ends, and a try finds the
	// permits given back.
	f.Add([]byte{0, 0, 44, 1, 0, 1, 57, 1, 14, 0, 0, 1, 0, 1, 57, 1, 0, 2, 56, 1, 14, 0, 3, 1, 15, 0, 8, 1, 15, 0, 8, 1, 4, 1, 56, 1})
	for seed := range uint64(3) {
		b := make([]byte, 800)
		src := newRandSource(seed)
		for i := range b {
			b[i], _ = src.next()
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		d := newWDiffer(t, newWeightedMiniRig(t, receiptTTL), newWWorld(1, false), rigStart, 0, "a fuzz input")
		d.run(&bytesSource{data}, 400)
	})
}
