package fairlock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/internal/redistest"
)

// redisAddr is the address of the Redis the examples use; in your code,
// the address of yours.
func redisAddr() string { return redistest.SharedAddr() }

func Example() {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()

	locks, err := fairlock.New(rdb, fairlock.WithPrefix("example"))
	if err != nil {
		panic(err)
	}
	defer locks.Close()

	m := locks.Mutex("invoice:2026-11")
	ctx, err := m.Lock(context.Background()) // waits in line, first come first served
	if err != nil {
		panic(err)
	}
	defer m.Unlock(ctx)

	token, _ := m.Token(ctx)
	fmt.Println("holding the lock with a fencing token:", token > 0)
	// Output: holding the lock with a fencing token: true
}

func ExampleNew() {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()

	locks, err := fairlock.New(rdb,
		fairlock.WithPrefix("example-new"),
		fairlock.WithLease(10*time.Second),    // renewed every 3.3s while held
		fairlock.WithWaiterTTL(5*time.Second), // a dead waiter holds up the line at most 5s
	)
	if err != nil {
		panic(err)
	}
	defer locks.Close()

	_, err = fairlock.New(rdb, fairlock.WithLease(0))
	fmt.Println(errors.Is(err, fairlock.ErrInvalidOption))
	// Output: true
}

func ExampleMutex_Lock() {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()
	locks, _ := fairlock.New(rdb, fairlock.WithPrefix("example-lock"))
	defer locks.Close()
	m := locks.Mutex("payments")

	// The caller's context bounds only the wait.
	waitCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ctx, err := m.Lock(waitCtx)
	if err != nil {
		fmt.Println("not granted:", err)
		return
	}
	// ctx is cancelled if the lock is lost: pass it to the work.
	doWork := func(ctx context.Context) error { return ctx.Err() }
	fmt.Println("work:", doWork(ctx))

	if err := m.Unlock(ctx); err != nil {
		fmt.Println("unlock:", err) // ErrLeaseLost: the work may have overlapped another holder's
	}
	fmt.Println("after unlock:", ctx.Err())
	// Output:
	// work: <nil>
	// after unlock: context canceled
}

func ExampleMutex_Lock_reentry() {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()
	locks, _ := fairlock.New(rdb, fairlock.WithPrefix("example-reentry"))
	defer locks.Close()
	m := locks.Mutex("inventory")

	outer, _ := m.Lock(context.Background())
	inner, _ := m.Lock(outer) // the context carries the hold: re-entry
	n, _ := m.HoldCount(inner)
	fmt.Println("levels:", n)

	_ = m.Unlock(inner)
	locked, _ := m.IsLocked(context.Background())
	fmt.Println("still locked:", locked)
	_ = m.Unlock(outer)
	locked, _ = m.IsLocked(context.Background())
	fmt.Println("locked after the last unlock:", locked)
	// Output:
	// levels: 2
	// still locked: true
	// locked after the last unlock: false
}

func ExampleMutex_Lock_nested() {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()
	locks, _ := fairlock.New(rdb, fairlock.WithPrefix("example-nested"))
	defer locks.Close()
	account, ledger := locks.Mutex("account:42"), locks.Mutex("ledger")

	// Holding one lock, take another with the context the first returned:
	// the new context carries both holds.
	actx, _ := account.Lock(context.Background())
	both, _ := ledger.Lock(actx)
	again, _ := account.Lock(both) // re-enters account:42 through the nested context
	n, _ := account.HoldCount(again)
	fmt.Println("account levels:", n)

	// Unlock in any order, through any context that carries the hold.
	_ = account.Unlock(again)
	_ = account.Unlock(both)
	fmt.Println("account hold ended:", actx.Err() != nil, "ledger hold ended:", both.Err() != nil)

	// both still carries the ledger hold, but its account hold is over: a
	// Lock takes a fresh one. (Had the account hold been lost instead,
	// the Lock would fail with ErrLeaseLost.)
	fresh, _ := account.Lock(both)
	n, _ = account.HoldCount(fresh)
	fmt.Println("fresh account levels:", n)
	_ = account.Unlock(fresh)
	_ = ledger.Unlock(fresh)
	fmt.Println("ledger hold ended:", both.Err() != nil)
	// Output:
	// account levels: 2
	// account hold ended: true ledger hold ended: false
	// fresh account levels: 1
	// ledger hold ended: true
}

