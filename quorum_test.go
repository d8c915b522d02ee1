package fairlock_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/internal/redistest"
)

// quorumPrefixes keeps one key prefix per test, so that every quorum
// Client of a test shares its locks.
var quorumPrefixes sync.Map

// quorumOf returns a quorum Client over servers, with the test's key
// prefix, closed when t ends.
func quorumOf(t testing.TB, servers []*redistest.Server, opts ...fairlock.Option) *fairlock.Client {
	t.Helper()
	masters := make([]redis.UniversalClient, len(servers))
	for i, s := range servers {
		masters[i] = s.Client(t)
	}
	prefix, _ := quorumPrefixes.LoadOrStore(t.Name(), redistest.Prefix(t))
	c, err := fairlock.NewQuorum(context.Background(), masters, append([]fairlock.Option{fairlock.WithPrefix(prefix.(string))}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestQuorumLockUnlockTokenAndViews(t *testing.T) {
	t.Parallel()
	for _, n := range []int{3, 5} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			t.Parallel()
			servers := redistest.Masters(t, n)
			c := quorumOf(t, servers)
			m := c.Mutex("job")
			ctx := context.Background()

			held, err := m.Lock(ctx)
			require.NoError(t, err)
			tok, err := m.Token(held)
			require.NoError(t, err)
			require.Positive(t, tok)
			again, err := m.Token(held)
			require.NoError(t, err)
			require.Equal(t, tok, again, "a hold's token is committed once")

			locked, err := m.IsLocked(ctx)
			require.NoError(t, err)
			require.True(t, locked)
			ttl, err := m.TTL(held)
			require.NoError(t, err)
			require.Greater(t, ttl, 20*time.Second)
			require.LessOrEqual(t, ttl, 30*time.Second)

			// Re-entry counts on the majority.
			inner, err := m.Lock(held)
			require.NoError(t, err)
			count, err := m.HoldCount(inner)
			require.NoError(t, err)
			require.Equal(t, 2, count)
			require.NoError(t, m.Unlock(inner))
			count, err = m.HoldCount(held)
			require.NoError(t, err)
			require.Equal(t, 1, count)

			// Another Client's TryLock fails; its Lock waits for the release.
			other := quorumOf(t, servers)
			om := other.Mutex("job")
			_, err = om.TryLock(ctx)
			require.ErrorIs(t, err, fairlock.ErrLocked)
			got := make(chan context.Context, 1)
			go func() {
				h, err := om.Lock(ctx)
				if err != nil {
					t.Error(err)
				}
				got <- h
			}()
			time.Sleep(200 * time.Millisecond)
			require.NoError(t, m.Unlock(held))
			require.ErrorIs(t, held.Err(), context.Canceled)
			var h2 context.Context
			select {
			case h2 = <-got:
			case <-time.After(10 * time.Second):
				t.Fatal("the waiter was not handed the lock")
			}
			require.NotNil(t, h2)
			tok2, err := om.Token(h2)
			require.NoError(t, err)
			require.Greater(t, tok2, tok)
			require.NoError(t, om.Unlock(h2))

			locked, err = m.IsLocked(ctx)
			require.NoError(t, err)
			require.False(t, locked)
			require.ErrorIs(t, m.Unlock(held), fairlock.ErrNotHeld)
		})
	}
}

