package fairlock_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/fairlock/fairlock/queue"
)

// grantOrder starts n waiters, each on its own Client, joining the line of
// name one after another (the next starts once the previous is queued, and
// at least gap later). Each waiter records its index when granted, then
// calls onGrant. It returns a channel that yields the indexes in grant
// order, and waits until all n are queued.
func grantOrder(t *testing.T, e *env, name string, n int, gap time.Duration, opts []fairlock.Option,
	mopts []fairlock.HandleOption, onGrant func(ctx context.Context, m *fairlock.Mutex)) <-chan int {
	t.Helper()
	order := make(chan int, n)
	var wg sync.WaitGroup
	for i := range n {
		m := e.client(opts...).Mutex(name, mopts...)
		wg.Go(func() {
			ctx, err := m.Lock(context.Background())
			if !assert.NoError(t, err, "waiter %d", i) {
				return
			}
			order <- i
			onGrant(ctx, m)
		})
		e.waitQueued(name, i+1)
		time.Sleep(gap)
	}
	t.Cleanup(wg.Wait)
	return order
}

func collect(t *testing.T, order <-chan int, n int, within time.Duration) []int {
	t.Helper()
	var got []int
	deadline := time.After(within)
	for len(got) < n {
		select {
		case i := <-order:
			got = append(got, i)
		case <-deadline:
			t.Fatalf("only %d of %d grants within %v: %v", len(got), n, within, got)
		}
	}
	return got
}

func seq(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}

func TestFIFOHoldsWhileHolderOutlivesWaiterTTL(t *testing.T) {
	redistest.Slow(t)
	t.Parallel()
	e := newEnv(t)
	const ttl = 300 * time.Millisecond
	opts := []fairlock.Option{fairlock.WithWaiterTTL(ttl), fairlock.WithLease(200 * time.Millisecond)}
	holder := e.client(opts...).Mutex("long")
	hctx, err := holder.Lock(context.Background())
	require.NoError(t, err)

	var mu sync.Mutex
	busy := false
	order := grantOrder(t, e, "long", 8, 50*time.Millisecond, opts, nil, func(ctx context.Context, m *fairlock.Mutex) {
		mu.Lock()
		assert.False(t, busy, "two holders at once")
		busy = true
		mu.Unlock()
		time.Sleep(ttl) // each holder also keeps it past the waiter TTL
		mu.Lock()
		busy = false
		mu.Unlock()
		assert.NoError(t, m.Unlock(ctx))
	})
	// The holder keeps the lock (renewed by its watchdog) for 3x the
	// waiter TTL after the last waiter joined.
	time.Sleep(3 * ttl)
	require.NoError(t, hctx.Err(), "the watchdog must keep the hold")
	assert.Len(t, e.queued("long"), 8, "no live waiter may be dropped")
	require.NoError(t, holder.Unlock(hctx))
	assert.Equal(t, seq(8), collect(t, order, 8, 20*time.Second))
	e.requireClean("long")
}

func TestFixedLeasesExpireInOrder(t *testing.T) {
	redistest.Slow(t)
	t.Parallel()
	e := newEnv(t)
	// The first hold lasts while all eight join; theirs are short, so the
	// test proves the order in about two seconds.
	holder := e.client().Mutex("fixed", fairlock.WithFixedLease(time.Second))
	fixed := []fairlock.HandleOption{fairlock.WithFixedLease(150 * time.Millisecond)}
	_, err := holder.Lock(context.Background())
	require.NoError(t, err)

	order := grantOrder(t, e, "fixed", 8, 50*time.Millisecond, nil, fixed, func(ctx context.Context, m *fairlock.Mutex) {
		<-ctx.Done() // never unlock: wait for the lease to run out
		assert.ErrorIs(t, context.Cause(ctx), fairlock.ErrLeaseLost)
	})
	assert.Equal(t, seq(8), collect(t, order, 8, 30*time.Second))
}

func TestCanceledWaiterLeavesNoTraceAndDoesNotDelayTheNext(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := e.client() // default waiter TTL: a trace would delay the next waiter by seconds
	holder := c.Mutex("cancel")
	hctx, err := holder.Lock(context.Background())
	require.NoError(t, err)

	ctx1, cancel1 := context.WithCancel(context.Background())
	first := lockAsync(ctx1, e.client().Mutex("cancel"))
	e.waitQueued("cancel", 1)
	second := lockAsync(context.Background(), e.client().Mutex("cancel"))
	e.waitQueued("cancel", 2)

	cancel1()
	r := await(t, first, 5*time.Second)
	require.ErrorIs(t, r.err, context.Canceled)
	require.Nil(t, r.ctx)
	q := e.queued("cancel")
	require.Len(t, q, 1, "only the second waiter stays")
	require.Equal(t, int64(1), e.rdb.ZCard(context.Background(), e.keys("cancel").Deadline).Val())

	start := time.Now()
	require.NoError(t, holder.Unlock(hctx))
	r = await(t, second, 2*time.Second)
	require.NoError(t, r.err)
	t.Logf("next waiter granted %v after the release", time.Since(start))
	e.requireClean("cancel")
}

