package fair

import (
	"context"
	"log/slog"
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
// logs every command with its duration), in µs: the figure to watch when
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
//   - renew: a renewal.
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
	const lease = time.Minute
	entry := func(owner string) string { return queue.Entry(queue.NewID(), lease, owner) }
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
	}
	for _, p := range paths {
		b.Run(p.name, func(b *testing.B) {
			must(rdb.FlushAll(ctx).Err())
			if p.name != "uncontended" {
				_, err := l.acquire(ctx, "h", entry("h"), lease, queue.ModeTry)
				must(err)
			}
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
	for name, call := range map[string]lua.Call{
		"acquire": lua.Classic.Acquire(k, "", "", "", 0, 0, "", 0),
		"release": lua.Classic.Release(k, "", "", "", 0, 0),
		"renew":   lua.Renew(k, "", 0),
		"cancel":  lua.Classic.Cancel(k, "", ""),
	} {
		names[call.Script.Hash()] = name
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
		if len(args) < 2 || !strings.EqualFold(toString(args[0]), "evalsha") {
			continue
		}
		name, ok := names[toString(args[1])]
		if !ok {
			continue
		}
		if name == "acquire" && len(args) > 12 {
			name += ":" + toString(args[3+5+4]) // after the sha, numkeys, 5 keys and 4 args: the mode
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
