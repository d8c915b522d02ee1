package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// sampleEvery is how often the sampler reads the counters during a run:
// the longest a stretch of unread commands can be.
const sampleEvery = 500 * time.Millisecond

// Time limits of one reading, so that a dead node does not hold up a round.
const (
	sampleDial = time.Second
	sampleRead = 2 * time.Second
)

// sampler reads the command counters of a deployment's servers in rounds
// (see cmdcount.go): it finds the servers anew every round (the one server
// of a URL, CLUSTER NODES, or the sentinels' primary and replicas) and
// keeps reading those it found before.
type sampler struct {
	tgt       *target
	every     time.Duration
	base      redis.Options          // of a node client, without Addr
	counter   *cmdCounter            // used by one round at a time
	nodes     map[string]*nodeClient // by address; used by one round at a time
	view      map[string]bool        // discovery's last view: every server found, true for the primaries; likewise
	sentinels []*sentinelConn        // one per sentinel address, the last that answered first
	quit      chan struct{}          // closed by stop
	done      chan struct{}          // closed when the sampling goroutine has exited
}

// sentinelConn is the sampler's connection to one sentinel.
type sentinelConn struct {
	addr string
	c    *redis.SentinelClient
}

// nodeClient is the sampler's connection to one server.
type nodeClient struct {
	addr  string
	rdb   *redis.Client
	plain bool // the server refused INFO all (the embedded one): read INFO
	down  bool // the last reading failed
}

// startSampler makes the first round of readings and starts reading every
// every. It fails when no server could be read.
func startSampler(ctx context.Context, tgt *target, every time.Duration) (*sampler, error) {
	s := &sampler{
		tgt: tgt, every: every, counter: newCmdCounter(),
		nodes: map[string]*nodeClient{}, view: map[string]bool{},
		quit: make(chan struct{}), done: make(chan struct{}),
	}
	if tgt.spec.RedisURL != "" {
		opt, err := redis.ParseURL(tgt.spec.RedisURL)
		if err != nil {
			return nil, err // not reached: checked by validate
		}
		s.base = *opt
	}
	s.base.Addr = ""
	s.base.DialTimeout, s.base.ReadTimeout, s.base.WriteTimeout = sampleDial, sampleRead, sampleRead
	// No retries: a failed reading is counted as such. Two connections, so
	// that one failed dial does not start go-redis's redial loop: a client
	// that failed is replaced by a fresh one.
	s.base.MaxRetries, s.base.DialerRetries, s.base.PoolSize = -1, 1, 2
	for _, a := range tgt.spec.Sentinel {
		s.sentinels = append(s.sentinels, &sentinelConn{addr: a, c: s.sentinel(a)})
	}
	if err := s.round(ctx); err != nil {
		s.close()
		return nil, err
	}
	go s.loop() // owned by s: stop waits for it
	return s, nil
}

func (s *sampler) loop() {
	defer close(s.done)
	t := time.NewTicker(s.every)
	defer t.Stop()
	for {
		select {
		case <-s.quit:
			return
		case <-t.C:
			_ = s.round(context.Background()) // a failed round is counted as such
		}
	}
}

// stop ends the sampling, makes the last round, and returns the tally.
func (s *sampler) stop(ctx context.Context) cmdTally {
	close(s.quit)
	<-s.done
	_ = s.round(ctx)
	s.close()
	return s.counter.finish(time.Now())
}

func (s *sampler) close() {
	for _, n := range s.nodes {
		_ = n.rdb.Close()
	}
	for _, sc := range s.sentinels {
		_ = sc.c.Close()
	}
}