func TestKilledWaiterIsDroppedAfterWaiterTTL(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const ttl = 500 * time.Millisecond
	holder := e.client(fairlock.WithWaiterTTL(ttl)).Mutex("dead")
	hctx, err := holder.Lock(context.Background())
	require.NoError(t, err)

	dead := e.startHelper("wait", "dead", "waiterTTL="+ttl.String())
	e.waitQueued("dead", 1)
	next := lockAsync(context.Background(), e.client(fairlock.WithWaiterTTL(ttl)).Mutex("dead"))
	e.waitQueued("dead", 2)

	require.NoError(t, dead.Process.Signal(syscall.SIGKILL))
	_, _ = dead.Process.Wait()
	killed := time.Now()
	require.NoError(t, holder.Unlock(hctx))
	r := await(t, next, ttl+2*time.Second)
	require.NoError(t, r.err)
	waited := time.Since(killed)
	t.Logf("live waiter granted %v after the dead one was killed (waiter TTL %v)", waited, ttl)
	assert.Less(t, waited, ttl+time.Second)
	e.requireClean("dead")
}

func TestUnlockWithoutTheHoldIsNotHeld(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := e.client()
	m := c.Mutex("notheld")
	other := c.Mutex("other")
	octx, err := other.Lock(context.Background())
	require.NoError(t, err)
	hctx, err := m.Lock(context.Background())
	require.NoError(t, err)

	for name, ctx := range map[string]context.Context{
		"background":         context.Background(),
		"hold of other lock": octx,
	} {
		require.ErrorIs(t, m.Unlock(ctx), fairlock.ErrNotHeld, name)
		_, err := m.Token(ctx)
		require.ErrorIs(t, err, fairlock.ErrNotHeld, name)
	}
	locked, _ := m.IsLocked(context.Background())
	require.True(t, locked, "a failed Unlock must not release the lock")
	require.NoError(t, m.Unlock(hctx))
}

func TestDeletedLockKeyCancelsHolderWithLeaseLost(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	m := e.client(fairlock.WithLease(300 * time.Millisecond)).Mutex("deleted")
	ctx, err := m.Lock(context.Background())
	require.NoError(t, err)
	require.NoError(t, e.rdb.Del(context.Background(), e.keys("deleted").Lock).Err())
	requireDone(t, ctx, 3*time.Second)
	require.ErrorIs(t, context.Cause(ctx), fairlock.ErrLeaseLost)
	err = m.Unlock(ctx)
	require.ErrorIs(t, err, fairlock.ErrNotHeld)
	require.ErrorIs(t, err, fairlock.ErrLeaseLost)
}

func TestWatchdogKeepsHoldPastLease(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const lease = 200 * time.Millisecond
	m := e.client(fairlock.WithLease(lease)).Mutex("watchdog")
	ctx, err := m.Lock(context.Background())
	require.NoError(t, err)
	time.Sleep(5 * lease)
	require.NoError(t, ctx.Err())
	ttl, err := m.TTL(context.Background())
	require.NoError(t, err)
	require.Greater(t, ttl, time.Duration(0))
	require.LessOrEqual(t, ttl, lease)
	require.NoError(t, m.Unlock(ctx))
	ttl, err = m.TTL(context.Background())
	require.NoError(t, err)
	require.Zero(t, ttl)
}

func TestLockContextOutlivesCallerButKeepsValues(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	m := e.client().Mutex("values")
	type key struct{}
	parent, cancel := context.WithTimeout(context.WithValue(context.Background(), key{}, "v"), time.Minute)
	lctx, err := m.Lock(parent)
	require.NoError(t, err)
	cancel()
	require.NoError(t, lctx.Err(), "the caller's context bounds only the wait")
	_, has := lctx.Deadline()
	require.False(t, has)
	require.Equal(t, "v", lctx.Value(key{}))

	// Contexts derived from the hold end with it.
	child, stop := context.WithCancel(lctx)
	defer stop()
	require.NoError(t, m.Unlock(child))
	requireDone(t, child, time.Second)
}

func TestOwnerSharedAcrossClients(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := e.client().Mutex("shared")
	b := e.client().Mutex("shared")
	actx, err := a.Lock(fairlock.ContextWithOwner(context.Background(), "job-42"))
	require.NoError(t, err)
	bctx, err := b.TryLock(fairlock.ContextWithOwner(context.Background(), "job-42"))
	require.NoError(t, err, "the same owner re-enters from another Client")
	n, err := b.HoldCount(bctx)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	_, err = e.client().Mutex("shared").TryLock(context.Background())
	require.ErrorIs(t, err, fairlock.ErrLocked)

	require.NoError(t, a.Unlock(actx))
	locked, _ := a.IsLocked(context.Background())
	require.True(t, locked)
	require.NoError(t, b.Unlock(bctx))
	locked, _ = a.IsLocked(context.Background())
	require.False(t, locked)
}

func TestOnePubSubConnectionPerClient(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	name := "fl-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	rdb := redis.NewClient(&redis.Options{Addr: e.srv.Addr, ClientName: name})
	t.Cleanup(func() { _ = rdb.Close() })
	c, err := fairlock.New(rdb, fairlock.WithPrefix(e.prefix))
	require.NoError(t, err)
	defer c.Close()

	var waits []<-chan result
	for i := range 4 {
		lock := "conn-" + strconv.Itoa(i)
		_, err := e.client().Mutex(lock).Lock(context.Background())
		require.NoError(t, err)
		for j := range 5 {
			waits = append(waits, lockAsync(context.Background(), c.Mutex(lock)))
			e.waitQueued(lock, j+1)
		}
	}
	list, err := e.rdb.ClientList(context.Background()).Result()
	require.NoError(t, err)
	subscribers := 0
	for _, line := range strings.Split(list, "\n") {
		if strings.Contains(line, " name="+name+" ") && !strings.Contains(line, " sub=0 ") {
			subscribers++
			// Per lock, the Client's own wake channel and the shared one
			// (see TestAHandOverOnTheSharedChannelReachesAWaiterByPush).
			require.Contains(t, line, " sub=8 ", "two subscriptions per lock, whatever its waiters")
		}
	}
	require.Equal(t, 1, subscribers, "20 waiters on 4 locks share one pub/sub connection")
	require.NoError(t, c.Close())
	for _, w := range waits {
		require.ErrorIs(t, await(t, w, 5*time.Second).err, fairlock.ErrClosed)
	}
}

