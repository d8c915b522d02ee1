package redistest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock/fairlock/internal/pause"
)

// ClusterNodeTimeout is the cluster-node-timeout of the nodes StartCluster
// starts: a master that has not answered for this long is failed over by
// one of its replicas, typically within two to three times this. Pass
// "--cluster-node-timeout", "<ms>" to StartCluster to change it.
const ClusterNodeTimeout = 1000 * time.Millisecond

// clusterReady bounds how long StartCluster waits for the cluster to form.
const clusterReady = 60 * time.Second

// Cluster is a Redis Cluster of redis-server processes on 127.0.0.1. Its
// methods are safe for concurrent use.
type Cluster struct {
	dir   string
	nodes []*Server                // every node, in start order; set at start
	admin map[string]*redis.Client // one plain client per node address; set at start

	mu       sync.Mutex
	killed   map[string]bool // guarded by mu: nodes ended by Kill
	stopOnce sync.Once
}

// ClusterFor is StartCluster for one test: the test fails if the cluster
// does not form, and the cluster is stopped when the test ends.
func ClusterFor(t testing.TB, masters, replicasPerMaster int, extra ...string) *Cluster {
	t.Helper()
	c, err := StartCluster(masters, replicasPerMaster, extra...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	return c
}

// StartCluster starts masters*(1+replicasPerMaster) redis-servers in
// cluster mode without persistence (cluster-node-timeout
// ClusterNodeTimeout, replicas that may always fail over), joins them with
// redis-cli --cluster create, and waits until every node reports
// cluster_state:ok with all 16384 slots served, every node sees the same
// slot owners, and every replica is in sync with its master. A cluster
// needs at least 3 masters. Extra arguments are passed to every node as
// config directives. Stop ends it.
func StartCluster(masters, replicasPerMaster int, extra ...string) (*Cluster, error) {
	if masters < 3 || replicasPerMaster < 0 {
		return nil, fmt.Errorf("redistest: a cluster needs at least 3 masters and no negative replica count, not %d and %d",
			masters, replicasPerMaster)
	}
	server, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("redistest: redis-server not found on PATH (install the redis-server package): %w", err)
	}
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		return nil, fmt.Errorf("redistest: redis-cli not found on PATH (install the redis-tools package): %w", err)
	}
	dir, err := os.MkdirTemp("", "fairlock-cluster-")
	if err != nil {
		return nil, err
	}
	c := &Cluster{dir: dir, admin: map[string]*redis.Client{}, killed: map[string]bool{}}
	ok := false
	defer func() {
		if !ok {
			c.Stop()
		}
	}()

	// Start the nodes at once: each spends most of its start waiting.
	nodes := make([]*Server, masters*(1+replicasPerMaster))
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i := range nodes {
		wg.Go(func() {
			nodes[i], errs[i] = startClusterNode(server, filepath.Join(dir, "node-"+strconv.Itoa(i)), extra)
		})
	}
	wg.Wait()
	for _, s := range nodes {
		if s != nil {
			c.nodes = append(c.nodes, s)
			c.admin[s.Addr] = adminClient(s.Addr)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}

	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", strconv.Itoa(replicasPerMaster), "--cluster-yes")
	ctx, cancel := context.WithTimeout(context.Background(), clusterReady)
	defer cancel()
	// Meanwhile have the nodes meet again where a handshake was abandoned,
	// which redis-cli would wait for for ever (join waits until redis-cli
	// has had them meet).
	joinCtx, stopJoining := context.WithCancel(ctx)
	var joining sync.WaitGroup
	joining.Go(func() {
		for pause.For(joinCtx, 2*time.Second) {
			c.join(joinCtx)
		}
	})
	out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput()
	stopJoining()
	joining.Wait()
	if err != nil {
		return nil, fmt.Errorf("redistest: redis-cli --cluster create: %w\n%s%s", err, lastLines(string(out), 20), c.logs())
	}
	if err := c.waitHealthy(ctx, replicasPerMaster); err != nil {
		return nil, fmt.Errorf("redistest: the cluster did not form within %v: %w%s", clusterReady, err, c.logs())
	}
	ok = true
	return c, nil
}

// startClusterNode starts one cluster node in dir, on a port whose cluster
// bus port (port+10000) is free too, trying other ports when one is taken
// meanwhile.
func startClusterNode(bin, dir string, extra []string) (*Server, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	var lastErr error
	for range 10 {
		port, err := clusterPort()
		if err != nil {
			lastErr = err
			continue
		}
		s := &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), port: port, dir: dir}
		s.args = serverArgs(bin, port, dir, append([]string{
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", strconv.FormatInt(ClusterNodeTimeout.Milliseconds(), 10),
			"--cluster-replica-validity-factor", "0",
			"--repl-diskless-sync-delay", "0",
		}, extra...)...)
		if lastErr = s.launch(); lastErr == nil {
			return s, nil
		}
		_ = os.Remove(filepath.Join(dir, "nodes.conf"))
	}
	return nil, fmt.Errorf("redistest: could not start a cluster node: %w", lastErr)
}

