package queue_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock/internal/redistest"
)

// The differential tests of the quorum scripts: random calls of a few
// Lock calls on one master (see qgen_test.go), run on the model and on a
// real redis-server, compared after every step (see qdiffer).

// newQuorumDiffer returns a differ of a quorum lock of the test's own on
// the server at addr, whose scripts' clock runs skew µs ahead.
func newQuorumDiffer(t testing.TB, addr string, skew int64, about string) *qdiffer {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = rdb.Close() })
	r, err := newQRig(context.Background(), rdb, redistest.Prefix(t))
	require.NoError(t, err)
	t.Cleanup(r.close)
	return newQDiffer(t, r, skew, about)
}

// qskews are the scripts' clock skews the runs start with: none, and a
// day ahead (the tokens' clock term and the counter's PXAT follow it).
var qskews = []int64{0, 86_400_000_000}

// Every reply, the whole state of the lock and every wake message agree
// after each call, from a scripts' clock that runs with the server's or a
// day ahead of it, and jumps as the calls go (see qdiffer).
func TestQuorumScriptsMatchModelOnRedisServer(t *testing.T) {
	srv, err := redistest.Start()
	require.NoError(t, err)
	t.Cleanup(srv.Stop)
	n := 3
	if testing.Short() {
		n = 1 // the quick loop: one seed; CI runs three
	}
	for _, seed := range seeds(t, n) {
		t.Run(strconv.FormatUint(seed, 10), func(t *testing.T) {
			t.Parallel()
			d := newQuorumDiffer(t, srv.Addr, qskews[seed%uint64(len(qskews))], reproduce("TestQuorumScriptsMatchModelOnRedisServer", seed))
			d.run(newRandSource(seed), steps())
		})
	}
}

// FuzzQuorumScriptsMatchModel decodes its input into calls (three bytes
// each: the kind, then two arguments; see qgen_test.go) and runs them on
// the model and on the scripts of a redis-server.
func FuzzQuorumScriptsMatchModel(f *testing.F) {
	// A try takes the free lock; two calls join with tickets, the smaller
	// second; the holder yields; the smaller ticket is handed the lock.
	f.Add([]byte{4, 0, 1, 0, 1, 6, 0, 2, 11, 6, 0, 0, 6, 0, 0, 6, 1, 0})
	// A join, a cancel, and a late join of the cancelled call.
	f.Add([]byte{0, 0, 2, 8, 0, 0, 0, 240, 0})
	// An election: a candidate's try leads with its value, another
	// candidate joins with its own; the leader proclaims, and its release
	// hands the leadership on in place (the new leader's hold keeps the
	// vseq written before).
	f.Add([]byte{4, 0, 18, 0, 2, 24, 22, 33, 6, 9, 1, 1})
	for seed := range uint64(3) {
		b := make([]byte, 600)
		src := newRandSource(seed)
		for i := range b {
			b[i], _ = src.next()
		}
		f.Add(b)
	}
	srv, err := redistest.Start()
	require.NoError(f, err)
	f.Cleanup(srv.Stop)
	rdb := srv.Client(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		// The server is this run's alone: each input starts on an empty
		// one, so that the differ's KEYS stays cheap.
		require.NoError(t, rdb.FlushAll(context.Background()).Err())
		d := newQuorumDiffer(t, srv.Addr, 0, "a fuzz input")
		d.run(&bytesSource{data}, 300)
	})
}
