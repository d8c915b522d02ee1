package fairlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/fairlock/fairlock/queue"
)

// Redis restarts, or fails over, while a Semaphore and a RWMutex are held
// and callers wait in their lines: nobody is stuck, every caller in line
// is granted afterwards, the holds are kept (a lease that outlasts the
// failover, with the grant on the replica) or lost with ErrLeaseLost, and
// never are more permits held than the capacity, nor a writer beside
// anyone, as the callers see it and as Redis keeps it.

// weightedLine is a hold of a weighted lock, on a Client of its own, and
// callers in line behind it, each on a Client of its own, who take the
// lock in turn once the hold lets go, and check it as they hold it.
type weightedLine struct {
	t      *testing.T
	name   string
	label  string // the name and the kind, for messages
	sem    bool
	holder weightedCall
	hctx   context.Context
	token  int64 // the hold's
	cr     *crowd
	wg     sync.WaitGroup
	errs   chan error
}

// newWeightedLine takes hold (see callOf) of the lock name, then puts
// waiters in line behind it in their order.
func (e *env) newWeightedLine(name string, sem bool, hold string, waiters []string, opts ...fairlock.Option) *weightedLine {
	t := e.t.(*testing.T)
	ctx := context.Background()
	l := &weightedLine{t: t, name: name, label: name + " (" + weightedKindOf(sem) + ")", sem: sem,
		errs: make(chan error, len(waiters))}
	if sem {
		l.cr = newCrowd(crashPermits)
	} else {
		l.cr = newCrowd(0)
	}
	l.holder = callOf(e.client(opts...), sem, name, hold)
	var err error
	l.hctx, err = l.holder.Lock(ctx)
	require.NoError(t, err)
	l.token, err = l.holder.token(l.hctx)
	require.NoError(t, err)
	for i, spec := range waiters {
		w := callOf(e.client(opts...), sem, name, spec)
		l.wg.Go(func() { l.errs <- l.take(w) })
		e.waitWeightedQueued(name, weightedKindOf(sem), i+1)
	}
	return l
}

// take is one caller's turn: it waits, holds a moment and lets go.
func (l *weightedLine) take(w weightedCall) error {
	ctx, cancel := context.WithTimeout(context.Background(), multiBound)
	defer cancel()
	hctx, err := w.Lock(ctx)
	if err != nil {
		return err
	}
	tok, err := w.token(hctx)
	if err != nil {
		return err
	}
	if tok <= l.token {
		return fmt.Errorf("granted under token %d, not above the hold before the fault (%d)", tok, l.token)
	}
	l.cr.enter(w.weight, w.write, tok)
	time.Sleep(2 * time.Millisecond)
	l.cr.leave(w.weight, w.write)
	return w.unlock(hctx)
}

// letGo ends the hold after the fault, as want says it must have gone:
// "kept" (the hold is live and still in Redis under its token), "lost"
// (its context ended with ErrLeaseLost), or "either".
func (l *weightedLine) letGo(e *env, want string) {
	t := l.t
	t.Helper()
	if want == "lost" {
		requireDone(t, l.hctx, 10*time.Second)
	}
	if l.hctx.Err() != nil {
		require.NotEqual(t, "kept", want, "the hold of %s was lost: %v", l.label, context.Cause(l.hctx))
		require.ErrorIs(t, context.Cause(l.hctx), fairlock.ErrLeaseLost, l.label)
		require.ErrorIs(t, l.holder.unlock(l.hctx), fairlock.ErrLeaseLost, l.label)
		t.Logf("the hold of %s was lost", l.label)
		return
	}
	if want == "kept" {
		kind := weightedKindOf(l.sem)
		var st weightedState
		r := e.faultReader()
		require.Eventually(t, func() bool {
			var err error
			st, err = r.state(l.name, kind)
			return err == nil
		}, settleBound, 20*time.Millisecond, "the state of %s is read after the fault", l.label)
		tokens := []int64{}
		for _, h := range st.holders {
			tokens = append(tokens, h.token)
		}
		require.Equal(t, []int64{l.token}, tokens, "%s is held by the hold from before the fault alone", l.label)
	}
	err := l.holder.unlock(l.hctx)
	t.Logf("the hold of %s was live after the fault; its release: %v", l.label, err)
	if err != nil && !errors.Is(err, fairlock.ErrLeaseLost) {
		// A release the deployment did not answer yet goes on.
		require.ErrorContains(t, err, "sent again", l.label)
	}
}

// awaitLine waits until every caller in line has had its turn, and
// checks their holds.
func (l *weightedLine) awaitLine() {
	l.t.Helper()
	l.wg.Wait()
	close(l.errs)
	for err := range l.errs {
		require.NoError(l.t, err, l.label)
	}
	l.cr.check(l.t)
}

// faultReader reads a deployment through a fault with a client of its
// own, which it replaces after a failed read: the new one reads the
// deployment's map afresh (a Cluster's slots, a Sentinel's primary),
// where the old one could go on sending to a dead node for up to a
// minute and, failing to dial it, keep a goroutine that retries the dial
// alive past the test.
type faultReader struct {
	e   *env
	rdb redis.UniversalClient
}

func (e *env) faultReader() *faultReader { return &faultReader{e: e, rdb: e.dial(e.t)} }

// state reads what Redis keeps of the weighted lock name of kind.
func (r *faultReader) state(name, kind string) (weightedState, error) {
	st, err := weightedStateIn(r.rdb, r.e.weightedKeys(name, kind))
	if err != nil {
		_ = r.rdb.Close()
		r.rdb = r.e.dial(r.e.t)
	}
	return st, err
}