func TestQuorumIsFIFOAndExclusiveUnderContention(t *testing.T) {
	t.Parallel()
	servers := redistest.Masters(t, 3)
	clients := []*fairlock.Client{quorumOf(t, servers), quorumOf(t, servers), quorumOf(t, servers)}
	ctx := context.Background()
	var (
		inside   atomic.Int32
		mu       sync.Mutex
		lastTok  int64
		grants   int
		overlaps int
		wg       sync.WaitGroup
	)
	for g := range 9 {
		m := clients[g%3].Mutex("hot")
		wg.Go(func() {
			for range 15 {
				held, err := m.Lock(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				if inside.Add(1) != 1 {
					mu.Lock()
					overlaps++
					mu.Unlock()
				}
				tok, err := m.Token(held)
				if err != nil {
					t.Error(err)
				}
				mu.Lock()
				if tok <= lastTok {
					t.Errorf("token %d after %d", tok, lastTok)
				}
				lastTok = tok
				grants++
				mu.Unlock()
				time.Sleep(time.Millisecond)
				inside.Add(-1)
				if err := m.Unlock(held); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	require.Zero(t, overlaps)
	require.Equal(t, 9*15, grants)
}

func TestNewQuorumRefusesBadConfigurations(t *testing.T) {
	t.Parallel()
	servers := redistest.Masters(t, 2)
	a, b := servers[0].Client(t), servers[1].Client(t)
	_, err := fairlock.NewQuorum(context.Background(), nil)
	require.ErrorIs(t, err, fairlock.ErrInvalidOption)
	_, err = fairlock.NewQuorum(context.Background(), []redis.UniversalClient{a, nil, b})
	require.ErrorIs(t, err, fairlock.ErrInvalidOption)
	var nilClient *redis.Client
	_, err = fairlock.NewQuorum(context.Background(), []redis.UniversalClient{a, nilClient, b})
	require.ErrorIs(t, err, fairlock.ErrInvalidOption)
	// The same server twice, through two clients.
	_, err = fairlock.NewQuorum(context.Background(), []redis.UniversalClient{a, b, servers[0].Client(t)})
	require.ErrorIs(t, err, fairlock.ErrInvalidOption)
	require.ErrorContains(t, err, "same server")
	// Two servers with one boot id (a copy of the key) are taken for one.
	boot, err := fairlock.NewQuorum(context.Background(), []redis.UniversalClient{a, b}, fairlock.WithPrefix("boots"))
	require.NoError(t, err)
	require.NoError(t, boot.Close())
	id, err := a.Get(context.Background(), "boots:boot").Result()
	require.NoError(t, err)
	require.NoError(t, b.Set(context.Background(), "boots:boot", id, 0).Err())
	_, err = fairlock.NewQuorum(context.Background(), []redis.UniversalClient{a, b}, fairlock.WithPrefix("boots"))
	require.ErrorIs(t, err, fairlock.ErrInvalidOption)
	require.ErrorContains(t, err, "boot:"+id)

	// An even number of masters is allowed, with a warning.
	var logged bytes.Buffer
	even, err := fairlock.NewQuorum(context.Background(), []redis.UniversalClient{a, b}, fairlock.WithLogger(slog.New(slog.NewTextHandler(&logged, nil))))
	require.NoError(t, err)
	require.NoError(t, even.Close())
	require.Contains(t, logged.String(), "even number of masters")

	_, err = fairlock.NewQuorum(context.Background(), []redis.UniversalClient{a, b}, fairlock.WithDriftFactor(0.5))
	require.ErrorIs(t, err, fairlock.ErrInvalidOption)
	_, err = fairlock.New(a, fairlock.WithDriftFactor(0.02))
	require.ErrorIs(t, err, fairlock.ErrInvalidOption)
	_, err = fairlock.NewQuorum(context.Background(), []redis.UniversalClient{a, b}, fairlock.WithReplicas(1, time.Second))
	require.ErrorIs(t, err, fairlock.ErrInvalidOption)

	c, err := fairlock.NewQuorum(context.Background(), []redis.UniversalClient{a})
	require.NoError(t, err)
	defer c.Close()
	require.ErrorIs(t, c.Semaphore("s", 2).Release(context.Background()), fairlock.ErrInvalidOption)
	_, err = c.MultiLock([]string{"a", "b"}).Lock(context.Background())
	require.ErrorIs(t, err, fairlock.ErrInvalidOption)
	st, err := c.Inspect(context.Background(), "a") // a quorum lock's state, each master's and the majority's
	require.NoError(t, err)
	require.Len(t, st.Masters, 1)
}

func TestQuorumWithoutAMajorityFailsWithErrNoQuorum(t *testing.T) {
	redistest.Slow(t)
	servers := redistest.Masters(t, 3)
	c := quorumOf(t, servers, fairlock.WithCallTimeout(time.Second))
	m := c.Mutex("x")
	servers[0].Kill()
	servers[1].Kill()
	_, err := m.Lock(context.Background())
	require.ErrorIs(t, err, fairlock.ErrNoQuorum)
	_, err = m.IsLocked(context.Background())
	require.ErrorIs(t, err, fairlock.ErrNoQuorum)
	require.NoError(t, servers[0].Restart())
	held, err := m.Lock(context.Background())
	require.NoError(t, err)
	require.NoError(t, m.Unlock(held))
	locked, err := m.IsLocked(context.Background())
	require.NoError(t, err, "with a majority again, IsLocked answers")
	require.False(t, locked, "the Unlock freed the lock on the majority")
}

func TestQuorumLostLeaseEndsTheHoldAndIsNotReentered(t *testing.T) {
	t.Parallel()
	servers := redistest.Masters(t, 3)
	c := quorumOf(t, servers, fairlock.WithLease(time.Second))
	other := quorumOf(t, servers)
	m, om := c.Mutex("lost"), other.Mutex("lost")
	ctx := context.Background()
	held, err := m.Lock(ctx)
	require.NoError(t, err)
	removed, err := om.ForceUnlock(ctx)
	require.NoError(t, err)
	require.True(t, removed)
	for i, s := range servers { // on every master: ForceUnlock returns once a majority answered
		require.Eventually(t, func() bool {
			return s.Client(t).Exists(ctx, quorumKeys(t, "lost").Lock).Val() == 0
		}, 2*time.Second, 5*time.Millisecond, "master %d still holds", i)
	}
	select {
	case <-held.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the watchdog did not notice the hold was gone")
	}
	require.ErrorIs(t, context.Cause(held), fairlock.ErrLeaseLost)
	_, err = m.Lock(held)
	require.ErrorIs(t, err, fairlock.ErrLeaseLost, "a lost hold is never re-entered as a fresh one")
	require.ErrorIs(t, m.Unlock(held), fairlock.ErrNotHeld)
	_, err = m.Token(held)
	require.ErrorIs(t, err, fairlock.ErrNotHeld)
}

func TestQuorumCloseEndsWaitsAndHolds(t *testing.T) {
	t.Parallel()
	servers := redistest.Masters(t, 3)
	c := quorumOf(t, servers)
	other := quorumOf(t, servers)
	ctx := context.Background()
	held, err := c.Mutex("closing").Lock(ctx)
	require.NoError(t, err)
	waited := make(chan error, 1)
	go func() {
		_, err := other.Mutex("closing").Lock(ctx)
		waited <- err
	}()
	third := quorumOf(t, servers)
	time.Sleep(100 * time.Millisecond)
	require.NoError(t, other.Close())
	select {
	case err := <-waited:
		require.ErrorIs(t, err, fairlock.ErrClosed)
	case <-time.After(10 * time.Second):
		t.Fatal("a waiting Lock did not end at Close")
	}
	require.NoError(t, c.Close())
	require.ErrorIs(t, context.Cause(held), fairlock.ErrClosed)
	// Close released the hold: another Client takes it without waiting.
	h3, err := third.Mutex("closing").TryLock(ctx)
	require.NoError(t, err)
	require.NoError(t, third.Mutex("closing").Unlock(h3))
	_, err = c.Mutex("closing").Lock(ctx)
	require.ErrorIs(t, err, fairlock.ErrClosed)
}

// Bakery order: a caller whose join reached a majority before another's
// Lock began is served first, whichever Client each waits in.
func TestQuorumServesWaitersInBakeryOrder(t *testing.T) {
	t.Parallel()
	servers := redistest.Masters(t, 3)
	ctx := context.Background()
	holder := quorumOf(t, servers)
	held, err := holder.Mutex("line").Lock(ctx)
	require.NoError(t, err)

	var (
		mu    sync.Mutex
		order []int
		wg    sync.WaitGroup
	)
	for i := range 5 {
		queued := make(chan struct{})
		var once sync.Once
		c := quorumOf(t, servers, fairlock.WithObserver(fairlock.ObserverFunc(func(_ context.Context, e fairlock.Event) {
			if e.Kind == fairlock.EventQueued {
				once.Do(func() { close(queued) })
			}
		})))
		m := c.Mutex("line")
		wg.Go(func() {
			h, err := m.Lock(ctx)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			if err := m.Unlock(h); err != nil {
				t.Error(err)
			}
		})
		select {
		case <-queued: // its join reached a majority: the next one begins after
		case <-time.After(10 * time.Second):
			t.Fatalf("waiter %d did not join", i)
		}
	}
	require.NoError(t, holder.Mutex("line").Unlock(held))
	wg.Wait()
	require.Equal(t, []int{0, 1, 2, 3, 4}, order)
}

type quorumCtxKey struct{}

// A quorum Lock call's events, and its hold's, reach the Observer with
// the values of the call's context.
func TestQuorumObserverSeesTheCallsEvents(t *testing.T) {
	t.Parallel()
	servers := redistest.Masters(t, 3)
	var (
		mu    sync.Mutex
		kinds []fairlock.EventKind
	)
	c := quorumOf(t, servers, fairlock.WithObserver(fairlock.ObserverFunc(func(ctx context.Context, e fairlock.Event) {
		if ctx.Value(quorumCtxKey{}) != "job-7" {
			return
		}
		mu.Lock()
		kinds = append(kinds, e.Kind)
		mu.Unlock()
	})))
	other := quorumOf(t, servers)
	ctx := context.WithValue(context.Background(), quorumCtxKey{}, "job-7")
	busy, err := other.Mutex("seen").Lock(context.Background())
	require.NoError(t, err)
	go func() {
		time.Sleep(200 * time.Millisecond)
		_ = other.Mutex("seen").Unlock(busy)
	}()
	held, err := c.Mutex("seen").Lock(ctx)
	require.NoError(t, err)
	require.NoError(t, c.Mutex("seen").Unlock(held))
	require.NoError(t, c.Close()) // delivers every event still queued
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []fairlock.EventKind{fairlock.EventWaitStarted, fairlock.EventQueued, fairlock.EventGranted, fairlock.EventHoldEnded}, kinds)
}

// A quorum re-entry is reported as a Mutex's is: EventWaitStarted, then
// EventGranted with GrantReentry and the hold's token, before the hold's one
// EventHoldEnded.
func TestQuorumObserverSeesAReentryAsAMutexDoes(t *testing.T) {
	t.Parallel()
	servers := redistest.Masters(t, 3)
	var (
		mu     sync.Mutex
		events []fairlock.Event
	)
	c := quorumOf(t, servers, fairlock.WithObserver(fairlock.ObserverFunc(func(_ context.Context, e fairlock.Event) {
		mu.Lock()
		events = append(events, e)
		mu.Unlock()
	})))
	m := c.Mutex("reentered")
	held, err := m.Lock(context.Background())
	require.NoError(t, err)
	inner, err := m.Lock(held)
	require.NoError(t, err)
	token, err := m.Token(inner)
	require.NoError(t, err)
	require.NoError(t, m.Unlock(inner))
	require.NoError(t, m.Unlock(held))
	require.NoError(t, c.Close()) // delivers every event still queued

	mu.Lock()
	defer mu.Unlock()
	got := make([]fairlock.EventKind, len(events))
	for i, e := range events {
		got[i] = e.Kind
	}
	require.Equal(t, []fairlock.EventKind{fairlock.EventWaitStarted, fairlock.EventGranted, fairlock.EventWaitStarted, fairlock.EventGranted, fairlock.EventHoldEnded}, got)
	re := events[3]
	require.Equal(t, fairlock.GrantReentry, re.Grant)
	require.Equal(t, events[1].Owner, re.Owner)
	require.Equal(t, events[1].Token, re.Token, "a re-entry keeps the hold's token")
	require.Equal(t, token, events[4].Token, "the hold ends under its committed token")
}
