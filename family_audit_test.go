package fairlock_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/fairlock/fairlock/queue"
)

// The failover audit covers every primitive. A graceful Sentinel failover
// loses the old primary's last writes: a release made there, or a
// waiter's give-up, is undone on the new primary. The hold that comes back
// blocks its lock, or keeps its weight, until its lease runs out; the
// entry that comes back holds up the line behind it until the waiter TTL
// (30 s each here). The audit of the Client whose call it was releases it
// within seconds, for a Mutex, a Semaphore, a RWMutex's read and write
// holds and a MultiLock alike.
//
// The sets have three sentinels, as deployments do: a Client leaves the
// old primary at the first sentinel's announcement of the switch, so its
// audit sees what came back even while the sentinel its failover client
// asks has not heard of the switch yet.

// auditBound is how soon after the switch a caller of another Client must
// be granted what a failover brought back: far below the 30 s lease and
// waiter TTL.
const auditBound = 10 * time.Second

// releaseCase is a primitive whose release a failover undoes.
type releaseCase struct {
	name string
	// hold takes a hold through c, and returns the release that the
	// failover undoes and, if any, what must still hold after the audit.
	hold func(t *testing.T, e *env, c *fairlock.Client) (release func() error, kept func(t *testing.T))
	// next is a caller of another Client that waits for that hold.
	next func(c *fairlock.Client) locker
}

var releaseCases = []releaseCase{
	{"Mutex", func(t *testing.T, _ *env, c *fairlock.Client) (func() error, func(*testing.T)) {
		m := c.Mutex("m")
		held := mustHold(t, m.Lock)
		return func() error { return m.Unlock(held) }, nil
	}, func(c *fairlock.Client) locker { return c.Mutex("m") }},
	{"Semaphore", func(t *testing.T, _ *env, c *fairlock.Client) (func() error, func(*testing.T)) {
		s := c.Semaphore("sem", 3)
		held := mustHold(t, permitsOf{s, 2}.Lock)
		return func() error { return s.Release(held) }, nil
	}, func(c *fairlock.Client) locker { return permitsOf{c.Semaphore("sem", 3), 2} }},
	{"RWMutexRead", func(t *testing.T, _ *env, c *fairlock.Client) (func() error, func(*testing.T)) {
		rw := c.RWMutex("rw-read")
		held := mustHold(t, rw.RLock)
		return func() error { return rw.RUnlock(held) }, nil
	}, func(c *fairlock.Client) locker { return c.RWMutex("rw-read") }},
	{"RWMutexWriteReentered", func(t *testing.T, _ *env, c *fairlock.Client) (func() error, func(*testing.T)) {
		rw := c.RWMutex("rw-write")
		held := mustHold(t, rw.Lock)
		inner := mustHold(t, func(context.Context) (context.Context, error) { return rw.Lock(held) })
		return func() error {
			return errors.Join(rw.Unlock(inner), rw.Unlock(held))
		}, nil
	}, func(c *fairlock.Client) locker { return readerOf{c.RWMutex("rw-write")} }},
	{"RWMutexDowngrade", func(t *testing.T, e *env, c *fairlock.Client) (func() error, func(*testing.T)) {
		// The read level under the write hold shares its owner id, and
		// stays: the audit gives back the write level alone.
		rw := c.RWMutex("rw-down")
		held := mustHold(t, rw.Lock)
		read := mustHold(t, func(context.Context) (context.Context, error) { return rw.RLock(held) })
		return func() error { return rw.Unlock(held) }, func(t *testing.T) {
			token, err := rw.Token(read)
			require.NoError(t, err)
			require.NoError(t, read.Err(), "the read level taken under the write hold goes on")
			st, err := e.weightedStateOf("rw-down", queue.KindRWMutex)
			require.NoError(t, err)
			kept := false
			for _, h := range st.holders {
				kept = kept || h.token == token && h.shared == 1 && h.excl == 0
			}
			require.True(t, kept, "Redis keeps the read level under its token: %v", st.holders)
			require.NoError(t, rw.RUnlock(read))
		}
	}, func(c *fairlock.Client) locker { return readerOf{c.RWMutex("rw-down")} }},
	{"MultiLock", func(t *testing.T, _ *env, c *fairlock.Client) (func() error, func(*testing.T)) {
		ml := c.MultiLock([]string{"ml-1", "ml-2"})
		held := mustHold(t, ml.Lock)
		return func() error { return ml.Unlock(held) }, nil
	}, func(c *fairlock.Client) locker { return c.MultiLock([]string{"ml-2", "ml-1"}) }},
}

