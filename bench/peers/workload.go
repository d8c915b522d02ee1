package main

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// A workload is a shape of load: how many goroutines, over how many
// clients, take which locks and hold them how long.
type workload struct {
	key        string // selects it on the command line
	title      string
	goroutines int
	clients    int
	names      int           // lock names; each grant picks one at random (several: multi)
	hold       time.Duration // time in the critical section
	long       bool          // measured for -waiters-duration instead of -duration
	// background makes Lock and Unlock take context.Background(), which
	// has no deadline and no Done channel, instead of the run's context,
	// which has a deadline. Only for a workload whose Lock never waits:
	// nothing but the lock's grant ends such a Lock.
	background bool
	// contextTimeouts builds every go-redis client of the workload with
	// ContextTimeoutEnabled, which bounds each of its calls by the
	// context's deadline.
	contextTimeouts bool
	// multi, when set, makes each grant take several distinct names at
	// once, from multi[0] to multi[1] of them, picked at random and in a
	// random order (lockAll), instead of one.
	multi [2]int
	// permits, when set, makes lock name 0 a semaphore of that many
	// permits, which each grant takes its goroutine's weight of with the
	// locker's acquire (semaphore.go), instead of a lock.
	permits int
	// weights are the permits each grant of a semaphore takes: the
	// goroutines are cut into len(weights) runs of equal length, the
	// first asking for weights[0] each time, the next for weights[1], and
	// so on. The clients take the goroutines round-robin, so each client
	// serves each weight alike when the runs are multiples of the clients.
	weights []int
	// masters, when set, makes the workload run on that many independent
	// Redis masters (redlock.go) instead of the one server: each client
	// is a locker of the library's quorum lock over one go-redis client
	// per master, and only the libraries that have one run it. Each hold
	// of a locker whose locks carry fencing tokens asks for its token
	// inside the critical section, and the tokens of a name must rise
	// strictly from grant to grant.
	masters int
}

// workloads are every workload, in the order they run.
var workloads = []workload{
	{key: "uncontended", title: "uncontended Lock+Unlock, a context with a deadline", goroutines: 1, clients: 1, names: 1},
	{key: "uncontended-bg", title: "uncontended Lock+Unlock, context.Background()", goroutines: 1, clients: 1, names: 1, background: true},
	{key: "uncontended-ctt", title: "uncontended Lock+Unlock, a context with a deadline, go-redis clients with ContextTimeoutEnabled", goroutines: 1, clients: 1, names: 1, contextTimeouts: true},
	{key: hold0Key, title: "contended, hold 0, 4 clients × 4 goroutines", goroutines: 16, clients: 4, names: 1},
	{key: "hold0-1x16", title: "contended, hold 0, 1 client × 16 goroutines", goroutines: 16, clients: 1, names: 1},
	{key: "hold5ms", title: "contended, hold 5 ms", goroutines: 16, clients: 4, names: 1, hold: 5 * time.Millisecond},
	{key: "many", title: "many locks", goroutines: 64, clients: 4, names: 1000},
	{key: multiKey, title: "several locks at once", goroutines: 16, clients: 4, names: 16, hold: time.Millisecond, multi: [2]int{2, 4}},
	{key: semaphoreKey, title: "a weighted semaphore", goroutines: 16, clients: 4, names: 1, hold: time.Millisecond, permits: 3, weights: []int{1, 2}},
	// The same at hold 0, to weigh a Semaphore grant against hold0's Mutex
	// grant under the same load: a server that idles between calls pays
	// more per call.
	{key: "semaphore-hold0", title: "a weighted semaphore, hold 0", goroutines: 16, clients: 4, names: 1, permits: 3, weights: []int{1, 2}},
	{key: redlockKey, title: "RedLock: one lock on 3 independent masters", goroutines: 16, clients: 4, names: 1, masters: redlockMasters},
	{key: "waiters", title: "10,000 waiters on one lock", goroutines: 10000, clients: 4, names: 1, long: true},
}

// hold0Key is the workload the cross-process floor is compared with.
const hold0Key = "hold0"

// multiKey is the workload that takes several names at once.
const multiKey = "multi"

// semaphoreKey is the workload that shares the permits of a semaphore.
const semaphoreKey = "semaphore"

// redlockKey is the workload on several independent masters.
const redlockKey = "redlock"

