package fairlock_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock"
)

// A failover or a restart of Redis in the middle of a MultiLock's Lock,
// or while it holds, leaves no partial hold: the call is granted every
// name or holds none, what Redis keeps of a hold that ended expires
// within its lease and is never renewed again, and afterwards anyone can
// take every name. The helpers here check that; the tests are in
// multilock_failover_test.go (one server, and Sentinel) and
// multilock_cluster_fault_test.go.

const (
	// multiLease is the lease of the MultiLocks under test: shorter than
	// any failover, so a hold the watchdog cannot renew through one is
	// lost, and what Redis keeps of it expires before the failover ends.
	multiLease     = time.Second
	multiWaiterTTL = 3 * time.Second
	// multiBound bounds a Lock through a failover or a restart: it
	// catches a hang, not a slow call.
	multiBound = 45 * time.Second
	// settleBound bounds the reads of the locks' state after a failover
	// or a loss: they may fail until the Client has a fresh map of the
	// deployment.
	settleBound = 15 * time.Second
)

// multiFault is a MultiLock under test, on a Client of its own, and a
// Client that reads what Redis keeps of it.
type multiFault struct {
	t     *testing.T
	e     *env
	probe *fairlock.Client
	c     *fairlock.Client // the MultiLock's
	lease time.Duration    // of c's holds
	ml    *fairlock.MultiLock
	names []string // ml.Names(): the order Lock takes them in
}

func newMultiFault(t *testing.T, e *env, names []string, lease time.Duration) *multiFault {
	return newObservedMultiFault(t, e, names, lease, nil)
}

func newObservedMultiFault(t *testing.T, e *env, names []string, lease time.Duration, o fairlock.Observer) *multiFault {
	f := &multiFault{t: t, e: e, probe: e.client(), lease: lease}
	opts := []fairlock.Option{fairlock.WithLease(lease), fairlock.WithWaiterTTL(multiWaiterTTL)}
	if o != nil {
		opts = append(opts, fairlock.WithObserver(o))
	}
	f.c = e.client(opts...)
	f.ml = f.c.MultiLock(names)
	f.names = f.ml.Names()
	return f
}

// trace is what Redis keeps of the MultiLock's Client in one lock.
type trace struct {
	held    bool
	expires time.Time // of the hold, on the server's clock
	token   int64
	waits   bool // a live entry in line
}

func (tr trace) String() string {
	s := []string{}
	if tr.held {
		s = append(s, fmt.Sprintf("held under token %d until %v", tr.token, tr.expires.Format("15:04:05.000")))
	}
	if tr.waits {
		s = append(s, "in line")
	}
	return strings.Join(s, ", ")
}

