package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/fairlock/fairlock/internal/deploy"
	"github.com/fairlock/fairlock/queue"
)

// target is the Redis deployment of a run: a server given by URL, a
// cluster, a primary watched by sentinels, or an embedded miniredis
// listening on loopback (then spec is its URL).
type target struct {
	spec    deploy.Spec          // the deployment, as the flags or the embedded server name it
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
	if len(c.Chosen()) > 0 {
		return remoteTarget(c), nil
	}
	m := miniredis.NewMiniRedis()
	if err := m.Start(); err != nil {
		return nil, fmt.Errorf("starting the embedded Redis: %w", err)
	}
	t := &target{spec: deploy.Spec{RedisURL: "redis://" + m.Addr() + "/0"}, mini: m, stop: make(chan struct{})}
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

// remoteTarget returns the deployment c names with -redis, -cluster or
// -sentinel.
func remoteTarget(c config) *target {
	return &target{spec: c.Spec}
}

// describe writes the deployment into a worker process's configuration.
func (t *target) describe(c *config) {
	c.Spec = t.spec
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
	return t.spec.Client(0)
}

// String names the deployment for reports, without credentials.
func (t *target) String() string {
	if t.mini != nil {
		return "embedded Redis (miniredis " + t.mini.Addr() + ")"
	}
	return t.spec.String()
}

// forEachNode runs fn on every server that holds keys: each master of a
// cluster, or the one server (for sentinels, the primary they name now).
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

// inspect returns the snapshot of one lock.
func inspect(ctx context.Context, rdb redis.UniversalClient, prefix, name string) (queue.Snapshot, error) {
	k, err := queue.For(prefix, name)
	if err != nil {
		return queue.Snapshot{}, err
	}
	return queue.Inspect(ctx, rdb, k)
}
