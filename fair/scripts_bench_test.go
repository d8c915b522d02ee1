package fair

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/fairlock/fairlock/lua"
	"github.com/fairlock/fairlock/queue"
)

// BenchmarkScriptCost runs each script on the paths a Lock, an Unlock and
// a renewal take, against a redis-server of its own, and reports the
// server's time per call of each (from SLOWLOG with a threshold of 0, which
// logs every command with its duration; the FCALL or EVALSHA of each
// call), in µs: the figure to watch when
// a script changes. Run it with
//
//	go test -run '^$' -bench ScriptCost -benchtime 20000x ./fair
//
// Each path's calls are named by script and, for acquire, mode; the
// paths:
//   - uncontended: a fresh grant (acquire try) and its release, the last
//     level with nobody waiting;
//   - reentry: a re-entry (acquire reenter) and its release, a level of
//     many;
//   - handover: a waiter queues (acquire wait) behind a holder, whose
//     release hands it the lock and publishes, and the waiter's release;
//   - renew: a renewal;
//   - contended: the steady state of a contended Mutex, one grant per
//     round: a waiter joins (acquire wait) behind a holder and a waiter,
//     and the holder's release hands the lock to that waiter;
//   - wcontended: the same for a Semaphore of 3 permits, of which one is
//     held throughout: a waiter of weight 2 joins (wacquire wait) behind
//     another, and a holder of 2 releases (wrelease), which grants the
//     head and stops at the joiner;
//   - wrenew: a renewal of a Semaphore's hold (wrenew).
//
// The waiters of contended and wcontended wait in another Client (their
// entries carry another tag), so that each hand-over publishes.
func BenchmarkScriptCost(b *testing.B) {
	srv, err := redistest.Start("--slowlog-max-len", "1000000")
	require.NoError(b, err)
	b.Cleanup(srv.Stop)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	b.Cleanup(func() { _ = rdb.Close() })
	ctx := context.Background()
	e := mustEngine(b, rdb, Config{WaiterTTL: time.Minute, CallTimeout: 5 * time.Second,
		Heartbeat: time.Second, Logger: slog.New(slog.DiscardHandler)})
	keys, err := queue.For("bench", "lock")
	require.NoError(b, err)
	l := e.Mutex(keys)
	wkeys, err := queue.Weighted("bench", "sem", queue.KindSemaphore)
	require.NoError(b, err)
	two := lua.Level{Weight: 2}
	w := e.Weighted(wkeys, NewWeights(3), two)
	one := e.Weighted(wkeys, NewWeights(3), lua.Level{Weight: 1})
	const lease = time.Minute
	entry := func(owner string) string { return queue.Entry(queue.NewID(), lease, owner) }
	// Another Client's waiter: the hand-over to it is published.
	other := func(owner string) string {
		return queue.Entry(queue.NewID()+"0123abcd"+queue.WakeVersion, lease, owner)
	}
	wother := func(owner string) string {
		return queue.WeightedEntry(queue.NewID()+"0123abcd"+queue.WakeVersion, lease, 2, false, owner)
	}
	// The owners of the contended paths: holder holds, waiter heads the
	// line; each round's joiner is a fresh owner.
	var holder, waiter string
	round := 0
	fresh := func() string { round++; return "o" + strconv.Itoa(round) }
	must := func(err error) {
		if err != nil {
			b.Fatal(err)
		}
	}
	paths := []struct {
		name string
		run  func()
	}{
		{"uncontended", func() {
			_, err := l.acquire(ctx, "h", entry("h"), lease, queue.ModeTry)
			must(err)
			_, err = l.release(ctx, "h", lease)
			must(err)
		}},
		{"reentry", func() {
			_, err := l.acquire(ctx, "h", entry("h"), lease, queue.ModeReenter)
			must(err)
			_, err = l.release(ctx, "h", lease)
			must(err)
		}},
		{"handover", func() {
			_, err := l.acquire(ctx, "w", entry("w"), lease, queue.ModeWait)
			must(err)
			_, err = l.release(ctx, "h", lease)
			must(err)
			_, err = l.release(ctx, "w", lease)
			must(err)
			_, err = l.acquire(ctx, "h", entry("h"), lease, queue.ModeTry)
			must(err)
		}},
		{"renew", func() {
			_, err := lua.ReadFlag(lua.Renew(keys, "h", ms(lease)).Run(ctx, rdb))
			must(err)
		}},
		{"contended", func() {
			joiner := fresh()
			_, err := l.acquire(ctx, joiner, other(joiner), lease, queue.ModeWait)
			must(err)
			n, err := l.release(ctx, holder, lease)
			must(err)
			if n != 0 {
				b.Fatalf("release answered %d", n)
			}
			holder, waiter = waiter, joiner
		}},
		{"wcontended", func() {
			joiner := fresh()
			_, err := w.acquire(ctx, joiner, wother(joiner), lease, queue.ModeWait)
			must(err)
			n, err := w.release(ctx, holder, lease)
			must(err)
			if n != 0 {
				b.Fatalf("wrelease answered %d", n)
			}
			holder, waiter = waiter, joiner
		}},
		{"wrenew", func() {
			s, err := e.scripts(ctx)
			must(err)
			_, err = lua.ReadFlag(e.run(ctx, s.WRenew(wkeys, "h", ms(lease))))
			must(err)
		}},
	}
	// setup puts a path's lock in the state its rounds start from.
	setup := func(name string) {
		switch name {
		case "uncontended":
		case "contended":
			holder, waiter = fresh(), fresh()
			_, err := l.acquire(ctx, holder, entry(holder), lease, queue.ModeTry)
			must(err)
			_, err = l.acquire(ctx, waiter, other(waiter), lease, queue.ModeWait)
			must(err)
		case "wcontended", "wrenew":
			_, err := one.acquire(ctx, "h", queue.WeightedEntry(queue.NewID(), lease, 1, false, "h"), lease, queue.ModeTry)
			must(err)
			holder, waiter = fresh(), fresh()
			_, err = w.acquire(ctx, holder, queue.WeightedEntry(queue.NewID(), lease, 2, false, holder), lease, queue.ModeTry)
			must(err)
			_, err = w.acquire(ctx, waiter, wother(waiter), lease, queue.ModeWait)
			must(err)
		default:
			_, err := l.acquire(ctx, "h", entry("h"), lease, queue.ModeTry)
			must(err)
		}
	}
	for _, p := range paths {
		b.Run(p.name, func(b *testing.B) {
			must(rdb.FlushAll(ctx).Err())
			setup(p.name)
			p.run() // loads the scripts
			must(rdb.ConfigSet(ctx, "slowlog-log-slower-than", "0").Err())
			must(rdb.SlowLogReset(ctx).Err())
			for b.Loop() {
				p.run()
			}
			must(rdb.ConfigSet(ctx, "slowlog-log-slower-than", "10000").Err())
			for name, us := range scriptTimes(b, rdb) {
				b.ReportMetric(us, "µs/"+name)
			}
		})
	}
}

