package lua_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/fairlock/fairlock/lua"
	"github.com/fairlock/fairlock/queue"
)

// BenchmarkScriptOverhead tells where the server's time goes in a script
// call: a script that does nothing, the same after lib.lua's definitions,
// and after each of the commands the scripts call most, each run with
// EVALSHA and the five keys of a lock, as the scripts are. It reports
// the server's µs per call from INFO commandstats (reset before each
// part), which counts the whole EVALSHA, commands inside included. Run
// it with: go test -run '^$' -bench ScriptOverhead -benchtime 20000x ./lua
func BenchmarkScriptOverhead(b *testing.B) {
	rdb := redistest.Shared(b).Client(b)
	ctx := context.Background()
	k, err := queue.For(redistest.Prefix(b), "overhead")
	if err != nil {
		b.Fatal(err)
	}
	keys := []string{k.Lock, k.Queue, k.Deadline, k.Token, k.Call("x")}
	lib := libOf(b)
	for _, part := range []struct{ name, body string }{
		{"bare", "return 1"},
		{"lib.lua", lib + "return 1"},
		{"lib.lua+HMGET", lib + "redis.call('HMGET', KEYS[1], 'owner', 'count', 'token', 'entry') return 1"},
		{"lib.lua+EXISTS", lib + "redis.call('EXISTS', KEYS[1], KEYS[2]) return 1"},
		{"lib.lua+TIME", lib + "redis.call('TIME') return 1"},
		{"lib.lua+GET", lib + "redis.call('GET', KEYS[5]) return 1"},
		{"lib.lua+SET", lib + "redis.call('SET', KEYS[4], '1795621788059000', 'PX', 30000) return 1"},
		{"lib.lua+HSET+PEXPIRE+DEL", lib + "redis.call('HSET', KEYS[1], 'owner', 'o', 'count', 1, 'token', '1795621788059000', 'entry', 'e') redis.call('PEXPIRE', KEYS[1], 30000) redis.call('DEL', KEYS[1]) return 1"},
	} {
		b.Run(part.name, func(b *testing.B) {
			s := redis.NewScript(part.body)
			if err := s.Run(ctx, rdb, keys).Err(); err != nil { // loads it
				b.Fatal(err)
			}
			if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				if err := s.EvalSha(ctx, rdb, keys).Err(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(evalshaMicros(b, rdb), "server-µs/call")
		})
	}
}

// libOf returns lib.lua as every script starts with it: the part of an
// operation's source before the operation's own file.
func libOf(b *testing.B) string {
	full := lua.Source("release")
	i := strings.Index(full, "-- release.lua:")
	if i < 0 {
		b.Fatal("release.lua's header not found")
	}
	return full[:i]
}

// evalshaMicros reads the server's mean µs per EVALSHA from INFO
// commandstats.
func evalshaMicros(b *testing.B, rdb *redis.Client) float64 {
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	var calls, usec int64
	var per float64
	if _, err := fmt.Sscanf(redistest.InfoField(info, "cmdstat_evalsha"), "calls=%d,usec=%d,usec_per_call=%f", &calls, &usec, &per); err != nil {
		b.Fatalf("INFO commandstats, evalsha: %v", err)
	}
	return per
}

// BenchmarkLibraryCost runs an uncontended grant and its release (acquire
// in try mode, then release: the calls of a Lock and an Unlock nobody
// waits behind) by EVALSHA of the scripts and by FCALL of the library's
// functions, and reports the server's mean µs per call of each from INFO
// commandstats: what defining the helpers at every call costs. Run it
// with: go test -run '^$' -bench LibraryCost -benchtime 30000x -count 5 ./lua
func BenchmarkLibraryCost(b *testing.B) {
	rdb := redistest.Shared(b).Client(b)
	ctx := context.Background()
	k, err := queue.For(redistest.Prefix(b), "library")
	if err != nil {
		b.Fatal(err)
	}
	if err := lua.Load(ctx, rdb, lua.Classic.Library); err != nil {
		b.Fatal(err)
	}
	entry := queue.Entry(queue.NewID()+queue.NewTag()+queue.WakeVersion, 30*time.Second, "o")
	for _, c := range []struct {
		name string
		via  lua.Via
		stat string
	}{{"EVALSHA", lua.BySHA, "cmdstat_evalsha"}, {"FCALL", lua.ByFunction, "cmdstat_fcall"}} {
		b.Run(c.name, func(b *testing.B) {
			r := lua.NewRunner()
			// Warm up: the script cached, the library loaded.
			for _, call := range []lua.Call{
				lua.Classic.Acquire(k, queue.NewID(), "o", entry, 30000, 30000, queue.ModeTry, 20000),
				lua.Classic.Release(k, queue.NewID(), "o", "", 30000, 20000),
			} {
				if err := r.Run(ctx, rdb, call).Err(); err != nil {
					b.Fatal(err)
				}
				if err := call.Run(ctx, rdb).Err(); err != nil && c.via == lua.BySHA {
					b.Fatal(err)
				}
			}
			if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				a := lua.Classic.Acquire(k, queue.NewID(), "o", entry, 30000, 30000, queue.ModeTry, 20000)
				if rep, err := lua.ReadAcquire(a.Send(ctx, rdb, c.via)); err != nil || !rep.Granted {
					b.Fatal(rep, err)
				}
				r := lua.Classic.Release(k, queue.NewID(), "o", "", 30000, 20000)
				if n, err := lua.ReadRelease(r.Send(ctx, rdb, c.via)); err != nil || n.Count != 0 {
					b.Fatal(n, err)
				}
			}
			info, err := rdb.Info(ctx, "commandstats").Result()
			if err != nil {
				b.Fatal(err)
			}
			var calls, usec int64
			if _, err := fmt.Sscanf(redistest.InfoField(info, c.stat), "calls=%d,usec=%d,", &calls, &usec); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(usec)/float64(calls), "server-µs/call")
		})
	}
}
