package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// The fixed settings of the names step.
const (
	namesGoroutines = 32                     // goroutines locking and unlocking the names
	namesMasters    = 3                      // masters of the Cluster it runs on
	namesQuiet      = 3 * time.Second        // how long no audit read must be seen before the idle heap is read
	namesIdleBound  = 3 * time.Minute        // bounds that wait
	namesSample     = 50 * time.Millisecond  // how often the heap's peak is sampled
	namesBound      = 20 * time.Minute       // bounds the Lock calls of one run
	namesSettle     = 100 * time.Millisecond // how often the audit's reads are polled while waiting for quiet
)

// auditCommands are the commands only the failover audit sends on the
// Lock and Unlock path: it reads a Mutex's hold with HMGET, a weighted
// holder's record with HGET, and whether an entry is in line with ZSCORE.
var auditCommands = []string{"hmget", "hget", "zscore"}

// namesResult is one Client locking and unlocking many distinct names,
// each once, on one deployment.
type namesResult struct {
	Deployment  string  `json:"deployment"` // "one server", or "cluster of 3 masters"
	Names       int     `json:"names"`
	Goroutines  int     `json:"goroutines"`
	Seconds     float64 `json:"seconds"`
	NamesPerSec float64 `json:"names_per_sec"`
	// The time each Unlock call took, in ms.
	UnlockP50ms  float64 `json:"unlock_p50_ms"`
	UnlockP99ms  float64 `json:"unlock_p99_ms"`
	UnlockP999ms float64 `json:"unlock_p999_ms"`
	UnlockMaxms  float64 `json:"unlock_max_ms"`
	// Go heap (MemStats.HeapAlloc) read after runtime.GC: before the
	// first name, right after the last Unlock, once the Client is idle
	// (no audit read for namesQuiet), and after Close.
	HeapBaseline int64 `json:"go_heap_baseline_bytes"`
	HeapAfter    int64 `json:"go_heap_after_bytes"`
	HeapIdle     int64 `json:"go_heap_idle_bytes"`
	HeapClosed   int64 `json:"go_heap_closed_bytes"`
	// HeapPeak is the largest heap in use (live and not yet collected
	// objects) sampled every namesSample while the names ran.
	HeapPeak int64 `json:"go_heap_peak_bytes"`
	// The audit's reads (auditCommands, alone or in pipelines) and the
	// round trips that carried them, while the names ran and after the
	// last Unlock; AuditSecondsAfter is the time from the last Unlock to
	// the last of them.
	AuditReads           int64   `json:"audit_reads"`
	AuditRoundTrips      int64   `json:"audit_round_trips"`
	AuditReadsAfter      int64   `json:"audit_reads_after"`
	AuditRoundTripsAfter int64   `json:"audit_round_trips_after"`
	AuditSecondsAfter    float64 `json:"audit_seconds_after"`
	AuditMaxReadsPerTrip int64   `json:"audit_max_reads_per_round_trip"`
	AuditMaxTripsPerSec  int64   `json:"audit_max_round_trips_per_sec"`
	AuditQuietTimedOut   bool    `json:"audit_quiet_timed_out,omitempty"`
	Errors               int64   `json:"errors"`
	FirstError           string  `json:"first_error,omitempty"`
}

// measureNamesEverywhere runs the names step on the scale part's server,
// then on a Cluster of namesMasters masters started for it.
func measureNamesEverywhere(ctx context.Context, srv *server, sc scaleConfig, log io.Writer) ([]namesResult, error) {
	n := sc.names
	fmt.Fprintf(log, "peers: scale, %d names through one Client on one server\n", n)
	one, err := measureNames(ctx, "one server", redis.NewClient(srv.opts), n, profiler(sc.profile, "one"))
	if err != nil {
		return nil, fmt.Errorf("one server: %w", err)
	}
	fmt.Fprintf(log, "peers: scale, starting a Cluster of %d masters\n", namesMasters)
	cl, err := redistest.StartCluster(namesMasters, 0)
	if err != nil {
		return nil, err
	}
	defer cl.Stop()
	fmt.Fprintf(log, "peers: scale, %d names through one Client on the Cluster\n", n)
	desc := fmt.Sprintf("cluster of %d masters", namesMasters)
	on, err := measureNames(ctx, desc, redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()}), n, profiler(sc.profile, "cluster"))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", desc, err)
	}
	return []namesResult{one, on}, nil
}

