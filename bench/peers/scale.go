package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fairlock/fairlock"
	"github.com/redis/go-redis/v9"
)

// scaleConfig is the command line's settings of the scale part.
type scaleConfig struct {
	waiters int           // goroutines of the large hand-over and of the waiters part
	holds   int           // locks held at once through one Client
	window  time.Duration // time over which the renewals of the holds are counted
	names   int           // distinct names locked and unlocked through one Client
	profile string        // directory for heap profiles of the names step, "" for none
}

// The fixed settings of the scale part.
const (
	scaleClients      = 4               // Clients the waiters are spread over
	scaleSmallWaiters = 16              // goroutines of the small hand-over
	scaleLease        = 3 * time.Second // lease of the holds part: a renewal every second
	scaleBound        = 2 * time.Minute // bounds a part's Locks and the wait for a full queue
)

// spreadClients are the numbers of Clients the small hand-over's waiters
// are spread over in turn: each waiting Client hears only its own
// waiters' grants, so the cost per grant should not grow with them.
var spreadClients = []int{1, 4, 16}

// runScale measures fairlock alone at scale: the hand-over with few and
// with many waiters, many holds in one Client, and many waiters queued
// behind a holder. It logs each step to log.
func runScale(ctx context.Context, srv *server, o options, log io.Writer) (scaleResult, error) {
	res := scaleResult{}
	handover := func(n, clients int, d time.Duration) (handoverResult, error) {
		warm := min(o.warmup, (d / 6).Round(time.Millisecond))
		fmt.Fprintf(log, "peers: scale, hand-over with %d waiters over %d Clients: %v warm-up, %v measured\n", n, clients, warm, d)
		return measureHandover(ctx, srv, n, clients, d, warm, o.lib.ttl)
	}
	small, err := handover(scaleSmallWaiters, scaleClients, o.duration)
	if err != nil {
		return scaleResult{}, fmt.Errorf("hand-over with %d waiters: %w", scaleSmallWaiters, err)
	}
	// The spread runs before the large hand-over, whose waiters leave the
	// line for a while after it ends (each gives up with a script) and
	// would weigh on the server's time per grant here.
	for _, clients := range spreadClients {
		r, err := handover(scaleSmallWaiters, clients, o.duration)
		if err != nil {
			return scaleResult{}, fmt.Errorf("hand-over over %d Clients: %w", clients, err)
		}
		res.Spread = append(res.Spread, r)
	}
	large, err := handover(o.scale.waiters, scaleClients, o.waitersDuration)
	if err != nil {
		return scaleResult{}, fmt.Errorf("hand-over with %d waiters: %w", o.scale.waiters, err)
	}
	res.Handover = []handoverResult{small, large}
	if small.P50ms > 0 {
		res.HandoverP50Ratio = large.P50ms / small.P50ms
	}

	fmt.Fprintf(log, "peers: scale, %d holds in one Client, renewals counted over %v\n", o.scale.holds, o.scale.window)
	holds, err := measureHolds(ctx, srv, o.scale.holds, o.scale.window)
	if err != nil {
		return scaleResult{}, fmt.Errorf("holds: %w", err)
	}
	res.Holds = holds

	fmt.Fprintf(log, "peers: scale, %d waiters queued behind a holder\n", o.scale.waiters)
	waiters, err := measureWaiters(ctx, srv, o.scale.waiters)
	if err != nil {
		return scaleResult{}, fmt.Errorf("waiters: %w", err)
	}
	res.Waiters = waiters

	if res.Names, err = measureNamesEverywhere(ctx, srv, o.scale, log); err != nil {
		return scaleResult{}, fmt.Errorf("names: %w", err)
	}
	return res, nil
}

