package fairlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/fairlock/fairlock/queue"
)

// The quorum fault tests use short leases, so that a hold on a master
// that went away runs out within seconds.
const (
	quorumFaultLease = 2 * time.Second
	quorumFaultTTL   = 2 * time.Second
)

// quorumFaultOpts are the options of every Client of the quorum fault tests.
func quorumFaultOpts(more ...fairlock.Option) []fairlock.Option {
	return append([]fairlock.Option{
		fairlock.WithLease(quorumFaultLease),
		fairlock.WithWaiterTTL(quorumFaultTTL),
		fairlock.WithCallTimeout(time.Second),
	}, more...)
}

// quorumVia is quorumOf over the masters at addrs: each a server's own
// address or that of a fault proxy in front of it. The Client and its
// redis clients are closed when t ends.
func quorumVia(t *testing.T, addrs []string, opts ...fairlock.Option) *fairlock.Client {
	t.Helper()
	masters := make([]redis.UniversalClient, len(addrs))
	for i, addr := range addrs {
		rdb := redis.NewClient(&redis.Options{Addr: addr})
		t.Cleanup(func() { _ = rdb.Close() })
		masters[i] = rdb
	}
	prefix, _ := quorumPrefixes.LoadOrStore(t.Name(), redistest.Prefix(t))
	c, err := fairlock.NewQuorum(context.Background(), masters, append([]fairlock.Option{fairlock.WithPrefix(prefix.(string))}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// quorumKeys returns the keys of the quorum lock name on each master, with
// the test's key prefix.
func quorumKeys(t *testing.T, name string) queue.Keys {
	t.Helper()
	prefix, _ := quorumPrefixes.LoadOrStore(t.Name(), redistest.Prefix(t))
	k, err := queue.Quorum(prefix.(string), name)
	require.NoError(t, err)
	return k
}

// qexclusion is what the holders of one lock see from inside their
// critical sections: two live holds inside at once (an overlap), and
// fencing tokens that do not increase from one grant to the next. A hold
// whose context has ended (its lease was lost) is no holder any more: it
// is neither in an overlap nor a token to order, as its owner must stop
// when its context ends.
type qexclusion struct {
	mu       sync.Mutex
	next     int                     // guarded by mu: the id of the next hold to enter
	inside   map[int]context.Context // guarded by mu: holds in their section
	grants   int                     // guarded by mu: sections entered by a live hold
	overlaps []string                // guarded by mu
	backward []string                // guarded by mu: tokens at or below the one before
	last     int64                   // guarded by mu: the last token seen
	lost     int                     // guarded by mu: holds that lost their lease inside
}

// enter records that held enters its section, and returns its id; ok is
// false when the hold had already ended, and does not enter.
func (x *qexclusion) enter(held context.Context) (id int, ok bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if held.Err() != nil {
		x.lost++
		return 0, false
	}
	for other, ctx := range x.inside {
		if ctx.Err() == nil {
			x.overlaps = append(x.overlaps, fmt.Sprintf("grant %d entered while grant %d still held", x.next, other))
		}
	}
	if x.inside == nil {
		x.inside = map[int]context.Context{}
	}
	id = x.next
	x.next++
	x.inside[id] = held
	x.grants++
	return id, true
}

// token records the token of a live hold.
func (x *qexclusion) token(held context.Context, tok int64) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if held.Err() != nil {
		return // lost since: a later holder may have recorded a larger token
	}
	if tok <= x.last {
		x.backward = append(x.backward, fmt.Sprintf("token %d after %d", tok, x.last))
	}
	x.last = tok
}

// leave records that the hold with id left its section; lost says it
// lost its lease inside.
func (x *qexclusion) leave(id int, lost bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	delete(x.inside, id)
	if lost {
		x.lost++
	}
}

// count returns how many sections live holds have entered.
func (x *qexclusion) count() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.grants
}

// check fails t on an overlap or a token out of order.
func (x *qexclusion) check(t *testing.T) {
	t.Helper()
	x.mu.Lock()
	defer x.mu.Unlock()
	require.Empty(t, x.overlaps, "two live holds at once")
	require.Empty(t, x.backward, "tokens out of grant order")
	t.Logf("%d grants, %d holds lost their lease", x.grants, x.lost)
}

// qcontention is goroutines that loop Lock, Token, a short critical
// section and Unlock on one lock, until halted.
type qcontention struct {
	x      qexclusion
	stop   atomic.Bool
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// qcontend starts perMutex goroutines on each of ms (handles of one lock
// on different Clients). They are halted when t ends, at the latest.
func qcontend(t *testing.T, ms []*fairlock.Mutex, perMutex int) *qcontention {
	ctx, cancel := context.WithCancel(context.Background())
	c := &qcontention{ctx: ctx, cancel: cancel}
	for _, m := range ms {
		for range perMutex {
			c.wg.Go(func() { c.loop(t, m) })
		}
	}
	t.Cleanup(func() { c.halt(t) })
	return c
}

// loop is one goroutine of the contention on m.
func (c *qcontention) loop(t *testing.T, m *fairlock.Mutex) {
	for !c.stop.Load() {
		held, err := m.Lock(c.ctx)
		if err != nil {
			if c.ctx.Err() == nil {
				t.Errorf("Lock: %v", err)
			}
			return
		}
		if id, ok := c.x.enter(held); ok {
			tok, err := m.Token(held)
			switch {
			case err == nil:
				c.x.token(held, tok)
			case errors.Is(err, fairlock.ErrLeaseLost):
			default:
				t.Errorf("Token: %v", err)
			}
			time.Sleep(time.Millisecond)
			c.x.leave(id, err != nil)
		}
		if err := m.Unlock(held); err != nil && !errors.Is(err, fairlock.ErrLeaseLost) {
			t.Errorf("Unlock: %v", err)
		}
	}
}

// await waits until live holds have entered n sections in all.
func (c *qcontention) await(t *testing.T, n int, when string) {
	t.Helper()
	require.Eventually(t, func() bool { return c.x.count() >= n }, 20*time.Second, 5*time.Millisecond,
		"%d grants %s", n, when)
}

// halt stops the goroutines after their current Lock call, and waits for
// them; a goroutine stuck in Lock past a generous bound is cancelled and
// fails t. It is idempotent.
func (c *qcontention) halt(t *testing.T) {
	c.stop.Store(true)
	done := make(chan struct{})
	go func() {
		c.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		c.cancel()
		<-done
		t.Error("a Lock call did not return within 20s of the halt")
	}
	c.cancel()
}

// qgrant is what a Lock call in the background ended with: its hold, when
// it returned, and whether the hold it had to wait for had ended by then.
type qgrant struct {
	held       context.Context
	err        error
	at         time.Time
	firstEnded bool
}

// lockAfter calls m.Lock in the background; first is the hold it waits
// for.
func lockAfter(ctx context.Context, m *fairlock.Mutex, first context.Context) <-chan qgrant {
	ch := make(chan qgrant, 1)
	go func() {
		held, err := m.Lock(ctx)
		ch <- qgrant{held: held, err: err, at: time.Now(), firstEnded: first.Err() != nil}
	}()
	return ch
}

// awaitGrant returns the result of lockAfter, failing t when there is
// none within a generous bound.
func awaitGrant(t *testing.T, ch <-chan qgrant, within time.Duration) qgrant {
	t.Helper()
	select {
	case g := <-ch:
		require.NoError(t, g.err)
		return g
	case <-time.After(within):
		t.Fatalf("no grant within %v", within)
		return qgrant{}
	}
}

// queuedOn waits until n waiters are in the lock's line on the server.
func queuedOn(t *testing.T, rdb *redis.Client, k queue.Keys, n int64) {
	t.Helper()
	require.Eventually(t, func() bool { return rdb.ZCard(context.Background(), k.Queue).Val() == n },
		10*time.Second, 5*time.Millisecond, "%d waiters in line on %s", n, rdb.Options().Addr)
}