func TestInspectShowsHolderAndWaitersInOrder(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	m := e.client().Mutex("inspect")
	hctx, err := m.Lock(fairlock.ContextWithOwner(context.Background(), "holder-1"))
	require.NoError(t, err)
	_, err = m.Lock(hctx)
	require.NoError(t, err)
	a := lockAsync(fairlock.ContextWithOwner(context.Background(), "first"), e.client().Mutex("inspect"))
	e.waitQueued("inspect", 1)
	b := lockAsync(fairlock.ContextWithOwner(context.Background(), "second"), e.client().Mutex("inspect"))
	e.waitQueued("inspect", 2)

	s, err := queue.Inspect(context.Background(), e.rdb, e.keys("inspect"))
	require.NoError(t, err)
	require.True(t, s.Held)
	require.Equal(t, "holder-1", s.Owner)
	require.Equal(t, 2, s.Count)
	tok, _ := m.Token(hctx)
	require.Equal(t, tok, s.Token)
	require.Equal(t, tok, s.LastToken)
	require.Positive(t, s.TokenTTL, "the counter expires")
	require.Positive(t, s.TTL)
	require.Len(t, s.Waiters, 2)
	require.Equal(t, "first", s.Waiters[0].Owner)
	require.Equal(t, "second", s.Waiters[1].Owner)
	require.Positive(t, s.Waiters[0].Remaining)
	require.Empty(t, s.Orphans)
	require.Contains(t, s.String(), "held by holder-1: 2 level(s)")

	require.NoError(t, m.Unlock(hctx))
	require.NoError(t, m.Unlock(hctx))
	r := await(t, a, 5*time.Second)
	require.NoError(t, r.err)
	require.NoError(t, e.client().Mutex("inspect").Unlock(r.ctx))
	r = await(t, b, 5*time.Second)
	require.NoError(t, r.err)
}

func TestHandOverIsPushedNotPolled(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// With these settings a waiter polls every 20s at most: a grant within
	// two seconds of the release can only come from the push.
	opts := []fairlock.Option{fairlock.WithWaiterTTL(time.Minute), fairlock.WithLease(time.Minute)}
	holder := e.client(opts...).Mutex("push")
	hctx, err := holder.Lock(context.Background())
	require.NoError(t, err)
	for range 3 {
		next := lockAsync(context.Background(), e.client(opts...).Mutex("push"))
		e.waitQueued("push", 1)
		released := time.Now()
		require.NoError(t, holder.Unlock(hctx))
		r := await(t, next, 2*time.Second)
		require.NoError(t, r.err)
		t.Logf("hand-over took %v", time.Since(released))
		hctx = r.ctx
	}
	require.NoError(t, holder.Unlock(hctx))
}

// A client from before wake channels per Client publishes every
// hand-over on the lock's shared channel, whoever the waiter; so does a
// client from before timed wake messages for a waiter id with a wake
// format version, in which its scripts find no tag. During a rolling
// upgrade such a client's release still wakes a waiter of a newer Client
// by push: the waiter listens on the shared channel too. The message has
// no time, so the Observer is told no hand-over latency.
func TestAHandOverOnTheSharedChannelReachesAWaiterByPush(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	k := e.keys("shared")
	// The hold of an older client, which nothing renews.
	require.NoError(t, e.rdb.HSet(ctx, k.Lock, "owner", "older", "count", 1, "token", 7, "entry", "00000000000000aa:60000:older").Err())
	require.NoError(t, e.rdb.PExpire(ctx, k.Lock, time.Minute).Err())
	require.NoError(t, e.rdb.Set(ctx, k.Token, 7, 0).Err())
	// With these settings the waiter polls every 20 s: a grant within
	// seconds can only come from a push.
	var latency atomic.Int64
	latency.Store(-1)
	observer := fairlock.ObserverFunc(func(_ context.Context, ev fairlock.Event) {
		if ev.Kind == fairlock.EventGranted {
			latency.Store(int64(ev.HandOver))
		}
	})
	m := e.client(fairlock.WithWaiterTTL(time.Minute), fairlock.WithLease(time.Minute), fairlock.WithObserver(observer)).Mutex("shared")
	next := lockAsync(ctx, m)
	e.waitQueued("shared", 1)
	entry := e.queued("shared")[0]
	require.NotEqual(t, k.Wake, k.WakeOf(entry), "the waiter's entry names its Client's channel")

	// The older client's release, as its scripts do it: the head becomes
	// the holder, and the grant goes out on the shared channel.
	released := time.Now()
	p := e.rdb.TxPipeline()
	p.Del(ctx, k.Lock)
	p.LPop(ctx, k.Queue)
	p.ZRem(ctx, k.Deadline, entry)
	p.HSet(ctx, k.Lock, "owner", strings.Split(entry, ":")[2], "count", 1, "token", 8, "entry", entry)
	p.PExpire(ctx, k.Lock, time.Minute)
	p.Set(ctx, k.Token, 8, 0)
	p.Publish(ctx, k.Wake, entry+" 8")
	_, err := p.Exec(ctx)
	require.NoError(t, err)

	r := await(t, next, 5*time.Second)
	require.NoError(t, r.err)
	require.Less(t, time.Since(released), 5*time.Second)
	tok, err := m.Token(r.ctx)
	require.NoError(t, err)
	require.EqualValues(t, 8, tok)
	require.Eventually(t, func() bool { return latency.Load() != -1 }, 10*time.Second, time.Millisecond, "the Observer is told of the grant")
	require.Zero(t, latency.Load(), "a push without a time has no latency to report")
	require.NoError(t, m.Unlock(r.ctx))
}

