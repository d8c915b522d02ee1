package lua_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

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