// shape describes w in a few words for the report.
func (w workload) shape() string {
	s := fmt.Sprintf("%s goroutines over %d clients", group(int64(w.goroutines)), w.clients)
	switch {
	case w.goroutines == 1:
		s = "1 goroutine, 1 client"
	case w.clients == 1:
		s = fmt.Sprintf("%s goroutines in 1 client", group(int64(w.goroutines)))
	}
	switch {
	case w.masters > 0:
		s += fmt.Sprintf(", 1 lock on %d masters", w.masters)
	case w.multi[1] > 0:
		s += fmt.Sprintf(", %d to %d of %s locks at once", w.multi[0], w.multi[1], group(int64(w.names)))
	case w.permits > 0:
		weights := make([]string, len(w.weights))
		for i, n := range w.weights {
			weights[i] = strconv.Itoa(n)
		}
		s += fmt.Sprintf(", 1 semaphore of %d permits taken %s at a time, by %s goroutines each",
			w.permits, strings.Join(weights, " or "), group(int64(w.goroutines/max(1, len(w.weights)))))
	case w.names == 1:
		s += ", 1 lock"
	default:
		s += fmt.Sprintf(", %s locks", group(int64(w.names)))
	}
	if w.hold > 0 {
		s += fmt.Sprintf(", holding %v", w.hold)
	}
	return s
}

// countsAttempts reports whether a grant in w may take several attempts,
// which the report then counts: in multi and semaphore.
func (w workload) countsAttempts() bool { return w.multi[1] > 0 || w.permits > 0 }

// capacity returns how many a lock name of w admits at once: a
// semaphore's permits, or 1.
func (w workload) capacity() int {
	if w.permits > 0 {
		return w.permits
	}
	return 1
}

// weight returns the permits each grant of goroutine g of goroutines
// takes: its weight in a semaphore workload, or 1.
func (w workload) weight(g, goroutines int) int {
	if w.permits == 0 || len(w.weights) == 0 {
		return 1
	}
	return w.weights[g*len(w.weights)/goroutines]
}

// scaleKey selects the scale part (scale.go): fairlock alone, run after
// the workloads. namesKey selects its last step alone (scale_names.go).
const (
	scaleKey = "scale"
	namesKey = "names"
)

// selection is what -workloads selects.
type selection struct {
	workloads []workload
	floor     bool // the cross-process floor (floor.go), run before the workloads
	scale     bool // the scale part, run after them
	names     bool // the scale part's names step alone, run after them
}

// selectWorkloads returns the workloads named in the comma-separated list,
// and whether it names the floor and the scale part; everything when it
// is empty.
func selectWorkloads(list string) (selection, error) {
	if list == "" {
		return selection{workloads: workloads, floor: true, scale: true}, nil
	}
	var sel selection
	for _, key := range strings.Split(list, ",") {
		switch key = strings.TrimSpace(key); key {
		case scaleKey:
			sel.scale = true
		case namesKey:
			sel.names = true
		case floorKey:
			sel.floor = true
		default:
			i := slices.IndexFunc(workloads, func(w workload) bool { return w.key == key })
			if i < 0 {
				return selection{}, fmt.Errorf("unknown workload %q (known: %s)", key, workloadKeys())
			}
			sel.workloads = append(sel.workloads, workloads[i])
		}
	}
	return sel, nil
}

func workloadKeys() string {
	keys := []string{floorKey}
	for _, w := range workloads {
		keys = append(keys, w.key)
	}
	return strings.Join(append(keys, scaleKey, namesKey), ", ")
}

// unlockTimeout bounds an unlock, which runs after the run's deadline too.
const unlockTimeout = 5 * time.Second

// unlockWithin calls unlock with context.Background() when background is
// set, or else with a context that ends after unlockTimeout.
func unlockWithin(unlock func(context.Context) error, background bool) error {
	if background {
		return unlock(context.Background())
	}
	ctx, cancel := context.WithTimeout(context.Background(), unlockTimeout)
	defer cancel()
	return unlock(ctx)
}

// pick appends to dst the indexes, below w.names, of the locks of one
// grant: one at random, or for a multi workload from w.multi[0] to
// w.multi[1] distinct ones, in a random order.
func (w workload) pick(rng *rand.Rand, dst []int) []int {
	if w.multi[1] == 0 {
		return append(dst, rng.IntN(w.names))
	}
	n := w.multi[0] + rng.IntN(w.multi[1]-w.multi[0]+1)
	for len(dst) < n {
		if i := rng.IntN(w.names); !slices.Contains(dst, i) {
			dst = append(dst, i)
		}
	}
	return dst
}