func ExampleMutex_TryLock() {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()
	locks, _ := fairlock.New(rdb, fairlock.WithPrefix("example-try"))
	defer locks.Close()

	held, _ := locks.Mutex("report").Lock(context.Background())
	_, err := locks.Mutex("report").TryLock(context.Background())
	fmt.Println(errors.Is(err, fairlock.ErrLocked))
	_ = locks.Mutex("report").Unlock(held)
	// Output: true
}

func ExampleMutex_Token() {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()
	locks, _ := fairlock.New(rdb, fairlock.WithPrefix("example-token"))
	defer locks.Close()
	m := locks.Mutex("ledger")

	var last int64
	for range 3 {
		ctx, _ := m.Lock(context.Background())
		token, _ := m.Token(ctx)
		// A storage layer that remembers the highest token it has seen
		// can refuse a write from a holder whose lease was lost.
		fmt.Println("token increased:", token > last)
		last = token
		_ = m.Unlock(ctx)
	}
	// Output:
	// token increased: true
	// token increased: true
	// token increased: true
}

func ExampleContextWithOwner() {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()
	// Two Clients stand for two processes working on job 42.
	a, _ := fairlock.New(rdb, fairlock.WithPrefix("example-owner"))
	defer a.Close()
	b, _ := fairlock.New(rdb, fairlock.WithPrefix("example-owner"))
	defer b.Close()

	job := fairlock.ContextWithOwner(context.Background(), "job-42")
	actx, _ := a.Mutex("job").Lock(job)
	bctx, err := b.Mutex("job").TryLock(job) // the same owner re-enters
	fmt.Println("shared:", err == nil)
	n, _ := b.Mutex("job").HoldCount(bctx)
	fmt.Println("levels:", n)
	_ = b.Mutex("job").Unlock(bctx)
	_ = a.Mutex("job").Unlock(actx)
	// Output:
	// shared: true
	// levels: 2
}

func ExampleWithFixedLease() {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()
	locks, _ := fairlock.New(rdb, fairlock.WithPrefix("example-fixed"))
	defer locks.Close()

	m := locks.Mutex("nightly-report", fairlock.WithFixedLease(50*time.Millisecond))
	ctx, _ := m.Lock(context.Background())
	<-ctx.Done() // no watchdog: the hold ends when the lease runs out
	fmt.Println(context.Cause(ctx) == fairlock.ErrLeaseLost)
	// Output: true
}

func ExampleMutex_ForceUnlock() {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()
	locks, _ := fairlock.New(rdb, fairlock.WithPrefix("example-force"))
	defer locks.Close()
	m := locks.Mutex("stuck")

	_, _ = m.Lock(context.Background())
	removed, _ := m.ForceUnlock(context.Background())
	fmt.Println("removed:", removed)
	ttl, _ := m.TTL(context.Background())
	fmt.Println("ttl:", ttl)
	// Output:
	// removed: true
	// ttl: 0s
}

func ExampleWithObserver() {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()

	// Print how each Lock call on the Client was granted and how long the
	// hold lasted. A real Observer would feed a histogram instead.
	observer := fairlock.ObserverFunc(func(ctx context.Context, e fairlock.Event) {
		switch e.Kind {
		case fairlock.EventGranted:
			fmt.Printf("%s granted (%s)\n", e.Lock, e.Grant)
		case fairlock.EventHoldEnded:
			fmt.Printf("%s released (%s)\n", e.Lock, e.End)
		}
	})
	locks, err := fairlock.New(rdb, fairlock.WithPrefix("example-observer"), fairlock.WithObserver(observer))
	if err != nil {
		panic(err)
	}
	defer locks.Close()

	m := locks.Mutex("report:daily")
	ctx, err := m.Lock(context.Background())
	if err != nil {
		panic(err)
	}
	if err := m.Unlock(ctx); err != nil {
		panic(err)
	}
	// The Observer runs on a goroutine of the Client, after the calls it
	// hears of: Close delivers the events it has not seen yet.
	if err := locks.Close(); err != nil {
		panic(err)
	}
	// Output:
	// report:daily granted (fresh)
	// report:daily released (unlocked)
}

