package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// server is the Redis server every library runs on.
type server struct {
	opts    *redis.Options // how the benchmark's clients reach it
	admin   *redis.Client  // INFO and CONFIG RESETSTAT, outside the counted hooks
	started *redistest.Server
	desc    string // address and version, for the report
	version string // redis_version
}

// openServer connects to the server at url, or when url is empty starts a
// redis-server without persistence on a free loopback port.
func openServer(ctx context.Context, url string) (*server, error) {
	s := &server{}
	if url == "" {
		rs, err := redistest.Start()
		if err != nil {
			return nil, err
		}
		s.started = rs
		s.opts = &redis.Options{Addr: rs.Addr}
	} else {
		opts, err := redis.ParseURL(url)
		if err != nil {
			return nil, err
		}
		s.opts = opts
	}
	s.admin = redis.NewClient(s.opts)
	info, err := s.info(ctx, "server")
	if err != nil {
		s.close()
		return nil, fmt.Errorf("redis at %s: %w", s.opts.Addr, err)
	}
	s.version = info["redis_version"]
	s.desc = fmt.Sprintf("Redis %s at %s", s.version, s.opts.Addr)
	if s.started != nil {
		s.desc += " (started for this run)"
	}
	return s, nil
}

func (s *server) close() {
	_ = s.admin.Close()
	if s.started != nil {
		s.started.Stop()
	}
}

// servers are the servers one workload runs on: the one server, or
// several independent masters. Their statistics are the sums of every
// server's.
type servers []*server

// options returns how the benchmark's clients reach each server.
func (ss servers) options() []*redis.Options {
	opts := make([]*redis.Options, len(ss))
	for i, s := range ss {
		opts[i] = s.opts
	}
	return opts
}

// resetStats zeroes the command statistics of every server.
func (ss servers) resetStats(ctx context.Context) error {
	for _, s := range ss {
		if err := s.resetStats(ctx); err != nil {
			return fmt.Errorf("%s: %w", s.opts.Addr, err)
		}
	}
	return nil
}

// stats returns the sum of every server's counters.
func (ss servers) stats(ctx context.Context) (serverStats, error) {
	var sum serverStats
	for _, s := range ss {
		st, err := s.stats(ctx)
		if err != nil {
			return serverStats{}, fmt.Errorf("%s: %w", s.opts.Addr, err)
		}
		sum.cpu += st.cpu
		sum.scriptCalls += st.scriptCalls
		sum.scriptUsec += st.scriptUsec
		sum.commands += st.commands
	}
	return sum, nil
}

// A statsReader resets and reads the counters of one server, or the sums
// of several's.
type statsReader interface {
	resetStats(ctx context.Context) error
	stats(ctx context.Context) (serverStats, error)
}

var (
	_ statsReader = (*server)(nil)
	_ statsReader = servers(nil)
)

// serverStats is a reading of the server's counters.
type serverStats struct {
	cpu         time.Duration // used_cpu_user + used_cpu_sys since start
	scriptCalls int64         // script calls (FCALL, EVALSHA, EVAL) since the last CONFIG RESETSTAT
	scriptUsec  int64         // time spent in them, in µs
	commands    int64         // commands since the last CONFIG RESETSTAT, see commandCalls
}

// resetStats zeroes the server's command statistics.
func (s *server) resetStats(ctx context.Context) error {
	return s.admin.ConfigResetStat(ctx).Err()
}

// stats reads the server's CPU time and script statistics.
func (s *server) stats(ctx context.Context) (serverStats, error) {
	info, err := s.info(ctx, "cpu", "commandstats")
	if err != nil {
		return serverStats{}, err
	}
	var st serverStats
	for _, field := range []string{"used_cpu_user", "used_cpu_sys"} {
		sec, err := strconv.ParseFloat(info[field], 64)
		if err != nil {
			return serverStats{}, fmt.Errorf("INFO %s: %w", field, err)
		}
		st.cpu += time.Duration(sec * float64(time.Second))
	}
	for _, c := range scriptCommands {
		st.scriptCalls += cmdstat(info["cmdstat_"+c], "calls")
		st.scriptUsec += cmdstat(info["cmdstat_"+c], "usec")
	}
	st.commands = commandCalls(info)
	return st, nil
}

// scriptCommands are the commands that run a script: fairlock calls its
// library's functions (FCALL) where the server has them, the peers send
// scripts.
var scriptCommands = []string{"fcall", "evalsha", "eval"}

// cmdstat returns the field of one command's commandstats line, as in
// cmdstat_evalsha:calls=12,usec=345,usec_per_call=28.75,...; 0 when it is
// missing.
func cmdstat(line, field string) int64 {
	for _, kv := range strings.Split(line, ",") {
		if k, v, _ := strings.Cut(kv, "="); k == field {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}

// ownCommands are the commands the benchmark itself sends to read and
// reset the counters, which commandCalls leaves out.
var ownCommands = []string{"info", "config"}

// commandCalls sums the calls of every command in INFO commandstats but
// ownCommands. Redis counts there the commands a script runs as well as
// the EVALSHA or EVAL that ran it, and a subcommand (config|resetstat,
// client|setinfo) on a line of its own.
func commandCalls(info map[string]string) int64 {
	var n int64
	for k, v := range info {
		name, ok := strings.CutPrefix(k, "cmdstat_")
		if !ok {
			continue
		}
		name, _, _ = strings.Cut(name, "|")
		if !slices.Contains(ownCommands, name) {
			n += cmdstat(v, "calls")
		}
	}
	return n
}

// info returns the fields of the given INFO sections.
func (s *server) info(ctx context.Context, sections ...string) (map[string]string, error) {
	text, err := s.admin.Info(ctx, sections...).Result()
	if err != nil {
		return nil, err
	}
	return parseInfo(text), nil
}

// parseInfo splits INFO's "field:value" lines, skipping section headers.
func parseInfo(text string) map[string]string {
	fields := map[string]string{}
	for line := range strings.Lines(text) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if k, v, ok := strings.Cut(line, ":"); ok {
			fields[k] = v
		}
	}
	return fields
}

// usedMemory returns INFO's used_memory, the bytes Redis has allocated.
func (s *server) usedMemory(ctx context.Context) (int64, error) {
	info, err := s.info(ctx, "memory")
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(info["used_memory"], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("INFO used_memory: %w", err)
	}
	return n, nil
}

// keysMemory returns the bytes the keys take in Redis, by MEMORY USAGE
// with SAMPLES 0 (every element counted); a key that does not exist
// takes none.
func (s *server) keysMemory(ctx context.Context, keys ...string) (int64, error) {
	var total int64
	for _, k := range keys {
		n, err := s.admin.MemoryUsage(ctx, k, 0).Result()
		switch {
		case errors.Is(err, redis.Nil):
		case err != nil:
			return 0, fmt.Errorf("MEMORY USAGE %s: %w", k, err)
		default:
			total += n
		}
	}
	return total, nil
}
