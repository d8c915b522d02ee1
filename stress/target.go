package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/fairlock/fairlock/internal/deploy"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/fairlock/fairlock/queue"
)

// target is the Redis deployment of a run: a server given by URL, a
// cluster, a primary watched by sentinels, an embedded miniredis
// listening on loopback (then spec is its URL), or a quorum of
// independent masters (then spec is empty).
type target struct {
	spec    deploy.Spec          // the deployment, as the flags or the embedded server name it
	masters []string             // a quorum's masters, in the order of -masters
	local   []*redistest.Server  // the masters this command started, in the order of masters, or the one server of -chaos
	mini    *miniredis.Miniredis // the embedded server, nil otherwise
	stop    chan struct{}        // closed by close: stops the embedded clock
	ticking sync.WaitGroup       // the embedded clock's goroutine
	// The Sentinel set or the Cluster this command started for -chaos,
	// nil otherwise, and what the command started, in words ("" when
	// nothing).
	sentinel *redistest.SentinelSet
	cluster  *redistest.Cluster
	started  string
}

// tick is how often the embedded server's TTLs are moved forward.
const tick = 10 * time.Millisecond

// openTarget returns the deployment c names, starting the embedded one when
// c names none. Its TTLs follow the wall clock, as a real server's do, to
// within a tick: a goroutine moves them forward every tick. (Moving them at
// every command instead, miniredis's ClockTTL, costs a scan of every key
// with a TTL per command, and call receipts make those many.)
func openTarget(c config) (*target, error) {
	switch {
	case c.Chaos != "":
		return startChaosTarget(c)
	case c.StartMasters > 0:
		return startMasters(c.StartMasters)
	case len(c.Chosen()) > 0, len(c.Masters) > 0:
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

// remoteTarget returns the deployment c names with -redis, -cluster,
// -sentinel or -masters.
func remoteTarget(c config) *target {
	return &target{spec: c.Spec, masters: c.Masters}
}

// quorum reports whether the deployment is a quorum of masters.
func (t *target) quorum() bool { return len(t.masters) > 0 }

// describe writes the deployment into a worker process's configuration.
func (t *target) describe(c *config) {
	c.Spec, c.Masters = t.spec, t.masters
}

// close stops the embedded server and the servers the command started,
// if any.
func (t *target) close() {
	if t.mini != nil {
		close(t.stop)
		t.ticking.Wait()
		t.mini.Close()
	}
	for _, s := range t.local {
		s.Stop()
	}
	if t.sentinel != nil {
		t.sentinel.Stop()
	}
	if t.cluster != nil {
		t.cluster.Stop()
	}
}

// client returns a new go-redis client of the deployment, with its own
// connection pool. The URL was validated with the flags. Not for a
// quorum: see clients.
func (t *target) client() redis.UniversalClient {
	return t.spec.Client(0)
}

// clients returns new go-redis clients of every server the run's keys
// live on, each with its own connection pool: one per master of a
// quorum, in order, or the one client of the deployment.
func (t *target) clients() []redis.UniversalClient {
	if !t.quorum() {
		return []redis.UniversalClient{t.client()}
	}
	cs := make([]redis.UniversalClient, len(t.masters))
	for i, addr := range t.masters {
		cs[i] = redis.NewClient(&redis.Options{Addr: addr})
	}
	return cs
}

// String names the deployment for reports, without credentials.
func (t *target) String() string {
	switch {
	case t.mini != nil:
		return "embedded Redis (miniredis " + t.mini.Addr() + ")"
	case t.quorum() && t.started != "":
		return fmt.Sprintf("quorum of %d masters %s (%s)", len(t.masters), strings.Join(t.masters, ","), t.started)
	case t.quorum():
		return fmt.Sprintf("quorum of %d masters %s", len(t.masters), strings.Join(t.masters, ","))
	case t.started != "":
		return t.spec.String() + " (" + t.started + ")"
	}
	return t.spec.String()
}

// inspectFlags returns the flags of go run ./cmd/fairlock inspect that
// reach the deployment: those the command was given, or the ones of the
// servers it started.
func (t *target) inspectFlags() string {
	switch {
	case t.started == "":
		return "the same -redis, -cluster or -sentinel"
	case len(t.spec.Cluster) > 0:
		return "-cluster " + strings.Join(t.spec.Cluster, ",")
	case len(t.spec.Sentinel) > 0:
		return "-sentinel " + strings.Join(t.spec.Sentinel, ",") + " -master " + t.spec.Master
	}
	return "-redis " + t.spec.RedisURL
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