func ExampleClient_DroppedEvents() {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()

	granted := 0
	observer := fairlock.ObserverFunc(func(ctx context.Context, e fairlock.Event) {
		if e.Kind == fairlock.EventGranted {
			granted++ // one Client's calls to Observe never overlap
		}
	})
	// A queue of 4096 events instead of 1024, for an Observer that stalls
	// now and then.
	locks, err := fairlock.New(rdb, fairlock.WithPrefix("example-dropped"),
		fairlock.WithObserver(observer), fairlock.WithObserverQueue(4096))
	if err != nil {
		panic(err)
	}
	defer locks.Close()
	// Export the count beside the Observer's metrics, and alert when it
	// rises: those metrics then undercount. With Prometheus, for example:
	//
	//	prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "fairlock_dropped_events_total"},
	//		func() float64 { return float64(locks.DroppedEvents()) })

	m := locks.Mutex("report:weekly")
	for range 3 {
		ctx, err := m.Lock(context.Background())
		if err != nil {
			panic(err)
		}
		if err := m.Unlock(ctx); err != nil {
			panic(err)
		}
	}
	if err := locks.Close(); err != nil { // delivers the events still queued
		panic(err)
	}
	fmt.Println("granted:", granted, "dropped:", locks.DroppedEvents())
	// Output:
	// granted: 3 dropped: 0
}

func ExampleClient_Inspect() {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()

	locks, err := fairlock.New(rdb, fairlock.WithPrefix("example-inspect"))
	if err != nil {
		panic(err)
	}
	defer locks.Close()

	m := locks.Mutex("invoice:42")
	ctx, err := m.Lock(fairlock.ContextWithOwner(context.Background(), "billing-1"))
	if err != nil {
		panic(err)
	}
	defer m.Unlock(ctx)

	// Who holds invoice:42, through which Client, and who waits behind it.
	s, err := locks.Inspect(context.Background(), "invoice:42")
	if err != nil {
		panic(err)
	}
	fmt.Println(s.Held, s.Owner, s.Count, s.Client == locks.ID(), len(s.Waiters))

	// Every lock held or waited on whose name matches a pattern.
	names, err := locks.List(context.Background(), "invoice:*")
	if err != nil {
		panic(err)
	}
	fmt.Println(names)
	// Output:
	// true billing-1 1 true 0
	// [invoice:42]
}

// A transfer locks both accounts; given in either order, the names are
// taken in one order, so two opposite transfers never deadlock.
func ExampleClient_MultiLock() {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()

	locks, err := fairlock.New(rdb, fairlock.WithPrefix("example-multi"))
	if err != nil {
		panic(err)
	}
	defer locks.Close()

	accounts := locks.MultiLock([]string{"account:bob", "account:alice"})
	ctx, err := accounts.Lock(context.Background()) // both, or none
	if err != nil {
		panic(err)
	}
	defer accounts.Unlock(ctx)

	fmt.Println(accounts.Names())
	alice, _ := accounts.Token(ctx, "account:alice")
	fmt.Println("fencing token for alice's account:", alice > 0)
	// Output:
	// [account:alice account:bob]
	// fencing token for alice's account: true
}

// At most three reports render at a time, across every process, in the
// order they were asked for; a large report takes two of the three
// permits.
func ExampleSemaphore() {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()
	locks, err := fairlock.New(rdb, fairlock.WithPrefix("example-semaphore"))
	if err != nil {
		panic(err)
	}
	defer locks.Close()

	renderers := locks.Semaphore("renderers", 3)
	render := func(ctx context.Context, weight int64) error {
		held, err := renderers.Acquire(ctx, weight) // waits its turn
		if err != nil {
			return err
		}
		defer renderers.Release(held)
		token, _ := renderers.Token(held)
		_ = token // pass it to the storage the report is written to
		return nil
	}
	fmt.Println(render(context.Background(), 1), render(context.Background(), 2))

	_, err = renderers.Acquire(context.Background(), 4)
	fmt.Println(errors.Is(err, fairlock.ErrInvalidOption))
	// Output:
	// <nil> <nil>
	// true
}