// inspect reads the state of the lock name, again while reads fail (the
// probe's map of a Cluster may be stale after a failover), at most
// settleBound.
func (f *multiFault) inspect(name string) (fairlock.LockState, error) {
	deadline := time.Now().Add(settleBound)
	for {
		st, err := f.probe.Inspect(context.Background(), name)
		if err == nil || time.Now().After(deadline) {
			return st, err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// traceOf returns what Redis keeps of the MultiLock's Client in the lock
// name.
func (f *multiFault) traceOf(name string) (trace, error) {
	st, err := f.inspect(name)
	if err != nil {
		return trace{}, err
	}
	var tr trace
	if st.Held && st.Client == f.c.ID() {
		tr.held, tr.expires, tr.token = true, st.At.Add(st.LeaseLeft), st.Token
	}
	tr.waits = waitsIn(st, f.c.ID())
	return tr, nil
}

// traces returns what Redis keeps of the MultiLock's Client, per name
// that keeps anything.
func (f *multiFault) traces() (map[string]trace, error) {
	out := map[string]trace{}
	for _, name := range f.names {
		tr, err := f.traceOf(name)
		if err != nil {
			return nil, err
		}
		if tr.held || tr.waits {
			out[name] = tr
		}
	}
	return out, nil
}

// waitsIn reports whether a live entry of the Client id is in the line st
// shows.
func waitsIn(st fairlock.LockState, id string) bool {
	for _, w := range st.Waiters {
		if w.Client == id && w.TimeLeft > 0 {
			return true
		}
	}
	return false
}

// requireGone asserts that what Redis keeps of the MultiLock after its
// holds ended, its call failed or it let go at ended goes: no hold of it
// may last past ended plus its lease (it would have been renewed or taken
// after ended), and within bound none is left, nor any entry in line.
// requireNoneBut asserts that Redis keeps nothing of the MultiLock in any
// of its names but but (a name on a dead master, which cannot be read).
func (f *multiFault) requireNoneBut(but, what string) {
	f.t.Helper()
	for _, name := range f.names {
		if name != but {
			now, err := f.traceOf(name)
			require.NoError(f.t, err)
			require.Equal(f.t, trace{}, now, "%s %q", what, name)
		}
	}
}

func (f *multiFault) requireGone(ended time.Time, bound time.Duration) {
	f.t.Helper()
	limit := ended.Add(f.lease + 250*time.Millisecond) // the servers' and our clocks are one machine's
	deadline := time.Now().Add(bound)
	for {
		tr, err := f.traces()
		for name, one := range tr {
			require.False(f.t, one.held && one.expires.After(limit),
				"%q is held by the MultiLock past its lease from %v: %v", name, ended.Format("15:04:05.000"), one)
		}
		if err == nil && len(tr) == 0 {
			return
		}
		if time.Now().After(deadline) {
			require.NoError(f.t, err)
			require.Empty(f.t, tr, "what Redis keeps of the MultiLock %v after it ended", bound)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// requireWhole asserts that mctx carries a hold of every name, and that
// Redis agrees: each name held by the MultiLock's Client, once, under the
// token mctx carries, all for one owner. It returns the tokens.
func (f *multiFault) requireWhole(mctx context.Context) map[string]int64 {
	f.t.Helper()
	require.NoError(f.t, mctx.Err(), "the MultiLock's context is live")
	tokens := map[string]int64{}
	owner := ""
	for _, name := range f.names {
		tok, err := f.ml.Token(mctx, name)
		require.NoError(f.t, err, name)
		require.Positive(f.t, tok, name)
		st, err := f.inspect(name)
		require.NoError(f.t, err)
		require.True(f.t, st.Held, "%q is held", name)
		require.Equal(f.t, f.c.ID(), st.Client, "%q is held by the MultiLock's Client", name)
		require.Equal(f.t, 1, st.Count, "%q is held once", name)
		require.Equal(f.t, tok, st.Token, "%q is held under the token the context carries", name)
		if owner == "" {
			owner = st.Owner
		}
		require.Equal(f.t, owner, st.Owner, "every name is held by one owner")
		tokens[name] = tok
	}
	return tokens
}

// tokensIn returns the token of each name that mctx carries, without
// asking Redis.
func (f *multiFault) tokensIn(mctx context.Context) map[string]int64 {
	f.t.Helper()
	tokens := map[string]int64{}
	for _, name := range f.names {
		tok, err := f.ml.Token(mctx, name)
		require.NoError(f.t, err, name)
		tokens[name] = tok
	}
	return tokens
}

// unlockWhole releases a whole grant and returns when it let go.
func (f *multiFault) unlockWhole(mctx context.Context) time.Time {
	f.t.Helper()
	require.NoError(f.t, f.ml.Unlock(mctx))
	released := time.Now()
	requireDone(f.t, mctx, time.Second)
	return released
}

// requireLost asserts that the MultiLock's context ended because a lease
// was lost, and that Unlock says so. It returns when the context ended.
func (f *multiFault) requireLost(mctx context.Context, within time.Duration) time.Time {
	f.t.Helper()
	requireDone(f.t, mctx, within)
	ended := time.Now()
	require.ErrorIs(f.t, context.Cause(mctx), fairlock.ErrLeaseLost)
	err := f.ml.Unlock(mctx)
	require.ErrorIs(f.t, err, fairlock.ErrLeaseLost)
	f.t.Logf("context ended: %v; Unlock: %v", context.Cause(mctx), err)
	return ended
}

// requireFreeForOthers takes every name through a new Client, one Lock
// each, and gives it back: nothing is left that blocks them.
func (f *multiFault) requireFreeForOthers() {
	f.t.Helper()
	other := f.e.client(fairlock.WithWaiterTTL(multiWaiterTTL))
	for _, name := range f.names {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		m := other.Mutex(name)
		hctx, err := m.Lock(ctx)
		cancel()
		require.NoError(f.t, err, "another caller takes %q", name)
		require.NoError(f.t, m.Unlock(hctx))
	}
}