// scriptTimes reads the slow log and returns the mean duration in µs of
// each script's calls, by name (and mode, for acquire).
func scriptTimes(b *testing.B, rdb *redis.Client) map[string]float64 {
	ctx := context.Background()
	names := map[string]string{}
	var k queue.Keys
	var v lua.Level
	for name, call := range map[string]lua.Call{
		"acquire":  lua.Classic.Acquire(k, "", "", "", 0, 0, "", 0),
		"release":  lua.Classic.Release(k, "", "", "", 0, 0),
		"renew":    lua.Renew(k, "", 0),
		"cancel":   lua.Classic.Cancel(k, "", ""),
		"wacquire": lua.Classic.WAcquire(k, "", "", "", 0, 0, "", 0, v, 0),
		"wrelease": lua.Classic.WRelease(k, "", "", "", 0, 0, v),
		"wrenew":   lua.Classic.WRenew(k, "", 0),
		"wcancel":  lua.Classic.WCancel(k, "", ""),
	} {
		names[call.Script.Hash()] = name
		if call.Function != "" {
			names[call.Function] = name
		}
	}
	logs, err := rdb.Do(ctx, "SLOWLOG", "GET", -1).Slice()
	require.NoError(b, err)
	sum, n := map[string]float64{}, map[string]float64{}
	for _, entry := range logs {
		fields, ok := entry.([]any)
		if !ok || len(fields) < 4 {
			continue
		}
		us, _ := fields[2].(int64)
		args, _ := fields[3].([]any)
		if len(args) < 2 || !(strings.EqualFold(toString(args[0]), "evalsha") || strings.EqualFold(toString(args[0]), "fcall")) {
			continue
		}
		name, ok := names[toString(args[1])]
		if !ok {
			continue
		}
		// After the sha or function, numkeys, the keys (5 of acquire, 6 of
		// wacquire) and 4 args: the mode.
		switch {
		case name == "acquire" && len(args) > 3+5+4:
			name += ":" + toString(args[3+5+4])
		case name == "wacquire" && len(args) > 3+6+4:
			name += ":" + toString(args[3+6+4])
		}
		sum[name] += float64(us)
		n[name]++
	}
	out := map[string]float64{}
	for k := range sum {
		out[k] = sum[k] / n[k]
	}
	return out
}

func toString(v any) string {
	s, _ := v.(string)
	return s
}
