package main

import (
	"context"
	"fmt"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/fairlock/fairlock/queue"
)

// target is the Redis deployment of a run: a server given by URL, a
// cluster, or an embedded miniredis listening on loopback.
type target struct {
	url     string               // a single server; "" with cluster
	cluster []string             // cluster seed addresses
	mini    *miniredis.Miniredis // the embedded server, nil otherwise
	stop    chan struct{}        // closed by close: stops the embedded clock
	ticking sync.WaitGroup       // the embedded clock's goroutine
}

// tick is how often the embedded server's TTLs are moved forward.
const tick = 10 * time.Millisecond

// openTarget returns the deployment c names, starting the embedded one when
// c names none. Its TTLs follow the wall clock, as a real server's do, to
// within a tick: a goroutine moves them forward every tick. (Moving them at
// every command instead, miniredis's ClockTTL, costs a scan of every key
// with a TTL per command, and call receipts make those many.)
func openTarget(c config) (*target, error) {
	if c.RedisURL != "" || len(c.Cluster) > 0 {
		return &target{url: c.RedisURL, cluster: c.Cluster}, nil
	}
	m := miniredis.NewMiniRedis()
	if err := m.Start(); err != nil {
		return nil, fmt.Errorf("starting the embedded Redis: %w", err)
	}
	t := &target{url: "redis://" + m.Addr() + "/0", mini: m, stop: make(chan struct{})}
	t.ticking.Go(func() {
		last := time.Now()
		ticker := time.NewTicker(tick)
		defer ticker.Stop()
		for {
			select {
			case <-t.stop:
				return
			case now := <-ticker.C:
				m.FastForward(now.Sub(last))
				last = now
			}
		}
	})
	return t, nil
}

// close stops the embedded server, if any.
func (t *target) close() {
	if t.mini != nil {
		close(t.stop)
		t.ticking.Wait()
		t.mini.Close()
	}
}

// client returns a new go-redis client of the deployment, with its own
// connection pool. The URL was validated with the flags.
func (t *target) client() redis.UniversalClient {
	if len(t.cluster) > 0 {
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: t.cluster})
	}
	opt, err := redis.ParseURL(t.url)
	if err != nil {
		opt = &redis.Options{Addr: t.url} // not reached: checked by validate
	}
	return redis.NewClient(opt)
}

// String names the deployment for reports, without credentials.
func (t *target) String() string {
	switch {
	case t.mini != nil:
		return "embedded Redis (miniredis " + t.mini.Addr() + ")"
	case len(t.cluster) > 0:
		return "cluster " + strings.Join(t.cluster, ",")
	}
	if u, err := url.Parse(t.url); err == nil {
		return u.Redacted()
	}
	return "redis"
}

// forEachNode runs fn on every server that holds keys: each master of a
// cluster, or the one server.
func forEachNode(ctx context.Context, rdb redis.UniversalClient, fn func(context.Context, *redis.Client) error) error {
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, fn)
	case *redis.Client:
		return fn(ctx, c)
	}
	return fmt.Errorf("unsupported redis client %T", rdb)
}

// cleanup deletes every key under prefix (locks, queues, deadlines, tokens,
// call receipts) and returns how many it deleted.
func cleanup(ctx context.Context, rdb redis.UniversalClient, prefix string) (int, error) {
	var (
		mu sync.Mutex
		n  int
	)
	err := forEachNode(ctx, rdb, func(ctx context.Context, c *redis.Client) error {
		var keys []string
		it := c.Scan(ctx, 0, prefix+":*", 1000).Iterator()
		for it.Next(ctx) {
			keys = append(keys, it.Val())
		}
		if err := it.Err(); err != nil {
			return err
		}
		// One DEL per key: on a cluster node the keys span many slots.
		for len(keys) > 0 {
			batch := keys[:min(len(keys), 1000)]
			keys = keys[len(batch):]
			p := c.Pipeline()
			for _, k := range batch {
				p.Del(ctx, k)
			}
			if _, err := p.Exec(ctx); err != nil {
				return err
			}
			mu.Lock()
			n += len(batch)
			mu.Unlock()
		}
		return nil
	})
	return n, err
}

// cmdStats counts the commands a deployment has run, from INFO.
type cmdStats struct {
	Detailed bool             // from INFO commandstats: every command, those run by scripts included
	Total    int64            // all commands (Detailed), or total_commands_processed
	Calls    map[string]int64 // per command, when Detailed
}

// readCmdStats reads INFO commandstats, or, where the server lacks it (the
// embedded one does), total_commands_processed from INFO stats.
func readCmdStats(ctx context.Context, rdb redis.UniversalClient) (cmdStats, error) {
	var mu sync.Mutex
	s := cmdStats{Detailed: true, Calls: map[string]int64{}}
	err := forEachNode(ctx, rdb, func(ctx context.Context, c *redis.Client) error {
		info, err := c.Info(ctx, "commandstats").Result()
		detailed := err == nil && strings.Contains(info, "cmdstat_")
		if !detailed {
			if info, err = c.Info(ctx, "stats").Result(); err != nil {
				return err
			}
		}
		mu.Lock()
		defer mu.Unlock()
		s.Detailed = s.Detailed && detailed
		for l := range strings.Lines(info) {
			k, v, ok := strings.Cut(strings.TrimSpace(l), ":")
			switch {
			case !ok:
			case detailed && strings.HasPrefix(k, "cmdstat_"):
				calls := infoField(v, "calls")
				s.Calls[strings.TrimPrefix(k, "cmdstat_")] += calls
				s.Total += calls
			case !detailed && k == "total_commands_processed":
				n, _ := strconv.ParseInt(v, 10, 64)
				s.Total += n
			}
		}
		return nil
	})
	return s, err
}

// infoField returns the integer field name of "a=1,b=2".
func infoField(v, name string) int64 {
	for f := range strings.SplitSeq(v, ",") {
		if k, n, ok := strings.Cut(f, "="); ok && k == name {
			i, _ := strconv.ParseInt(n, 10, 64)
			return i
		}
	}
	return 0
}

// since returns the commands run between before and s.
func (s cmdStats) since(before cmdStats) cmdStats {
	d := cmdStats{Detailed: s.Detailed && before.Detailed, Total: s.Total - before.Total, Calls: map[string]int64{}}
	for k, v := range s.Calls {
		if n := v - before.Calls[k]; n > 0 {
			d.Calls[k] = n
		}
	}
	return d
}

// top returns the n commands run most, most first.
func (s cmdStats) top(n int) []string {
	names := make([]string, 0, len(s.Calls))
	for k := range s.Calls {
		names = append(names, k)
	}
	sort.Slice(names, func(i, j int) bool {
		if s.Calls[names[i]] != s.Calls[names[j]] {
			return s.Calls[names[i]] > s.Calls[names[j]]
		}
		return names[i] < names[j]
	})
	return names[:min(n, len(names))]
}

// inspect returns the snapshot of one lock.
func inspect(ctx context.Context, rdb redis.UniversalClient, prefix, name string) (queue.Snapshot, error) {
	k, err := queue.For(prefix, name)
	if err != nil {
		return queue.Snapshot{}, err
	}
	return queue.Inspect(ctx, rdb, k)
}