// watchWeighted samples what Redis keeps of the weighted locks name of
// kinds until stop is called, which returns what broke their promise:
// more weight held than the capacity, holders' weights that do not add up
// to it, a writer beside another holder; or that no read succeeded.
// Failed reads (in a failover) are skipped. The test's end stops it too.
func (e *env) watchWeighted(name string, kinds ...string) (stop func() []string) {
	done := make(chan struct{})
	var broken []string
	read := 0
	var wg sync.WaitGroup
	var once sync.Once
	r := e.faultReader()
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(20 * time.Millisecond):
			}
			for _, kind := range kinds {
				st, err := r.state(name, kind)
				if err != nil {
					continue
				}
				read++
				var sum int64
				for _, h := range st.holders {
					sum += h.weight
				}
				switch {
				case sum != st.used:
					broken = append(broken, fmt.Sprintf("%s: holders weigh %d, %d counted", kind, sum, st.used))
				case kind == queue.KindSemaphore && st.used > st.capacity:
					broken = append(broken, fmt.Sprintf("%s: %d of %d permits held", kind, st.used, st.capacity))
				case st.writers() > 1 || st.writers() == 1 && len(st.holders) > 1:
					broken = append(broken, fmt.Sprintf("%s: a writer beside another holder: %v", kind, st.holders))
				}
			}
		}
	})
	stop = func() []string {
		once.Do(func() {
			close(done)
			wg.Wait()
			if read == 0 {
				broken = append(broken, "no state was read")
			}
		})
		return broken
	}
	e.t.Cleanup(func() { stop() })
	return stop
}

// weightedFaultRun holds a Semaphore of 3 (every permit) and a RWMutex
// (the write lock) of one name, with lease, puts callers in both lines,
// runs fail (which returns once the deployment serves again), and lets
// the holds go as want says they must have gone (see letGo): then every
// caller in line is granted in turn. It ends with a fresh caller taking
// each lock: nothing of the fault is left in the way.
func weightedFaultRun(t *testing.T, e *env, lease time.Duration, want string, fail func()) {
	const name = "failover"
	opts := []fairlock.Option{fairlock.WithLease(lease), fairlock.WithWaiterTTL(multiWaiterTTL)}
	stop := e.watchWeighted(name, queue.KindSemaphore, queue.KindRWMutex)
	lines := []*weightedLine{
		e.newWeightedLine(name, true, "3", []string{"2", "1", "1", "2"}, opts...),
		e.newWeightedLine(name, false, "w", []string{"r", "r", "w", "r"}, opts...),
	}

	fail()
	recovered := time.Now()
	for _, l := range lines {
		l.letGo(e, want)
	}
	for _, l := range lines {
		l.awaitLine()
	}
	t.Logf("every caller in line granted %v after the deployment recovered", time.Since(recovered))
	require.Empty(t, stop(), "what Redis kept broke the locks' promise")

	fresh := e.client(fairlock.WithWaiterTTL(multiWaiterTTL))
	for _, c := range []weightedCall{
		acquireCall(fresh.Semaphore(name, crashPermits), crashPermits),
		writeCall(fresh.RWMutex(name)),
	} {
		ctx, cancel := context.WithTimeout(context.Background(), settleBound+lease)
		hctx, err := c.Lock(ctx)
		cancel()
		require.NoError(t, err, "a fresh caller takes the whole lock")
		require.NoError(t, c.unlock(hctx))
	}
}

func TestWeightedLocksAcrossARestartLoseTheirHoldsAndGrantTheirLines(t *testing.T) {
	redistest.Slow(t)
	t.Parallel()
	e := newPrivateEnv(t)
	weightedFaultRun(t, e, time.Second, "lost", func() {
		require.NoError(t, e.srv.Restart())
	})
}

func TestWeightedLocksThroughASentinelFailover(t *testing.T) {
	redistest.Slow(t)
	t.Parallel()
	for _, tc := range []struct {
		name  string
		fail  func(set *redistest.SentinelSet, ctx context.Context) (string, error)
		lease time.Duration
		want  string
	}{
		// The grants are on the replica before the kill, and the lease
		// outlasts the failover: the holds go on on the new primary.
		{"primary killed", (*redistest.SentinelSet).KillPrimary, 15 * time.Second, "kept"},
		// A lease shorter than the switch may run out in it.
		{"graceful", (*redistest.SentinelSet).Failover, time.Second, "either"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			set := redistest.SentinelFor(t, 1, 3)
			e := sentinelEnv(t, set)
			weightedFaultRun(t, e, tc.lease, tc.want, func() {
				replicated(t, e.rdb)
				start := time.Now()
				old, err := tc.fail(set, context.Background())
				require.NoError(t, err)
				_, err = set.WaitFailover(old, 30*time.Second)
				require.NoError(t, err)
				t.Logf("sentinels switched in %v", time.Since(start))
			})
		})
	}
}

func TestWeightedLocksThroughAClusterMasterKilled(t *testing.T) {
	redistest.Slow(t)
	t.Parallel()
	cluster := redistest.ClusterFor(t, 3, 1)
	e := clusterEnv(t, cluster)
	key := "{failover}"
	master, err := cluster.MasterOf(context.Background(), e.prefix+":"+key)
	require.NoError(t, err)
	weightedFaultRun(t, e, 15*time.Second, "kept", func() {
		replicated(t, cluster.Node(master).Client(t))
		killed := time.Now()
		require.NoError(t, cluster.Kill(master))
		_, err := cluster.WaitFailover(key, master, 30*time.Second)
		require.NoError(t, err)
		t.Logf("cluster failed over in %v", time.Since(killed))
	})
}