// A hand-over between two Lock calls of one Client is a local hand-off:
// the release's reply tells the Client that the lock went to its own
// waiter, which it wakes itself, and nothing is published. The waiter is
// granted at once (it would poll again only after 20 s), and the Observer
// reports the hand-over's latency as for a push.
func TestAHandOverWithinOneClientPublishesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	var latency atomic.Int64
	observer := fairlock.ObserverFunc(func(_ context.Context, ev fairlock.Event) {
		if ev.Kind == fairlock.EventGranted && ev.Grant == fairlock.GrantHandOver {
			latency.Store(int64(ev.HandOver))
		}
	})
	c := e.client(fairlock.WithWaiterTTL(time.Minute), fairlock.WithLease(time.Minute), fairlock.WithObserver(observer))
	m := c.Mutex("local")
	wakes := e.rdb.PSubscribe(ctx, e.keys("local").Wake+"*")
	t.Cleanup(func() { _ = wakes.Close() })
	_, err := wakes.Receive(ctx) // the subscription's confirmation
	require.NoError(t, err)

	hctx, err := m.Lock(ctx)
	require.NoError(t, err)
	for i := range 3 {
		next := lockAsync(ctx, m)
		e.waitQueued("local", 1)
		released := time.Now()
		require.NoError(t, m.Unlock(hctx))
		r := await(t, next, 5*time.Second)
		require.NoError(t, r.err, "hand-over %d", i)
		require.Less(t, time.Since(released), 5*time.Second, "hand-over %d came without a poll", i)
		require.Eventually(t, func() bool { return latency.Load() != 0 }, 10*time.Second, time.Millisecond,
			"hand-over %d: the Observer is told of it", i)
		require.Positive(t, latency.Swap(0), "hand-over %d: the Observer is told its latency", i)
		hctx = r.ctx
	}
	require.NoError(t, m.Unlock(hctx))
	// A message on the wake channels would arrive before this one, which
	// is published after every hand-over above.
	require.NoError(t, e.rdb.Publish(ctx, e.keys("local").Wake+":barrier", "barrier").Err())
	msg, err := wakes.ReceiveMessage(ctx)
	require.NoError(t, err)
	require.Equal(t, "barrier", msg.Payload, "a hand-over within one Client was published on %s", msg.Channel)
}

// Each Client's waiters of a lock hear their hand-overs on a channel of
// the Client's own: a grant is delivered to the one Client whose waiter
// was handed the lock, not to every Client that waits for the lock.
func TestAHandOverIsDeliveredOnlyToTheWaitersClient(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	opts := []fairlock.Option{fairlock.WithWaiterTTL(time.Minute), fairlock.WithLease(time.Minute)}
	holder := e.client(opts...).Mutex("own")
	hctx, err := holder.Lock(ctx)
	require.NoError(t, err)
	observer := e.rdb.PSubscribe(ctx, e.keys("own").Wake+"*")
	t.Cleanup(func() { _ = observer.Close() })
	_, err = observer.Receive(ctx) // the subscription's confirmation
	require.NoError(t, err)

	var (
		mutexes []*fairlock.Mutex
		waiters []<-chan result
	)
	for i := range 3 {
		m := e.client(opts...).Mutex("own")
		mutexes, waiters = append(mutexes, m), append(waiters, lockAsync(ctx, m))
		e.waitQueued("own", i+1)
	}
	counts, err := e.wakeSubscriptions("own")
	require.NoError(t, err)
	// The shared channel, which only clients from before tags publish on,
	// is watched by every waiting Client, and carries none of the grants
	// below.
	require.EqualValues(t, 3, counts[e.keys("own").Wake], "every waiting Client watches the shared channel")
	delete(counts, e.keys("own").Wake)
	require.Len(t, counts, 3, "one channel per waiting Client")
	for ch, n := range counts {
		require.EqualValues(t, 1, n, "%s has its Client's hub alone", ch)
	}

	seen := map[string]bool{}
	for i, w := range waiters {
		require.NoError(t, holder.Unlock(hctx))
		msg, err := observer.ReceiveMessage(ctx)
		require.NoError(t, err)
		entry, _, _ := strings.Cut(msg.Payload, " ")
		require.Equal(t, e.keys("own").WakeOf(entry), msg.Channel, "grant %d", i)
		require.NotEqual(t, e.keys("own").Wake, msg.Channel, "grant %d went out on the shared channel", i)
		require.False(t, seen[msg.Channel], "grant %d went to a channel that had one already", i)
		seen[msg.Channel] = true
		r := await(t, w, 5*time.Second)
		require.NoError(t, r.err)
		holder, hctx = mutexes[i], r.ctx
	}
	require.NoError(t, holder.Unlock(hctx))
}