// measureHandover runs goroutines goroutines over clients fresh Clients, each looping Lock and Unlock on the lock scale:handover:N with
// nothing held in between, for d after a warm-up of warm on a lock of its
// own. A hand-over is the time from an Unlock's return, kept in a shared
// atomic, to the next grant; the first grant follows no Unlock and has
// none. Grants after the deadline count as nothing. The server's CPU time
// over the measured span is divided among its grants.
func measureHandover(ctx context.Context, srv *server, goroutines, clients int, d, warm, lease time.Duration) (res handoverResult, err error) {
	name := fmt.Sprintf("scale:handover:%d:%d", goroutines, clients)
	fc, err := openFairClients(srv.opts, clients, lease)
	if err != nil {
		return handoverResult{}, err
	}
	defer func() { err = errors.Join(err, fc.close()) }()
	if warm > 0 {
		lockers := make([]locker, len(fc.clients))
		for i, c := range fc.clients {
			lockers[i] = fairLocker{c}
		}
		wctx, cancel := context.WithTimeout(ctx, warm)
		drive(wctx, workload{names: 1}, lockers, name+":warm", min(goroutines, warmGoroutines))
		cancel()
	}

	before, err := srv.stats(ctx)
	if err != nil {
		return handoverResult{}, err
	}
	rctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	deadline, _ := rctx.Deadline()
	base := time.Now()
	var lastUnlock atomic.Int64 // since base, in ns, of the latest Unlock's return; 0 before the first
	t := newTally(goroutines)
	gaps := make([][]time.Duration, goroutines) // per goroutine, written only by it
	var wg sync.WaitGroup
	for g := range goroutines {
		m := fc.clients[g%len(fc.clients)].Mutex(name)
		wg.Go(func() {
			for rctx.Err() == nil {
				held, err := m.Lock(rctx)
				granted := time.Since(base)
				if err != nil {
					if rctx.Err() == nil {
						t.fail(err)
					}
					continue
				}
				if base.Add(granted).Before(deadline) {
					t.counts[g]++
					if last := lastUnlock.Load(); last != 0 {
						gaps[g] = append(gaps[g], granted-time.Duration(last))
					}
				}
				if err := m.Unlock(held); err != nil {
					t.fail(fmt.Errorf("unlock: %w", err))
					continue
				}
				lastUnlock.Store(int64(time.Since(base)))
			}
		})
	}
	wg.Wait()
	after, err := srv.stats(ctx)
	if err != nil {
		return handoverResult{}, err
	}

	elapsed := deadline.Sub(base)
	q := summarizeWaits(gaps)
	res = handoverResult{
		Waiters:      goroutines,
		Clients:      len(fc.clients),
		Seconds:      elapsed.Seconds(),
		Grants:       t.grants(),
		GrantsPerSec: float64(t.grants()) / elapsed.Seconds(),
		P50ms:        ms(q.P50),
		P99ms:        ms(q.P99),
		Maxms:        ms(q.Max),
		Errors:       t.errors.Load(),
	}
	if g := t.grants(); g > 0 {
		res.ServerUsPerGrant = float64((after.cpu - before.cpu).Microseconds()) / float64(g)
	}
	if err := t.firstError(); err != nil {
		res.FirstError = err.Error()
	}
	return res, nil
}

// measureHolds takes n locks, scale:hold:0 to scale:hold:n-1, one after
// another through one fresh Client with a lease of scaleLease, and keeps
// them all: it counts goroutines before the Client, with a tenth of them
// held and with all held, the growth of the Go heap and of Redis's memory
// per hold, then the renewals and round trips over window. It unlocks them
// all and closes the Client before it returns.
func measureHolds(ctx context.Context, srv *server, n int, window time.Duration) (res holdsResult, err error) {
	ctx, cancel := context.WithTimeout(ctx, scaleBound)
	defer cancel()
	res = holdsResult{Holds: n, TenthHolds: n / 10, Lease: scaleLease.String()}
	res.GoroutinesBefore = runtime.NumGoroutine()
	fc, err := openFairClients(srv.opts, 1, scaleLease)
	if err != nil {
		return holdsResult{}, err
	}
	defer func() { err = errors.Join(err, fc.close()) }()
	c := fc.clients[0]
	warm := c.Mutex("scale:hold:warm") // opens the connection and loads the scripts
	h, err := warm.Lock(ctx)
	if err == nil {
		err = warm.Unlock(h)
	}
	if err != nil {
		return holdsResult{}, fmt.Errorf("warm-up: %w", err)
	}
	before, err := measureFootprint(ctx, srv)
	if err != nil {
		return holdsResult{}, err
	}

	mutexes, held := make([]*fairlock.Mutex, 0, n), make([]context.Context, 0, n)
	defer func() { // when a step failed before Close
		for i, h := range held {
			if uerr := mutexes[i].Unlock(h); uerr != nil {
				err = errors.Join(err, fmt.Errorf("unlock %s: %w", mutexes[i].Name(), uerr))
				return
			}
		}
	}()
	for i := range n {
		m := c.Mutex(fmt.Sprintf("scale:hold:%d", i))
		h, err := m.Lock(ctx)
		if err != nil {
			return holdsResult{}, fmt.Errorf("lock %s: %w", m.Name(), err)
		}
		mutexes, held = append(mutexes, m), append(held, h)
		if i+1 == res.TenthHolds {
			res.GoroutinesTenth = runtime.NumGoroutine()
		}
	}
	after, err := measureFootprint(ctx, srv)
	if err != nil {
		return holdsResult{}, err
	}
	res.GoroutinesAll = after.goroutines
	res.HeapBytesPerHold = float64(after.heap-before.heap) / float64(n)
	res.RedisBytesPerHold = float64(after.redis-before.redis) / float64(n)

	calls := fc.hook.read()
	start := time.Now()
	select {
	case <-ctx.Done():
		return holdsResult{}, ctx.Err()
	case <-time.After(window):
	}
	elapsed := time.Since(start).Seconds()
	got := fc.hook.read().minus(calls)
	res.WindowSeconds, res.Renewals, res.RoundTrips = elapsed, got.scripts, got.roundTrips
	res.RenewalsPerSec, res.RoundTripsPerSec = float64(got.scripts)/elapsed, float64(got.roundTrips)/elapsed

	closed, err := measureClose(ctx, srv, fc, c, held)
	held = nil // Close ended them, whatever it measured
	if err != nil {
		return holdsResult{}, fmt.Errorf("close: %w", err)
	}
	res.Close = closed
	return res, nil
}