// round finds the servers, reads every one known, and hands the readings
// to the counter. It fails when no server answered.
func (s *sampler) round(ctx context.Context) error {
	at := time.Now()
	found, derr := s.discover(ctx)
	if derr == nil {
		s.view = found
	}
	for addr := range s.view {
		if s.nodes[addr] == nil {
			s.nodes[addr] = &nodeClient{addr: addr, rdb: s.client(addr)}
		}
	}
	rs := make([]reading, 0, len(s.nodes))
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	for _, n := range s.nodes {
		wg.Go(func() {
			r := s.read(n)
			mu.Lock()
			defer mu.Unlock()
			rs = append(rs, r)
		})
	}
	wg.Wait()
	slices.SortFunc(rs, func(a, b reading) int { return strings.Compare(a.Addr, b.Addr) })
	s.counter.round(at, rs)
	var errs []error
	for _, r := range rs {
		if r.Err == nil {
			return nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", r.Addr, r.Err))
	}
	return errors.Join(derr, errors.Join(errs...))
}

// client returns a new client of the node at addr.
func (s *sampler) client(addr string) *redis.Client {
	opt := s.base
	opt.Addr = addr
	return redis.NewClient(&opt)
}

// sentinel returns a new client of the sentinel at addr.
func (s *sampler) sentinel(addr string) *redis.SentinelClient {
	return redis.NewSentinelClient(&redis.Options{
		Addr: addr, DialTimeout: sampleDial, ReadTimeout: sampleRead, WriteTimeout: sampleRead,
		MaxRetries: -1, DialerRetries: 1, PoolSize: 2,
	})
}

// failed replaces the client of n, which failed, and has the next reading
// probe the node first.
func (s *sampler) failed(n *nodeClient) {
	_ = n.rdb.Close()
	n.rdb, n.down = s.client(n.addr), true
}

// read reads one node. A node that was down is probed first, so that while
// it stays down no go-redis client dials it again and again.
func (s *sampler) read(n *nodeClient) reading {
	var (
		text string
		err  error
	)
	if n.down {
		var conn net.Conn
		if conn, err = net.DialTimeout(cmp.Or(s.base.Network, "tcp"), n.addr, sampleDial); err == nil {
			_ = conn.Close()
		}
	}
	if err == nil {
		if text, err = s.info(n); err != nil {
			s.failed(n)
		}
	}
	at := time.Now()
	if n.down = err != nil; n.down {
		return reading{Addr: n.addr, At: at, Err: err, Primary: s.view[n.addr]}
	}
	return parseInfo(n.addr, at, text)
}

// info returns the node's INFO all, or its plain INFO where the server
// knows no sections (the embedded one).
func (s *sampler) info(n *nodeClient) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), sampleDial+sampleRead)
	defer cancel()
	if !n.plain {
		text, err := n.rdb.Info(ctx, "all").Result()
		var rerr redis.Error
		if err == nil || !errors.As(err, &rerr) {
			return text, err
		}
		n.plain = true
	}
	return n.rdb.Info(ctx).Result()
}

// parseInfo reads an INFO reply of the node at addr.
func parseInfo(addr string, at time.Time, text string) reading {
	r := reading{Addr: addr, At: at, Primary: true, Uptime: -1, Calls: map[string]int64{}}
	var processed int64
	for l := range strings.Lines(text) {
		l = strings.TrimSpace(l)
		if l == "# Commandstats" {
			r.Detailed = true
		}
		k, v, ok := strings.Cut(l, ":")
		if !ok {
			continue
		}
		switch {
		case k == "run_id":
			r.RunID = v
		case k == "role":
			r.Primary = v == "master"
		case k == "uptime_in_seconds":
			if n, err := strconv.ParseInt(v, 10, 64); err == nil {
				r.Uptime = time.Duration(n) * time.Second
			}
		case k == "total_commands_processed":
			processed, _ = strconv.ParseInt(v, 10, 64)
		case strings.HasPrefix(k, "cmdstat_"):
			calls := infoField(v, "calls")
			r.Calls[strings.TrimPrefix(k, "cmdstat_")] = calls
			r.Total += calls
		}
	}
	if !r.Detailed {
		r.Total, r.Calls = processed, nil
	}
	return r
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
