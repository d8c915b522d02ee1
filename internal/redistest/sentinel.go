package redistest

import (
	"context"
	"errors"
	"fmt"
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
)

// Timings of the sentinels StartSentinel starts: a primary that has not
// answered for SentinelDownAfter is failed over, typically within two to
// five times that; a failover that has not completed within
// SentinelFailoverTimeout is given up (and the next one waits twice that).
const (
	SentinelDownAfter       = 1000 * time.Millisecond
	SentinelFailoverTimeout = 5000 * time.Millisecond
)

// SentinelMasterName is the name the sentinels monitor the primary under.
const SentinelMasterName = "fairlock"

// sentinelReady bounds how long StartSentinel waits for the set to form.
const sentinelReady = 60 * time.Second

// SentinelSet is a primary, its replicas and the sentinels that monitor
// them, all on 127.0.0.1. Its methods are safe for concurrent use.
type SentinelSet struct {
	data      []*Server                        // the first primary, then the replicas; set at start
	sentinels []*Server                        // set at start
	admin     map[string]*redis.Client         // one plain client per data server; set at start
	watchers  map[string]*redis.SentinelClient // one client per sentinel; set at start

	mu       sync.Mutex
	killed   map[string]bool // guarded by mu: servers ended by KillPrimary or Kill
	stopOnce sync.Once
}

// SentinelFor is StartSentinel for one test: the test fails if the set
// does not come up, and the set is stopped when the test ends.
func SentinelFor(t testing.TB, replicas, sentinels int) *SentinelSet {
	t.Helper()
	set, err := StartSentinel(replicas, sentinels)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(set.Stop)
	return set
}

// StartSentinel starts a primary without persistence, replicas of it,
// and sentinels that monitor it as SentinelMasterName with a majority
// quorum, and waits until every sentinel knows the primary, every replica
// and every other sentinel, and every replica is in sync. Stop ends it.
func StartSentinel(replicas, sentinels int) (*SentinelSet, error) {
	if replicas < 0 || sentinels < 1 {
		return nil, fmt.Errorf("redistest: a sentinel set needs no negative replica count and a sentinel, not %d and %d",
			replicas, sentinels)
	}
	bin, sentinelArgs, err := sentinelCommand()
	if err != nil {
		return nil, err
	}
	ss := &SentinelSet{
		admin:    map[string]*redis.Client{},
		watchers: map[string]*redis.SentinelClient{},
		killed:   map[string]bool{},
	}
	ok := false
	defer func() {
		if !ok {
			ss.Stop()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), sentinelReady)
	defer cancel()

	// Start the replicas in sync before the sentinels: a sentinel learns of
	// replicas from the primary's INFO, which it reads at once and then
	// only every ten seconds.
	fast := []string{"--repl-diskless-sync-delay", "0"}
	primary, err := Start(fast...)
	if err != nil {
		return nil, err
	}
	ss.addData(primary)
	for range replicas {
		r, err := Start(append(fast, "--replicaof", "127.0.0.1", strconv.Itoa(primary.port))...)
		if err != nil {
			return nil, err
		}
		ss.addData(r)
	}
	if err := ss.waitReplicasInSync(ctx, primary.Addr, replicas); err != nil {
		return nil, fmt.Errorf("redistest: replicas not in sync within %v: %w%s", sentinelReady, err, ss.logs())
	}

	quorum := sentinels/2 + 1
	for range sentinels {
		s, err := startSentinel(bin, sentinelArgs, primary.port, quorum)
		if err != nil {
			return nil, err
		}
		ss.sentinels = append(ss.sentinels, s)
		ss.watchers[s.Addr] = redis.NewSentinelClient(&redis.Options{
			Addr: s.Addr, MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: 2 * time.Second, PoolSize: 2,
		})
	}
	if err := ss.waitKnown(ctx, primary.Addr, replicas); err != nil {
		return nil, fmt.Errorf("redistest: the sentinels did not form within %v: %w%s", sentinelReady, err, ss.logs())
	}
	ok = true
	return ss, nil
}