// measureClose closes c, the Client of fc, while it keeps the holds held
// (one level each) of the locks scale:hold:0 to scale:hold:n-1, renewed
// as usual, and reads what became of them: how long Close took, how many
// of the release scripts it sent found their hold (found the owner still
// holding) or found it gone (the key had expired), whether every hold's
// context ended, and how many hold keys were still in Redis when Close
// returned (unreleased, they expire after their lease).
func measureClose(ctx context.Context, srv *server, fc *fairClients, c *fairlock.Client, held []context.Context) (closeResult, error) {
	lost := 0
	for _, h := range held {
		if h.Err() != nil {
			lost++
		}
	}
	found, gone, failed := fc.hook.found.Load(), fc.hook.gone.Load(), fc.hook.failed.Load()
	start := time.Now()
	if err := c.Close(); err != nil {
		return closeResult{}, err
	}
	res := closeResult{
		Seconds:    time.Since(start).Seconds(),
		Found:      fc.hook.found.Load() - found,
		Gone:       fc.hook.gone.Load() - gone,
		Failed:     fc.hook.failed.Load() - failed,
		LostBefore: lost,
	}
	for _, h := range held {
		if h.Err() == nil {
			res.ContextsLive++
		}
	}
	const batch = 1000
	for from := 0; from < len(held); from += batch {
		pipe := srv.admin.Pipeline()
		for i := from; i < min(from+batch, len(held)); i++ {
			pipe.Exists(ctx, fmt.Sprintf("fairlock:{scale:hold:%d}", i)) // with the default prefix
		}
		cmds, err := pipe.Exec(ctx)
		if err != nil {
			return closeResult{}, fmt.Errorf("EXISTS: %w", err)
		}
		for _, cmd := range cmds {
			res.KeysLeft += cmd.(*redis.IntCmd).Val()
		}
	}
	res.LeftToExpire = int64(len(held)-lost) - res.Found
	return res, nil
}

// footprint is what this process and the Redis server use at one moment.
type footprint struct {
	goroutines int   // runtime.NumGoroutine
	heap       int64 // bytes of live heap objects after a collection (HeapAlloc)
	stacks     int64 // bytes of goroutine stacks (StackInuse)
	redis      int64 // INFO's used_memory
}

// measureFootprint counts the goroutines, collects garbage, and reads the
// memory in use here and in Redis.
func measureFootprint(ctx context.Context, srv *server) (footprint, error) {
	f := footprint{goroutines: runtime.NumGoroutine()}
	runtime.GC()
	var st runtime.MemStats
	runtime.ReadMemStats(&st)
	f.heap, f.stacks = int64(st.HeapAlloc), int64(st.StackInuse)
	var err error
	f.redis, err = srv.usedMemory(ctx)
	return f, err
}

