package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock/internal/redistest"
)

// sentinelSet is a primary, one replica and three sentinels that watch
// them, all on loopback, stopped when the test ends.
type sentinelSet struct {
	name      string // the name the sentinels monitor the primary under
	primary   *redistest.Server
	replica   *redistest.Server
	sentinels []string // addresses
}

// sentinelReady bounds how long the set may take to form.
const sentinelReady = 30 * time.Second

// startSentinelSet starts the set and waits until the replica is in sync
// and every sentinel knows the replica and the two other sentinels, so
// that a failover can happen.
func startSentinelSet(t *testing.T) *sentinelSet {
	t.Helper()
	set := &sentinelSet{name: "stress-primary"}
	var err error
	set.primary, err = redistest.Start("--repl-diskless-sync-delay", "0")
	require.NoError(t, err)
	t.Cleanup(set.primary.Stop)
	_, port, _ := net.SplitHostPort(set.primary.Addr)
	set.replica, err = redistest.Start("--replicaof", "127.0.0.1", port)
	require.NoError(t, err)
	t.Cleanup(set.replica.Stop)
	waitFor(t, "the replica to sync", func(ctx context.Context) error {
		return infoIs(ctx, set.replica.Addr, "master_link_status", "up")
	})

	dir := t.TempDir()
	for i := range 3 {
		set.sentinels = append(set.sentinels, startSentinel(t, filepath.Join(dir, fmt.Sprintf("sentinel-%d", i)), set.name, port))
	}
	for _, a := range set.sentinels {
		waitFor(t, "sentinel "+a+" to know the set", func(ctx context.Context) error {
			c := redis.NewSentinelClient(&redis.Options{Addr: a})
			defer c.Close()
			replicas, err := c.Replicas(ctx, set.name).Result()
			if err != nil {
				return err
			}
			others, err := c.Sentinels(ctx, set.name).Result()
			if err != nil {
				return err
			}
			if len(replicas) != 1 || len(others) != 2 {
				return fmt.Errorf("it knows %d replicas and %d other sentinels", len(replicas), len(others))
			}
			return nil
		})
	}
	return set
}

// startSentinel starts a redis-sentinel with a configuration of its own in
// dir, watching the primary on port, and returns its address.
func startSentinel(t *testing.T, dir, name, primaryPort string) string {
	t.Helper()
	require.NoError(t, os.MkdirAll(dir, 0o755))
	var last error
	for range 5 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
		require.NoError(t, l.Close())
		conf := filepath.Join(dir, "sentinel.conf")
		logf := filepath.Join(dir, "sentinel.log")
		require.NoError(t, os.WriteFile(conf, []byte(strings.Join([]string{
			"port " + port,
			"bind 127.0.0.1",
			"dir " + dir,
			"logfile " + logf,
			"sentinel monitor " + name + " 127.0.0.1 " + primaryPort + " 2",
			"sentinel down-after-milliseconds " + name + " 1000",
			"sentinel failover-timeout " + name + " 5000",
			"",
		}, "\n")), 0o644))
		cmd := exec.Command("redis-sentinel", conf)
		if _, err := exec.LookPath("redis-sentinel"); err != nil {
			cmd = exec.Command("redis-server", conf, "--sentinel")
		}
		require.NoError(t, cmd.Start())
		exited := make(chan struct{})
		go func() { // owned by the cleanup below, which waits for exited
			_ = cmd.Wait()
			close(exited)
		}()
		stop := func() {
			_ = cmd.Process.Kill()
			<-exited
		}
		addr := net.JoinHostPort("127.0.0.1", port)
		if last = waitPing(addr, exited); last == nil {
			t.Cleanup(stop)
			return addr
		}
		stop()
		log, _ := os.ReadFile(logf)
		last = fmt.Errorf("%w; its log:\n%s", last, log)
	}
	t.Fatalf("starting redis-sentinel: %v", last)
	return ""
}

// waitPing waits until addr answers PING, or the process exits.
func waitPing(addr string, exited <-chan struct{}) error {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case <-exited:
			return fmt.Errorf("redis-sentinel on %s exited at start", addr)
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-sentinel on %s did not answer PING: %w", addr, err)
		}
		time.Sleep(20 * time.Millisecond) // polling for the event, bounded above
	}
}

// waitFor polls cond until it holds, failing the test after sentinelReady.
func waitFor(t *testing.T, what string, cond func(context.Context) error) {
	t.Helper()
	deadline := time.Now().Add(sentinelReady)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := cond(ctx)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		time.Sleep(50 * time.Millisecond) // polling for the event, bounded above
	}
}

// infoIs checks that the INFO field of the server at addr has the value
// want.
func infoIs(ctx context.Context, addr, field, want string) error {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	info, err := c.Info(ctx).Result()
	if err != nil {
		return err
	}
	for l := range strings.Lines(info) {
		if k, v, ok := strings.Cut(strings.TrimSpace(l), ":"); ok && k == field {
			if v == want {
				return nil
			}
			return fmt.Errorf("%s %s is %s:%s, not %s", addr, field, k, v, want)
		}
	}
	return fmt.Errorf("%s: no %s in INFO", addr, field)
}

// waitRedialsEnd waits until no go-redis redial loop is left: a client's
// pool that saw as many failed dials as it has connections redials once a
// second, and notices only then that it was closed. The leak check at the
// end of the tests would otherwise catch the loops of a run that ended
// just after a server died.
func waitRedialsEnd(t *testing.T) {
	t.Helper()
	waitFor(t, "go-redis's redial loops to end", func(context.Context) error {
		buf := make([]byte, 1<<20)
		if n := runtime.Stack(buf, true); bytes.Contains(buf[:n], []byte("(*ConnPool).tryDial")) {
			return errors.New("a redial loop is running")
		}
		return nil
	})
}