// Readers of a price list share it; the nightly update writes alone, and
// readers who come while it waits queue behind it instead of starving it.
func ExampleRWMutex() {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()
	locks, err := fairlock.New(rdb, fairlock.WithPrefix("example-rwmutex"))
	if err != nil {
		panic(err)
	}
	defer locks.Close()

	prices := locks.RWMutex("prices")
	ctx := context.Background()

	r1, _ := prices.RLock(ctx)
	r2, _ := prices.RLock(ctx) // a second reader shares the lock
	_, err = prices.TryLock(ctx)
	fmt.Println("writer while read:", errors.Is(err, fairlock.ErrLocked))
	prices.RUnlock(r1)
	prices.RUnlock(r2)

	w, err := prices.Lock(ctx)
	if err != nil {
		panic(err)
	}
	// Downgrade: take the read lock under the write lock, then let the
	// write lock go; readers waiting are let in beside this one.
	r, _ := prices.RLock(w)
	prices.Unlock(w)
	fmt.Println("still reading:", r.Err() == nil)
	prices.RUnlock(r)
	// Output:
	// writer while read: true
	// still reading: true
}

// A lock held on a majority of three independent Redis masters: it
// survives the loss of any one of them, a failover of one cannot grant it
// twice, and its fencing token is committed to a majority.
func ExampleNewQuorum() {
	var masters []redis.UniversalClient
	for _, addr := range masterAddrs() {
		rdb := redis.NewClient(&redis.Options{Addr: addr})
		defer rdb.Close()
		masters = append(masters, rdb)
	}
	locks, err := fairlock.NewQuorum(context.Background(), masters, fairlock.WithPrefix("example"))
	if err != nil {
		panic(err)
	}
	defer locks.Close()

	m := locks.Mutex("ledger")
	ctx, err := m.Lock(context.Background()) // bakery order across every Client
	if err != nil {
		panic(err)
	}
	token, err := m.Token(ctx) // the first call commits it to a majority
	if err != nil {
		panic(err)
	}
	ttl, _ := m.TTL(ctx)
	fmt.Println("token:", token > 0, "validity left:", ttl > 20*time.Second)
	if err := m.Unlock(ctx); err != nil {
		panic(err)
	}
	// Output: token: true validity left: true
}

// masterAddrs are the addresses of three independent Redis masters the
// examples use; in your code, yours.
func masterAddrs() []string { return redistest.SharedMasterAddrs() }

// Two schedulers campaign to run the nightly jobs; the first leads, and
// when it resigns the second is elected by push. A dashboard observes
// who leads.
func ExampleElection() {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()
	locks, err := fairlock.New(rdb, fairlock.WithPrefix("example-election"))
	if err != nil {
		panic(err)
	}
	defer locks.Close()
	ctx := context.Background()
	scheduler := locks.Election("nightly-jobs")

	watch, stop := context.WithCancel(ctx)
	defer stop()
	views, err := scheduler.Observe(watch)
	if err != nil {
		panic(err)
	}
	show := func() {
		l := <-views
		if !l.HasLeader() {
			fmt.Println("no leader")
			return
		}
		fmt.Println("leader:", l.Value)
	}
	show() // the current leadership, at once

	lead, err := scheduler.Campaign(ctx, "scheduler-1")
	if err != nil {
		panic(err)
	}
	show()
	term, _ := scheduler.Term(lead)
	_ = term // stamp every write of the leader with it

	second := make(chan context.Context)
	go func() {
		next, err := scheduler.Campaign(ctx, "scheduler-2") // waits its turn
		if err != nil {
			panic(err)
		}
		second <- next
	}()
	_ = scheduler.Resign(lead) // hands the leadership to scheduler-2, once in line
	next := <-second
	for l := range views { // the latest view: maybe "no leader" first, if scheduler-2 came late
		if l.HasLeader() {
			fmt.Println("leader:", l.Value)
			break
		}
	}
	_ = scheduler.Resign(next)
	show()
	// Output:
	// no leader
	// leader: scheduler-1
	// leader: scheduler-2
	// no leader
}