// adminClient returns a client of one node for the helpers' own queries:
// no retries, short timeouts, so that a dead node fails a query quickly.
func adminClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr:         addr,
		MaxRetries:   -1,
		DialTimeout:  time.Second,
		ReadTimeout:  2 * time.Second,
		WriteTimeout: 2 * time.Second,
		PoolSize:     2,
	})
}

// Addrs returns the addresses of every node started, live or not, in start
// order: seeds for a cluster client.
func (c *Cluster) Addrs() []string {
	return addrsOf(c.nodes)
}

// Client returns a cluster client seeded with every node, closed when t
// ends. Its options are go-redis's defaults: it reloads its slot map on a
// MOVED reply, but not when a node is gone, so after a failover it keeps
// sending a dead master's slots there until its state is a minute old,
// unless ReloadState is called.
func (c *Cluster) Client(t testing.TB) *redis.ClusterClient {
	t.Helper()
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// Node returns the server listening on addr, or nil.
func (c *Cluster) Node(addr string) *Server {
	return serverAt(c.nodes, addr)
}

// Kill ends the node at addr with SIGKILL, as a crash would, and waits
// until it has exited. The cluster notices after ClusterNodeTimeout; a
// killed master's replica then takes over its slots (see WaitFailover).
func (c *Cluster) Kill(addr string) error {
	s := c.Node(addr)
	if s == nil {
		return fmt.Errorf("redistest: no cluster node at %s", addr)
	}
	c.mu.Lock()
	c.killed[addr] = true
	c.mu.Unlock()
	s.kill()
	return nil
}

// Restart starts the node at addr again after Kill, on its port, empty,
// with the cluster configuration it had saved (nodes.conf). A master
// whose slots a replica took over while it was down comes back as that
// replica's replica: it refuses queries for a while after its start, as
// a restarted master does, and learns the new configuration from the
// others meanwhile. Restart returns once the node sees itself as a
// replica, or serving slots, or when ctx ends; WaitHealthy then waits
// until it has copied its master's data.
func (c *Cluster) Restart(ctx context.Context, addr string) error {
	s := c.Node(addr)
	if s == nil {
		return fmt.Errorf("redistest: no cluster node at %s", addr)
	}
	if err := s.Restart(); err != nil {
		return err
	}
	c.mu.Lock()
	delete(c.killed, addr)
	c.mu.Unlock()
	for {
		nodes, err := c.view(ctx, addr)
		if err == nil {
			err = fmt.Errorf("%s is a master without slots yet", addr)
			for _, n := range nodes {
				if n.has("myself") && (n.has("slave") || len(n.slots) > 0) {
					return nil
				}
			}
		}
		if !pause.For(ctx, 50*time.Millisecond) {
			return fmt.Errorf("redistest: restarting %s: %w (%w)", addr, err, ctx.Err())
		}
	}
}

// live returns the nodes not ended by Kill.
func (c *Cluster) live() []*Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	var live []*Server
	for _, s := range c.nodes {
		if !c.killed[s.Addr] {
			live = append(live, s)
		}
	}
	return live
}

// Stop kills every node and removes their directories. It is idempotent.
func (c *Cluster) Stop() {
	c.stopOnce.Do(func() {
		for _, s := range c.nodes {
			s.kill()
		}
		for _, a := range c.admin {
			_ = a.Close()
		}
		_ = os.RemoveAll(c.dir)
	})
}

// logs returns the tail of every node's log, for error messages.
func (c *Cluster) logs() string {
	return logsOf(c.nodes...)
}

// lastLines returns the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// clusterBusOffset is how far above its port a cluster node listens for
// the cluster bus.
const clusterBusOffset = 10000

// clusterPort returns a port p such that both p and p+clusterBusOffset are
// free on 127.0.0.1. It prefers ports below the kernel's ephemeral range,
// which outgoing connections never take, so that nothing grabs the bus
// port between this check and the node's start; a node that still loses
// the race is started again on another port.
func clusterPort() (int, error) {
	lo, hi := 10000, ephemeralLow()-clusterBusOffset
	if hi-lo < 1000 { // no room below the ephemeral range
		lo, hi = 1024, 65535-clusterBusOffset
	}
	for range 100 {
		p := lo + rand.IntN(hi-lo)
		if portFree(p) && portFree(p+clusterBusOffset) {
			return p, nil
		}
	}
	return 0, errors.New("redistest: found no free pair of ports for a cluster node")
}

// ephemeralLow returns the first port of the kernel's ephemeral range.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if p, err := strconv.Atoi(f[0]); err == nil {
				return p
			}
		}
	}
	return 32768 // Linux's default; BSDs start higher
}

func portFree(p int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
	if err != nil {
		return false
	}
	_ = l.Close()
	return true
}