// take takes the locks of names at indexes picked, with lk.lock for one
// name, lk.lockAll for a multi workload or weight permits with lk.acquire
// for a semaphore workload, and returns the function that releases them
// and the attempts it made (1 for lk.lock). For a workload on several
// masters whose locker is a fencer, it takes the lock with
// lk.lockFenced and returns the function that reads the hold's token
// too; token is nil otherwise.
func (w workload) take(ctx context.Context, lk locker, names []string, picked []int, weight int) (unlock func(context.Context) error, token func() (int64, error), attempts int64, err error) {
	if w.permits > 0 {
		unlock, attempts, err = lk.acquire(ctx, names[picked[0]], w.permits, weight)
		return unlock, nil, attempts, err
	}
	if f, ok := lk.(fencer); ok && w.masters > 0 {
		unlock, token, err = f.lockFenced(ctx, names[picked[0]])
		return unlock, token, 1, err
	}
	if w.multi[1] == 0 {
		unlock, err = lk.lock(ctx, names[picked[0]])
		return unlock, nil, 1, err
	}
	set := make([]string, len(picked))
	for j, i := range picked {
		set[j] = names[i]
	}
	unlock, attempts, err = lk.lockAll(ctx, set)
	return unlock, nil, attempts, err
}

// drive runs goroutines goroutines of w, spread round-robin over lockers,
// on locks named prefix:0, prefix:1, ..., until ctx ends; ctx must have a
// deadline. Each loops: lock (one name, or several at once in a multi
// workload, or its weight of a semaphore's permits), enter the critical
// section of each, read the hold's fencing token when it has one, hold,
// leave, unlock. Lock takes ctx, or
// context.Background() when w.background is set, and then so does Unlock.
// A grant counts when it came before the deadline; a Lock that the
// deadline ended counts as nothing. drive returns once every goroutine
// has unlocked and stopped.
func drive(ctx context.Context, w workload, lockers []locker, prefix string, goroutines int) *tally {
	deadline, ok := ctx.Deadline()
	if !ok {
		panic("drive needs a context with a deadline")
	}
	names := make([]string, w.names)
	for i := range names {
		names[i] = fmt.Sprintf("%s:%d", prefix, i)
	}
	// inside[i] counts the permits held in lock i's critical section, a
	// holder of a lock holding one: w.capacity() at most, or a library
	// broke mutual exclusion (or gave out more permits than there are).
	inside := make([]atomic.Int32, w.names)
	capacity := int32(w.capacity())
	// last[i] is the token of lock i's latest hold that read one: a
	// token no greater than the one before it, of an earlier grant, is a
	// fencing fault. Only a workload of one name per grant reads tokens.
	last := make([]atomic.Int64, w.names)
	for i := range last {
		last[i].Store(math.MinInt64)
	}
	t := newTally(goroutines)
	lockCtx := ctx
	if w.background {
		lockCtx = context.Background()
	}
	var wg sync.WaitGroup
	for g := range goroutines {
		lk := lockers[g%len(lockers)]
		rng := rand.New(rand.NewPCG(uint64(g), uint64(deadline.UnixNano())))
		picked := make([]int, 0, max(1, w.multi[1])) // the indexes of the locks of a grant
		weight := w.weight(g, goroutines)
		wg.Go(func() {
			for ctx.Err() == nil {
				picked = w.pick(rng, picked[:0])
				start := time.Now()
				unlock, token, attempts, err := w.take(lockCtx, lk, names, picked, weight)
				granted := time.Now()
				if err != nil {
					if ctx.Err() == nil {
						t.fail(err)
					}
					continue
				}
				over := false
				for _, i := range picked {
					over = inside[i].Add(int32(weight)) > capacity || over
				}
				if over {
					t.violations.Add(1)
				}
				if token != nil {
					t.checkToken(ctx, token, &last[picked[0]])
				}
				if w.hold > 0 {
					time.Sleep(w.hold)
				}
				for _, i := range picked {
					inside[i].Add(-int32(weight))
				}
				if granted.Before(deadline) {
					t.grant(g, granted.Sub(start), attempts)
				}
				if err := unlockWithin(unlock, w.background); err != nil {
					t.fail(fmt.Errorf("unlock: %w", err))
				}
			}
		})
	}
	wg.Wait()
	return t
}