// measureNames has namesGoroutines goroutines of one fresh Client over
// rdb lock and unlock the names scale:names:0 to scale:names:n-1, each
// once, and measures the Unlock calls, the Go heap and the audit's reads
// (see namesResult). It closes the Client and rdb before it returns.
func measureNames(ctx context.Context, deployment string, rdb redis.UniversalClient, n int, profile func(when string) error) (res namesResult, err error) {
	hook := &auditHook{}
	if cl, ok := rdb.(*redis.ClusterClient); ok {
		cl.OnNewNode(func(node *redis.Client) { node.AddHook(hook) }) // a round trip per master
	} else {
		rdb.AddHook(hook)
	}
	defer func() { err = errors.Join(err, rdb.Close()) }()
	c, err := fairlock.New(rdb)
	if err != nil {
		return namesResult{}, err
	}
	closed := false
	defer func() {
		if !closed {
			err = errors.Join(err, c.Close())
		}
	}()
	ctx, cancel := context.WithTimeout(ctx, namesBound)
	defer cancel()
	// The warm-up opens the connections that namesGoroutines calls at
	// once need and loads the scripts. The audit still remembers its
	// calls at the baseline (a few KB), not when idle.
	var wg sync.WaitGroup
	var warmErr atomic.Pointer[error]
	for g := range namesGoroutines {
		wg.Go(func() {
			m := c.Mutex(fmt.Sprintf("scale:names:warm:%d", g))
			h, err := m.Lock(ctx)
			if err == nil {
				err = m.Unlock(h)
			}
			if err != nil {
				warmErr.Store(&err)
			}
		})
	}
	wg.Wait()
	if err := warmErr.Load(); err != nil {
		return namesResult{}, fmt.Errorf("warm-up: %w", *err)
	}

	res = namesResult{Deployment: deployment, Names: n, Goroutines: namesGoroutines}
	unlocks := make([]time.Duration, n) // before the baseline: its size is no growth
	res.HeapBaseline = heapAfterGC()
	peak := startHeapPeak()
	before := hook.read()
	t := newTally(0) // only the failures
	var next atomic.Int64
	start := time.Now()
	for range namesGoroutines {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(n) || ctx.Err() != nil {
					return
				}
				m := c.Mutex(fmt.Sprintf("scale:names:%d", i))
				held, err := m.Lock(ctx)
				if err != nil {
					t.fail(err)
					continue
				}
				began := time.Now()
				if err := m.Unlock(held); err != nil {
					t.fail(fmt.Errorf("unlock: %w", err))
				}
				unlocks[i] = time.Since(began)
			}
		})
	}
	wg.Wait()
	last := time.Now()
	res.HeapPeak = peak()
	during := hook.read().minus(before)
	res.Seconds = last.Sub(start).Seconds()
	res.NamesPerSec = float64(n) / res.Seconds
	res.HeapAfter = heapAfterGC()
	if err := profile("after"); err != nil {
		return namesResult{}, err
	}
	res.Errors = t.errors.Load()
	if err := t.firstError(); err != nil {
		res.FirstError = err.Error()
	}

	slices.Sort(unlocks)
	res.UnlockP50ms, res.UnlockP99ms = ms(percentile(unlocks, 50)), ms(percentile(unlocks, 99))
	res.UnlockP999ms, res.UnlockMaxms = ms(percentile(unlocks, 99.9)), ms(percentile(unlocks, 100))
	res.AuditReads, res.AuditRoundTrips = during.reads, during.roundTrips

	qerr := waitAuditQuiet(ctx, hook, namesQuiet, namesIdleBound)
	res.AuditQuietTimedOut = errors.Is(qerr, errNotQuiet)
	if qerr != nil && !res.AuditQuietTimedOut {
		return namesResult{}, qerr
	}
	after := hook.read().minus(before).minus(during)
	res.AuditReadsAfter, res.AuditRoundTripsAfter = after.reads, after.roundTrips
	if at := hook.lastRead.Load(); at > last.UnixNano() {
		res.AuditSecondsAfter = time.Duration(at - last.UnixNano()).Seconds()
	}
	res.AuditMaxReadsPerTrip = hook.maxPerTrip.Load()
	res.AuditMaxTripsPerSec = hook.maxPerSec()
	res.HeapIdle = heapAfterGC()
	if err := profile("idle"); err != nil {
		return namesResult{}, err
	}
	closed = true
	if err := c.Close(); err != nil {
		return namesResult{}, err
	}
	res.HeapClosed = heapAfterGC()
	runtime.KeepAlive(unlocks)
	return res, nil
}