// Each primitive is held through a Client of its own, and released on the
// old primary once the replica is promoted: the failover undoes every
// release. A caller of another Client is then granted each within
// seconds of the switch, and a read level taken under a write hold whose
// release came back is kept.
func TestReleasesAFailoverUndidAreMadeAgainForEveryPrimitive(t *testing.T) {
	redistest.Slow(t)
	t.Parallel()
	set := redistest.SentinelFor(t, 1, 3)
	e := sentinelEnv(t, set)
	logs := make([]*logRecorder, len(releaseCases))
	releases := make([]func() error, len(releaseCases))
	kept := make([]func(*testing.T), len(releaseCases))
	for i, c := range releaseCases {
		logs[i] = &logRecorder{}
		releases[i], kept[i] = c.hold(t, e, e.client(fairlock.WithLogger(slog.New(logs[i]))))
	}
	replicated(t, e.rdb)

	old := failoverUntilPromoted(t, set)
	for i, c := range releaseCases {
		require.NoError(t, releases[i](), c.name)
	}
	_, err := set.WaitFailover(old, 30*time.Second)
	require.NoError(t, err)
	switched := time.Now()

	nexts := make([]locker, len(releaseCases))
	for i, c := range releaseCases {
		nexts[i] = c.next(e.client())
	}
	grants := grantAll(nexts)
	for i, c := range releaseCases {
		t.Run(c.name, func(t *testing.T) {
			requireGrantedSoon(t, grants[i], switched, logs[i])
			if kept[i] != nil {
				kept[i](t)
			}
		})
	}
}

// quitCase is a primitive whose waiter gives up in a failover that undoes
// the give-up, while a hold of another Client keeps it waiting.
type quitCase struct {
	name string
	// block takes that hold through c; it is kept to the end.
	block func(t *testing.T, c *fairlock.Client)
	// quitter waits behind it; queued waits until it is in line.
	quitter func(c *fairlock.Client) locker
	queued  func(e *env)
	// next is a caller of a third Client that is granted beside the hold
	// at once unless the quitter's entry holds it up.
	next func(c *fairlock.Client) locker
}

var quitCases = []quitCase{
	{"Semaphore", func(t *testing.T, c *fairlock.Client) { mustHold(t, permitsOf{c.Semaphore("sem", 2), 1}.Lock) },
		func(c *fairlock.Client) locker { return permitsOf{c.Semaphore("sem", 2), 2} },
		func(e *env) { e.waitWeightedQueued("sem", queue.KindSemaphore, 1) },
		func(c *fairlock.Client) locker { return permitsOf{c.Semaphore("sem", 2), 1} }},
	{"RWMutex", func(t *testing.T, c *fairlock.Client) { mustHold(t, c.RWMutex("rw").RLock) },
		func(c *fairlock.Client) locker { return c.RWMutex("rw") },
		func(e *env) { e.waitWeightedQueued("rw", queue.KindRWMutex, 1) },
		func(c *fairlock.Client) locker { return readerOf{c.RWMutex("rw")} }},
	{"MultiLockTicket", func(t *testing.T, c *fairlock.Client) { mustHold(t, c.Mutex("ml-2").Lock) },
		func(c *fairlock.Client) locker { return c.MultiLock([]string{"ml-1", "ml-2"}) },
		func(e *env) { e.waitQueued("ml-1", 1); e.waitQueued("ml-2", 1) },
		func(c *fairlock.Client) locker { return c.Mutex("ml-1") }},
}