// sentinelCommand returns how to run a sentinel: redis-sentinel, or
// redis-server in sentinel mode.
func sentinelCommand() (string, []string, error) {
	if bin, err := exec.LookPath("redis-sentinel"); err == nil {
		return bin, nil, nil
	}
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return "", nil, fmt.Errorf("redistest: neither redis-sentinel nor redis-server found on PATH (install the redis-sentinel package): %w", err)
	}
	return bin, []string{"--sentinel"}, nil
}

// startSentinel starts one sentinel with a config file of its own (a
// sentinel rewrites it), trying other ports when one is taken meanwhile.
func startSentinel(bin string, args []string, primaryPort, quorum int) (*Server, error) {
	dir, err := os.MkdirTemp("", "fairlock-sentinel-")
	if err != nil {
		return nil, err
	}
	conf := filepath.Join(dir, "sentinel.conf")
	var lastErr error
	for range 5 {
		port, err := freePort()
		if err != nil {
			lastErr = err
			continue
		}
		text := strings.Join([]string{
			"port " + strconv.Itoa(port),
			"bind 127.0.0.1",
			"protected-mode no",
			"dir " + strconv.Quote(dir),
			fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d %d", SentinelMasterName, primaryPort, quorum),
			fmt.Sprintf("sentinel down-after-milliseconds %s %d", SentinelMasterName, SentinelDownAfter.Milliseconds()),
			fmt.Sprintf("sentinel failover-timeout %s %d", SentinelMasterName, SentinelFailoverTimeout.Milliseconds()),
			fmt.Sprintf("sentinel parallel-syncs %s 1", SentinelMasterName),
			"",
		}, "\n")
		if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
			_ = os.RemoveAll(dir)
			return nil, err
		}
		s := &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), port: port, dir: dir}
		s.args = append(append([]string{bin, conf}, args...), "--loglevel", "notice")
		if lastErr = s.launch(); lastErr == nil {
			return s, nil
		}
	}
	_ = os.RemoveAll(dir)
	return nil, fmt.Errorf("redistest: could not start a sentinel: %w", lastErr)
}

func (ss *SentinelSet) addData(s *Server) {
	ss.data = append(ss.data, s)
	ss.admin[s.Addr] = adminClient(s.Addr)
}

// MasterName returns the name the sentinels monitor the primary under.
func (ss *SentinelSet) MasterName() string { return SentinelMasterName }

// SentinelAddrs returns the addresses of the sentinels.
func (ss *SentinelSet) SentinelAddrs() []string {
	return addrsOf(ss.sentinels)
}

// Addrs returns the addresses of the primary and replicas started, live
// or not, the first primary first.
func (ss *SentinelSet) Addrs() []string {
	return addrsOf(ss.data)
}

// Client returns a failover client of the set, closed when t ends.
func (ss *SentinelSet) Client(t testing.TB) *redis.Client {
	t.Helper()
	rdb := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:    SentinelMasterName,
		SentinelAddrs: ss.SentinelAddrs(),
	})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// Server returns the primary or replica listening on addr, or nil.
func (ss *SentinelSet) Server(addr string) *Server {
	return serverAt(ss.data, addr)
}

// Primary returns the address of the primary as the first sentinel that
// answers reports it.
func (ss *SentinelSet) Primary(ctx context.Context) (string, error) {
	var errs []error
	for _, s := range ss.sentinels {
		addr, err := ss.watchers[s.Addr].GetMasterAddrByName(ctx, SentinelMasterName).Result()
		if err == nil && len(addr) == 2 {
			return net.JoinHostPort(addr[0], addr[1]), nil
		}
		errs = append(errs, fmt.Errorf("%s: %v %w", s.Addr, addr, err))
	}
	return "", fmt.Errorf("redistest: no sentinel reported the primary: %w", errors.Join(errs...))
}

// Stop kills the sentinels, then the primary and replicas, and removes
// their directories. It is idempotent.
func (ss *SentinelSet) Stop() {
	ss.stopOnce.Do(func() {
		for _, s := range ss.sentinels {
			s.Stop()
		}
		for _, s := range ss.data {
			s.Stop()
		}
		for _, w := range ss.watchers {
			_ = w.Close()
		}
		for _, a := range ss.admin {
			_ = a.Close()
		}
	})
}

// logs returns the tail of every process's log, for error messages.
func (ss *SentinelSet) logs() string {
	return logsOf(append(ss.data[:len(ss.data):len(ss.data)], ss.sentinels...)...)
}