// profiler returns a function that writes a heap profile to
// dir/heap-<deployment>-<when>.pprof, or, when dir is "", does nothing.
// With a dir, it samples an allocation every 4 KiB from now on, not every
// 512 KiB.
func profiler(dir, deployment string) func(when string) error {
	if dir != "" {
		runtime.MemProfileRate = 4 << 10
	}
	return func(when string) error {
		if dir == "" {
			return nil
		}
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("heap-%s-%s.pprof", deployment, when)))
		if err != nil {
			return err
		}
		return errors.Join(pprof.Lookup("heap").WriteTo(f, 0), f.Close())
	}
}

// heapAfterGC collects garbage and returns MemStats.HeapAlloc.
func heapAfterGC() int64 {
	runtime.GC()
	var st runtime.MemStats
	runtime.ReadMemStats(&st)
	return int64(st.HeapAlloc)
}

// startHeapPeak samples the bytes of heap objects in use every
// namesSample until the returned function is called, which returns the
// largest sample.
func startHeapPeak() func() int64 {
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	var peak atomic.Int64
	read := func() {
		metrics.Read(sample)
		if v := int64(sample[0].Value.Uint64()); v > peak.Load() {
			peak.Store(v)
		}
	}
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(namesSample)
		defer t.Stop()
		for {
			read()
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	}()
	return func() int64 {
		close(stop)
		<-done
		read()
		return peak.Load()
	}
}

// errNotQuiet is waitAuditQuiet's error when the audit went on reading
// past its bound.
var errNotQuiet = errors.New("the audit kept reading")

// waitAuditQuiet returns once hook has seen no audit read for quiet, or
// errNotQuiet after bound.
func waitAuditQuiet(ctx context.Context, hook *auditHook, quiet, bound time.Duration) error {
	t := time.NewTicker(namesSettle)
	defer t.Stop()
	start := time.Now()
	for {
		since := time.Since(start)
		if at := hook.lastRead.Load(); at > start.UnixNano() {
			since = time.Since(time.Unix(0, at))
		}
		switch {
		case since >= quiet:
			return nil
		case time.Since(start) > bound:
			return fmt.Errorf("%w for %v", errNotQuiet, bound)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// auditHook is a go-redis hook that counts the audit's reads
// (auditCommands) and the round trips that carry them, notes the time of
// the last, the most of them one round trip carried, and the round trips
// per wall-clock second.
type auditHook struct {
	reads      atomic.Int64
	roundTrips atomic.Int64
	lastRead   atomic.Int64 // unix ns of the last round trip with a read
	maxPerTrip atomic.Int64

	mu     sync.Mutex
	second int64 // guarded by mu: the unix second counted in inSecond
	in     int64 // guarded by mu: round trips in that second
	most   int64 // guarded by mu: the most in any second
}

var _ redis.Hook = (*auditHook)(nil)

func (h *auditHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *auditHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.count([]redis.Cmder{cmd})
		return next(ctx, cmd)
	}
}

func (h *auditHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.count(cmds)
		return next(ctx, cmds)
	}
}

func (h *auditHook) count(cmds []redis.Cmder) {
	var n int64
	for _, cmd := range cmds {
		if slices.Contains(auditCommands, cmd.Name()) {
			n++
		}
	}
	if n == 0 {
		return
	}
	now := time.Now()
	h.reads.Add(n)
	h.roundTrips.Add(1)
	h.lastRead.Store(now.UnixNano())
	for {
		m := h.maxPerTrip.Load()
		if n <= m || h.maxPerTrip.CompareAndSwap(m, n) {
			break
		}
	}
	h.mu.Lock()
	if s := now.Unix(); s != h.second {
		h.second, h.in = s, 0
	}
	h.in++
	h.most = max(h.most, h.in)
	h.mu.Unlock()
}

func (h *auditHook) maxPerSec() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.most
}

// auditCount is a reading of an auditHook.
type auditCount struct{ reads, roundTrips int64 }

func (h *auditHook) read() auditCount {
	return auditCount{reads: h.reads.Load(), roundTrips: h.roundTrips.Load()}
}

func (c auditCount) minus(o auditCount) auditCount {
	return auditCount{reads: c.reads - o.reads, roundTrips: c.roundTrips - o.roundTrips}
}