// A waiter of each primitive, on a Client with a 30 s waiter TTL, gives up
// on the old primary once the replica is promoted: the failover puts its
// entry back in line, where it would hold up the callers behind it (a
// weighted lock's head that does not fit, a ticket that waits for a held
// name while it heads the line of a free one). A caller of a third Client
// that would be granted at once if the entry were gone is granted each
// within seconds of the switch.
func TestGiveUpsAFailoverUndidAreMadeAgainForEveryPrimitive(t *testing.T) {
	redistest.Slow(t)
	t.Parallel()
	set := redistest.SentinelFor(t, 1, 3)
	e := sentinelEnv(t, set)
	logs := make([]*logRecorder, len(quitCases))
	quits := make([]func(), len(quitCases))
	quitters := make([]<-chan result, len(quitCases))
	for i, c := range quitCases {
		c.block(t, e.client())
		logs[i] = &logRecorder{}
		qc := e.client(fairlock.WithWaiterTTL(30*time.Second), fairlock.WithLogger(slog.New(logs[i])))
		ctx, quit := context.WithCancel(context.Background())
		t.Cleanup(quit)
		quits[i], quitters[i] = quit, lockAsync(ctx, c.quitter(qc))
		c.queued(e)
	}
	replicated(t, e.rdb)

	old := failoverUntilPromoted(t, set)
	for _, quit := range quits {
		quit()
	}
	for i, c := range quitCases {
		require.ErrorIs(t, await(t, quitters[i], 5*time.Second).err, context.Canceled, c.name)
	}
	_, err := set.WaitFailover(old, 30*time.Second)
	require.NoError(t, err)
	switched := time.Now()

	nexts := make([]locker, len(quitCases))
	for i, c := range quitCases {
		nexts[i] = c.next(e.client())
	}
	grants := grantAll(nexts)
	for i, c := range quitCases {
		t.Run(c.name, func(t *testing.T) {
			requireGrantedSoon(t, grants[i], switched, logs[i])
		})
	}
}

// grant is when a caller was granted, or why not.
type grant struct {
	at  time.Time
	err error
}

// grantAll has every caller of nexts wait at once, each for up to
// auditBound and a few seconds more, and returns how each ended.
func grantAll(nexts []locker) []grant {
	ctx, cancel := context.WithTimeout(context.Background(), auditBound+5*time.Second)
	defer cancel()
	grants := make([]grant, len(nexts))
	var wg sync.WaitGroup
	for i, next := range nexts {
		wg.Go(func() {
			_, err := next.Lock(ctx)
			grants[i] = grant{at: time.Now(), err: err}
		})
	}
	wg.Wait()
	return grants
}

// requireGrantedSoon checks that g came within auditBound of switched,
// and that the audit whose logs are logs found what the failover brought
// back (else the test proved nothing).
func requireGrantedSoon(t *testing.T, g grant, switched time.Time, logs *logRecorder) {
	require.NoError(t, g.err, "the logs of the Client whose call it was: %v", logs.all())
	took := g.at.Sub(switched)
	t.Logf("granted %v after the switch", took)
	require.Less(t, took, auditBound, "not after the 30 s lease or waiter TTL")
	back := false
	for _, l := range logs.all() {
		back = back || strings.Contains(l, "brought back")
	}
	require.True(t, back, "the failover brought back what the call left (else this test proved nothing): %v", logs.all())
}

// mustHold takes a hold with lock, bounded by a few seconds.
func mustHold(t *testing.T, lock func(ctx context.Context) (context.Context, error)) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	held, err := lock(ctx)
	require.NoError(t, err)
	return held
}