func TestReentryOfALostHoldIsLeaseLostNotAFreshGrant(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	m := e.client().Mutex("reenter-lost") // 30s lease: the watchdog will not notice first
	hctx, err := m.Lock(context.Background())
	require.NoError(t, err)
	require.NoError(t, e.rdb.Del(context.Background(), e.keys("reenter-lost").Lock).Err())

	_, err = m.Lock(hctx)
	require.ErrorIs(t, err, fairlock.ErrLeaseLost)
	requireDone(t, hctx, time.Second)
	require.ErrorIs(t, context.Cause(hctx), fairlock.ErrLeaseLost)
	locked, err := m.IsLocked(context.Background())
	require.NoError(t, err)
	require.False(t, locked, "the failed re-entry must not take the lock afresh")
}

func TestHandedOverHoldOutlivesAShortWaiterTTL(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// The hand-over gives the hold the waiter's remaining deadline (under
	// 300ms); the new holder's watchdog must renew it to the 5s lease.
	opts := []fairlock.Option{fairlock.WithWaiterTTL(300 * time.Millisecond), fairlock.WithLease(5 * time.Second)}
	holder := e.client(opts...).Mutex("short-ttl")
	hctx, err := holder.Lock(context.Background())
	require.NoError(t, err)
	next := lockAsync(context.Background(), e.client(opts...).Mutex("short-ttl"))
	e.waitQueued("short-ttl", 1)
	require.NoError(t, holder.Unlock(hctx))
	r := await(t, next, 5*time.Second)
	require.NoError(t, r.err)
	time.Sleep(time.Second)
	require.NoError(t, r.ctx.Err(), "the handed-over hold was lost: %v", context.Cause(r.ctx))
	ttl, err := holder.TTL(context.Background())
	require.NoError(t, err)
	require.Greater(t, ttl, 3*time.Second, "renewed to the lease")
	require.NoError(t, holder.Unlock(r.ctx))
}

func TestHandOverLongAfterTheLastPollStillKeepsAShortLease(t *testing.T) {
	redistest.Slow(t)
	t.Parallel()
	e := newEnv(t)
	holder := e.client().Mutex("late-push") // a 30s lease: the waiter polls once a second
	hctx, err := holder.Lock(context.Background())
	require.NoError(t, err)
	// The waiter's own lease is 300ms. The push comes 600ms after its last
	// poll: what it knows of the handed-over hold's expiry is spent, yet
	// the hold is real and must be kept.
	waiter := e.client(fairlock.WithLease(300*time.Millisecond), fairlock.WithWaiterTTL(3*time.Second)).Mutex("late-push")
	next := lockAsync(context.Background(), waiter)
	e.waitQueued("late-push", 1)
	time.Sleep(600 * time.Millisecond)
	require.NoError(t, holder.Unlock(hctx))
	r := await(t, next, 5*time.Second)
	require.NoError(t, r.err)
	time.Sleep(time.Second) // over three leases
	require.NoError(t, r.ctx.Err(), "the handed-over hold was lost: %v", context.Cause(r.ctx))
	require.NoError(t, waiter.Unlock(r.ctx))
}

// scriptCounter is a go-redis hook that counts the scripts a client runs
// (n), and the pipelines it sends with the scripts in them (the
// watchdog's renewals go out in pipelines).
type scriptCounter struct{ n, pipelines, pipelined atomic.Int64 }

// all counts every script run, alone or in a pipeline.
func (s *scriptCounter) all() int64 { return s.n.Load() + s.pipelined.Load() }