// measureWaiters queues n goroutines, over scaleClients fresh Clients, on
// the lock scale:wait, which a Client of its own holds all along, so that
// nobody is granted. A first waiter on each Client is queued before the
// measurement, so that what every Client spends once (its pub/sub
// connection, the subscription to the lock) is left out. Once the lock's
// queue in Redis holds every waiter, it measures per waiter the growth of
// the Go heap, of goroutine stacks, of Redis's memory and of the number of
// goroutines. Then it ends the waits, releases the lock and closes the
// Clients.
func measureWaiters(ctx context.Context, srv *server, n int) (res waitersResult, err error) {
	ctx, cancel := context.WithTimeout(ctx, scaleBound)
	defer cancel()
	const name = "scale:wait"
	queue := "fairlock:{" + name + "}:queue" // with the default prefix
	deadlines := "fairlock:{" + name + "}:deadline"
	holders, err := openFairClients(srv.opts, 1, scaleLease)
	if err != nil {
		return waitersResult{}, err
	}
	defer func() { err = errors.Join(err, holders.close()) }()
	fc, err := openFairClients(srv.opts, scaleClients, scaleLease)
	if err != nil {
		return waitersResult{}, err
	}
	defer func() { err = errors.Join(err, fc.close()) }()
	holder := holders.clients[0].Mutex(name)
	held, err := holder.Lock(ctx)
	if err != nil {
		return waitersResult{}, fmt.Errorf("holder: %w", err)
	}
	defer func() {
		if uerr := holder.Unlock(held); uerr != nil {
			err = errors.Join(err, fmt.Errorf("holder: unlock: %w", uerr))
		}
	}()

	t := newTally(0) // only the failures
	var granted atomic.Int64
	wctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stop() // the waits end before wg.Wait and before the holder unlocks
	wait := func(c *fairlock.Client) {
		m := c.Mutex(name)
		wg.Go(func() {
			held, err := m.Lock(wctx)
			if err != nil {
				if wctx.Err() == nil {
					t.fail(err)
				}
				return
			}
			granted.Add(1) // behind a holder: the measurement is void
			if err := m.Unlock(held); err != nil {
				t.fail(fmt.Errorf("unlock: %w", err))
			}
		})
	}
	for _, c := range fc.clients {
		wait(c)
	}
	if err := waitQueued(ctx, srv, queue, int64(len(fc.clients)), t); err != nil {
		return waitersResult{}, err
	}

	before, err := measureFootprint(ctx, srv)
	if err != nil {
		return waitersResult{}, err
	}
	keysBefore, err := srv.keysMemory(ctx, queue, deadlines)
	if err != nil {
		return waitersResult{}, err
	}
	for g := range n {
		wait(fc.clients[g%len(fc.clients)])
	}
	if err := waitQueued(ctx, srv, queue, int64(len(fc.clients)+n), t); err != nil {
		return waitersResult{}, err
	}
	after, err := measureFootprint(ctx, srv)
	if err != nil {
		return waitersResult{}, err
	}
	keysAfter, err := srv.keysMemory(ctx, queue, deadlines)
	if err != nil {
		return waitersResult{}, err
	}
	if g := granted.Load(); g > 0 {
		return waitersResult{}, fmt.Errorf("%d waiters were granted a lock that was held", g)
	}
	per := func(before, after int64) float64 { return float64(after-before) / float64(n) }
	return waitersResult{
		Waiters:             n,
		Clients:             len(fc.clients),
		HeapBytesPerWaiter:  per(before.heap, after.heap),
		StackBytesPerWaiter: per(before.stacks, after.stacks),
		RedisBytesPerWaiter: per(keysBefore, keysAfter),
		GoroutinesPerWaiter: per(int64(before.goroutines), int64(after.goroutines)),
	}, nil
}

// waitQueued polls the length of the list at key until it reaches n. It
// gives up when ctx ends or when a waiter of t failed, since the queue
// would then never fill.
func waitQueued(ctx context.Context, srv *server, key string, n int64, t *tally) error {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		got, err := srv.admin.LLen(ctx, key).Result()
		switch {
		case err != nil:
			return fmt.Errorf("LLEN %s: %w", key, err)
		case got >= n:
			return nil
		case t.errors.Load() > 0:
			return fmt.Errorf("a waiter failed with %d queued: %w", got, t.firstError())
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d of %d waiters queued: %w", got, n, ctx.Err())
		case <-tick.C:
		}
	}
}