func (s *scriptCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (s *scriptCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if isScript(cmd) {
			s.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (s *scriptCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		s.pipelines.Add(1)
		for _, cmd := range cmds {
			if isScript(cmd) {
				s.pipelined.Add(1)
			}
		}
		return next(ctx, cmds)
	}
}

func isScript(cmd redis.Cmder) bool {
	name := cmd.Name()
	return name == "evalsha" || name == "eval" || name == "fcall"
}

// countedBehindAHolder returns a Client whose scripts are counted, and a
// Mutex of another Client that holds name, with ctx: both Clients with a
// minute's lease and waiter TTL, so that polls are 20s apart and whatever
// comes sooner was pushed.
func countedBehindAHolder(t *testing.T, name string) (e *env, holder *fairlock.Mutex, hctx context.Context, c *fairlock.Client, scripts *scriptCounter) {
	e = newEnv(t)
	opts := []fairlock.Option{fairlock.WithPrefix(e.prefix), fairlock.WithWaiterTTL(time.Minute), fairlock.WithLease(time.Minute)}
	holder = e.client(opts[1:]...).Mutex(name)
	hctx, err := holder.Lock(context.Background())
	require.NoError(t, err)
	rdb := e.srv.Client(t)
	scripts = &scriptCounter{}
	rdb.AddHook(scripts)
	c, err = fairlock.New(rdb, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return e, holder, hctx, c, scripts
}

// A hold that came by hand-over is renewed when a third of what is known of
// its expiry has passed, not at once: one released before then costs no
// call between its grant and its release.
func TestHandedOverHoldReleasedSoonCostsNoRenewal(t *testing.T) {
	t.Parallel()
	e, holder, hctx, c, scripts := countedBehindAHolder(t, "no-renewal")
	waiter := c.Mutex("no-renewal")
	next := lockAsync(context.Background(), waiter)
	e.waitQueued("no-renewal", 1)
	// From its place in line to its release, the waiter's Client runs no
	// script: the grant is pushed, and a renewal (pipelined by the
	// watchdog) would come a third of a minute after it.
	queued := scripts.all()
	require.NoError(t, holder.Unlock(hctx))
	r := await(t, next, 2*time.Second) // polls are 20s apart: pushed
	require.NoError(t, r.err)
	time.Sleep(300 * time.Millisecond)
	require.Equal(t, queued, scripts.all(), "no renewal while the hold is young")
	require.NoError(t, waiter.Unlock(r.ctx))
}

// A Lock that finds its lock contended among its own Client's waiters
// (whose subscription of the lock's channel is confirmed) joins the line
// with a single call, the poll that queues it, and is then granted by
// push: one round trip to be queued, none to be granted.
func TestLockJoiningItsClientsWaitersQueuesInOneCall(t *testing.T) {
	t.Parallel()
	e, holder, hctx, c, scripts := countedBehindAHolder(t, "one-call")
	first := lockAsync(context.Background(), c.Mutex("one-call"))
	e.waitQueued("one-call", 1)
	before := scripts.n.Load()
	second := lockAsync(context.Background(), c.Mutex("one-call"))
	e.waitQueued("one-call", 2)
	require.Equal(t, before+1, scripts.n.Load(), "one call queued the second waiter")

	require.NoError(t, holder.Unlock(hctx))
	r := await(t, first, 2*time.Second) // polls are 20s apart: pushed
	require.NoError(t, r.err)
	require.NoError(t, c.Mutex("one-call").Unlock(r.ctx))
	r = await(t, second, 2*time.Second)
	require.NoError(t, r.err)
	require.Equal(t, before+2, scripts.n.Load(), "the second waiter was granted by push, after the first one's release")
	require.NoError(t, c.Mutex("one-call").Unlock(r.ctx))
}

// A lock's channel stays subscribed for a while after the last waiter of
// a Client was granted, so that the Client's next Lock of the contended
// lock queues with one call too.
func TestLockSoonAfterItsClientsLastWaiterQueuesInOneCall(t *testing.T) {
	t.Parallel()
	e, other, octx, c, scripts := countedBehindAHolder(t, "linger")
	m := c.Mutex("linger")

	first := lockAsync(context.Background(), m)
	e.waitQueued("linger", 1)
	require.NoError(t, other.Unlock(octx))
	r := await(t, first, 2*time.Second) // pushed: the Client has no waiter left
	require.NoError(t, r.err)
	again := lockAsync(context.Background(), other)
	e.waitQueued("linger", 1)
	require.NoError(t, m.Unlock(r.ctx))
	r = await(t, again, 2*time.Second)
	require.NoError(t, r.err)

	before := scripts.n.Load()
	second := lockAsync(context.Background(), m)
	e.waitQueued("linger", 1)
	require.Equal(t, before+1, scripts.n.Load(), "one call queued the Client's next waiter")
	require.NoError(t, other.Unlock(r.ctx))
	r = await(t, second, 2*time.Second)
	require.NoError(t, r.err)
	require.NoError(t, m.Unlock(r.ctx))
}

// One watchdog serves every hold of a Client; a hold due before the
// watchdog would wake for the others (here a short fixed lease taken
// while a 30s lease waits for its first renewal) still ends on time.
func TestAShortFixedLeaseEndsOnTimeAmongLongLeases(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := e.client() // a 30s lease: its first renewal is 10s away
	long, err := c.Mutex("long").Lock(context.Background())
	require.NoError(t, err)
	short, err := c.Mutex("short", fairlock.WithFixedLease(200*time.Millisecond)).Lock(context.Background())
	require.NoError(t, err)
	requireDone(t, short, 3*time.Second)
	require.ErrorIs(t, context.Cause(short), fairlock.ErrLeaseLost)
	require.NoError(t, long.Err())
	require.NoError(t, c.Mutex("long").Unlock(long))
}

// The core cases: end-to-end tests that also run on every production
// topology (TestTopologies). Each runs on an env, on one lock name.

// onServer runs a core case on the shared redis-server.
func onServer(t *testing.T, name string, run func(t *testing.T, e *env, name string)) {
	t.Parallel()
	run(t, newEnv(t), name)
}

func TestUncontendedLockAndUnlock(t *testing.T) {
	onServer(t, "uncontended", uncontendedLockAndUnlock)
}

func TestTryLockNeverEnqueuesAndFailsWhileOthersWait(t *testing.T) {
	onServer(t, "try", tryLockNeverEnqueuesAndFailsWhileOthersWait)
}

func TestWaitersAreGrantedInJoinOrder(t *testing.T) {
	onServer(t, "fifo", waitersAreGrantedInJoinOrder)
}

func TestConcurrentIncrementsLoseNoUpdate(t *testing.T) {
	onServer(t, "counter", concurrentIncrementsLoseNoUpdate)
}

func TestReentryCountsLevels(t *testing.T) {
	onServer(t, "reentry", reentryCountsLevels)
}

func TestTokensIncreaseAcrossGrants(t *testing.T) {
	onServer(t, "tokens", tokensIncreaseAcrossGrants)
}

func TestForceUnlockHandsOverAndHolderLearnsLeaseLost(t *testing.T) {
	onServer(t, "force", forceUnlockHandsOverAndHolderLearnsLeaseLost)
}

func TestWaiterDeadlineExceededIsReportedAndLeavesNoTrace(t *testing.T) {
	onServer(t, "deadline", waiterDeadlineExceededIsReportedAndLeavesNoTrace)
}

func TestCloseReturnsErrClosedToWaitersAndReleasesHolds(t *testing.T) {
	onServer(t, "close", closeReturnsErrClosedToWaitersAndReleasesHolds)
}

func uncontendedLockAndUnlock(t *testing.T, e *env, name string) {
	bg := context.Background()
	m := e.client().Mutex(name)
	hctx, err := m.Lock(bg)
	require.NoError(t, err)
	locked, err := m.IsLocked(bg)
	require.NoError(t, err)
	require.True(t, locked)
	n, err := m.HoldCount(hctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	tok, err := m.Token(hctx)
	require.NoError(t, err)
	require.Positive(t, tok)

	require.NoError(t, m.Unlock(hctx))
	requireDone(t, hctx, time.Second)
	locked, err = m.IsLocked(bg)
	require.NoError(t, err)
	require.False(t, locked)
	e.requireClean(name)
}

func tryLockNeverEnqueuesAndFailsWhileOthersWait(t *testing.T, e *env, name string) {
	bg := context.Background()
	holder := e.client().Mutex(name)
	hctx, err := holder.Lock(bg)
	require.NoError(t, err)
	_, err = e.client().Mutex(name).TryLock(bg)
	require.ErrorIs(t, err, fairlock.ErrLocked, "held")
	require.Empty(t, e.queued(name), "TryLock must not enqueue")

	w := e.client().Mutex(name)
	waiter := lockAsync(bg, w)
	e.waitQueued(name, 1)
	_, err = e.client().Mutex(name).TryLock(bg)
	require.ErrorIs(t, err, fairlock.ErrLocked, "held and awaited")
	require.Len(t, e.queued(name), 1, "TryLock must not enqueue")
	require.NoError(t, holder.Unlock(hctx))
	r := await(t, waiter, 10*time.Second)
	require.NoError(t, r.err)
	require.NoError(t, w.Unlock(r.ctx))

	// A free lock with someone in line (as after a holder's lease ran out
	// before the head polled): plant a live waiter entry of another process.
	k := e.keys(name)
	entry := "0123456789abcdef:60000:someone-else"
	require.NoError(t, e.rdb.RPush(bg, k.Queue, entry).Err())
	require.NoError(t, e.rdb.ZAdd(bg, k.Deadline, redisZ(entry, time.Now().Add(time.Minute))).Err())
	_, err = e.client().Mutex(name).TryLock(bg)
	require.ErrorIs(t, err, fairlock.ErrLocked, "free and awaited: TryLock must not jump the line")
	owner, err := e.rdb.HGet(bg, k.Lock, "owner").Result()
	require.NoError(t, err)
	require.Equal(t, "someone-else", owner, "the head of the line was given the lock")
}

func waitersAreGrantedInJoinOrder(t *testing.T, e *env, name string) {
	const n = 8
	holder := e.client().Mutex(name)
	hctx, err := holder.Lock(context.Background())
	require.NoError(t, err)

	order := grantOrder(t, e, name, n, 50*time.Millisecond, nil, nil, func(ctx context.Context, m *fairlock.Mutex) {
		assert.NoError(t, m.Unlock(ctx))
	})
	released := time.Now()
	require.NoError(t, holder.Unlock(hctx))
	assert.Equal(t, seq(n), collect(t, order, n, 10*time.Second))
	took := time.Since(released)
	t.Logf("%d hand-overs in %v (%v each)", n, took, took/n)
	e.requireClean(name)
}

func concurrentIncrementsLoseNoUpdate(t *testing.T, e *env, name string) {
	const clients, goroutines, rounds = 4, 8, 15
	bg := context.Background()
	counter := e.prefix + ":{" + name + "}:counter" // in the lock's cluster slot
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		busy   bool
		tokens []int64 // in grant order; guarded by mu
	)
	for range clients {
		c := e.client()
		for range goroutines {
			m := c.Mutex(name)
			wg.Go(func() {
				for range rounds {
					lctx, err := m.Lock(bg)
					if !assert.NoError(t, err) {
						return
					}
					tok, err := m.Token(lctx)
					assert.NoError(t, err)
					mu.Lock()
					assert.False(t, busy, "two holders at once")
					busy = true
					tokens = append(tokens, tok)
					mu.Unlock()
					// A read-modify-write that loses updates without mutual exclusion.
					v, _ := e.rdb.Get(lctx, counter).Int()
					assert.NoError(t, e.rdb.Set(lctx, counter, v+1, 0).Err())
					mu.Lock()
					busy = false
					mu.Unlock()
					assert.NoError(t, m.Unlock(lctx))
				}
			})
		}
	}
	wg.Wait()
	v, err := e.rdb.Get(bg, counter).Int()
	require.NoError(t, err)
	require.Equal(t, clients*goroutines*rounds, v)
	for i := 1; i < len(tokens); i++ {
		require.Greater(t, tokens[i], tokens[i-1], "tokens must increase in grant order")
	}
	e.requireClean(name)
}

func reentryCountsLevels(t *testing.T, e *env, name string) {
	bg := context.Background()
	m := e.client().Mutex(name)
	ctx1, err := m.Lock(bg)
	require.NoError(t, err)
	tok1, err := m.Token(ctx1)
	require.NoError(t, err)

	ctx2, err := m.Lock(ctx1)
	require.NoError(t, err)
	ctx3, err := m.TryLock(ctx2)
	require.NoError(t, err)
	n, err := m.HoldCount(ctx3)
	require.NoError(t, err)
	require.Equal(t, 3, n)
	tok3, err := m.Token(ctx3)
	require.NoError(t, err)
	require.Equal(t, tok1, tok3, "re-entry keeps the token")
	_, err = e.client().Mutex(name).TryLock(bg)
	require.ErrorIs(t, err, fairlock.ErrLocked, "another owner")

	require.NoError(t, m.Unlock(ctx3))
	require.NoError(t, m.Unlock(ctx2))
	n, err = m.HoldCount(ctx1)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	locked, err := m.IsLocked(bg)
	require.NoError(t, err)
	require.True(t, locked)
	require.NoError(t, ctx1.Err(), "the hold goes on until the last Unlock")

	require.NoError(t, m.Unlock(ctx1))
	requireDone(t, ctx1, time.Second)
	require.ErrorIs(t, context.Cause(ctx1), context.Canceled)
	requireDone(t, ctx3, time.Second)
	locked, err = m.IsLocked(bg)
	require.NoError(t, err)
	require.False(t, locked)
	n, err = m.HoldCount(ctx1)
	require.NoError(t, err)
	require.Zero(t, n)
	require.ErrorIs(t, m.Unlock(ctx1), fairlock.ErrNotHeld, "unlock once more than locked")
}

func tokensIncreaseAcrossGrants(t *testing.T, e *env, name string) {
	bg := context.Background()
	var last int64
	for i := range 6 {
		m := e.client().Mutex(name)
		ctx, err := m.Lock(bg)
		require.NoError(t, err)
		tok, err := m.Token(ctx)
		require.NoError(t, err)
		require.Greater(t, tok, last, "grant %d", i)
		last = tok
		require.NoError(t, m.Unlock(ctx))
	}
	// Hand-overs count too.
	holder := e.client().Mutex(name)
	hctx, err := holder.Lock(bg)
	require.NoError(t, err)
	tok, err := holder.Token(hctx)
	require.NoError(t, err)
	require.Greater(t, tok, last)
	last = tok
	w := e.client().Mutex(name)
	next := lockAsync(bg, w)
	e.waitQueued(name, 1)
	require.NoError(t, holder.Unlock(hctx))
	r := await(t, next, 10*time.Second)
	require.NoError(t, r.err)
	tok, err = w.Token(r.ctx)
	require.NoError(t, err)
	require.Greater(t, tok, last, "a hand-over is a fresh grant")
	require.NoError(t, w.Unlock(r.ctx))
}

func forceUnlockHandsOverAndHolderLearnsLeaseLost(t *testing.T, e *env, name string) {
	bg := context.Background()
	m := e.client(fairlock.WithLease(300 * time.Millisecond)).Mutex(name)
	hctx, err := m.Lock(bg)
	require.NoError(t, err)
	w := e.client().Mutex(name)
	next := lockAsync(bg, w)
	e.waitQueued(name, 1)

	removed, err := e.client().Mutex(name).ForceUnlock(bg)
	require.NoError(t, err)
	require.True(t, removed)
	r := await(t, next, 10*time.Second)
	require.NoError(t, r.err)
	requireDone(t, hctx, 5*time.Second)
	require.ErrorIs(t, context.Cause(hctx), fairlock.ErrLeaseLost)
	n, err := w.HoldCount(r.ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.NoError(t, w.Unlock(r.ctx))
	e.requireClean(name)
}

func waiterDeadlineExceededIsReportedAndLeavesNoTrace(t *testing.T, e *env, name string) {
	bg := context.Background()
	m := e.client().Mutex(name)
	hctx, err := m.Lock(bg)
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(bg, 300*time.Millisecond)
	defer cancel()
	lctx, err := e.client().Mutex(name).Lock(ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Nil(t, lctx)
	e.requireClean(name)

	require.NoError(t, m.Unlock(hctx))
	locked, err := m.IsLocked(bg)
	require.NoError(t, err)
	require.False(t, locked, "nothing was handed to the waiter that left")
	e.requireClean(name)
}

func closeReturnsErrClosedToWaitersAndReleasesHolds(t *testing.T, e *env, name string) {
	bg := context.Background()
	holder := e.client().Mutex(name)
	hctx, err := holder.Lock(bg)
	require.NoError(t, err)

	c := e.client()
	var waiters []<-chan result
	for i := range 5 {
		waiters = append(waiters, lockAsync(bg, c.Mutex(name)))
		e.waitQueued(name, i+1)
	}
	other := name + "-held" // on a cluster, likely in another slot, on another master
	held, err := c.Mutex(other).Lock(bg)
	require.NoError(t, err)

	require.NoError(t, c.Close())
	for _, w := range waiters {
		require.ErrorIs(t, await(t, w, 10*time.Second).err, fairlock.ErrClosed)
	}
	e.requireClean(name)
	requireDone(t, held, time.Second)
	require.ErrorIs(t, context.Cause(held), fairlock.ErrClosed)
	locked, err := e.client().Mutex(other).IsLocked(bg)
	require.NoError(t, err)
	require.False(t, locked, "Close releases live holds")

	require.NoError(t, c.Close(), "Close twice")
	_, err = c.Mutex(name).Lock(bg)
	require.ErrorIs(t, err, fairlock.ErrClosed)
	require.NoError(t, holder.Unlock(hctx))
}
