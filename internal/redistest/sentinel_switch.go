package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock/fairlock/internal/pause"
)

// Switch is one +switch-master a sentinel announced: the primary of
// SentinelMasterName moved from Old to New.
type Switch struct {
	Sentinel string // the sentinel that announced it
	Old, New string
	At       time.Time // when the announcement arrived
}

// Switches records every +switch-master that a sentinel of a set
// announces, from WatchSwitches on. Its methods are safe for concurrent
// use.
type Switches struct {
	mu    sync.Mutex
	heard []Switch      // guarded by mu; in arrival order
	more  chan struct{} // closed and replaced (under mu) when one arrives
}

// WatchSwitches subscribes to +switch-master on every sentinel of the
// set, until the test ends. It returns once every subscription is
// confirmed.
func (ss *SentinelSet) WatchSwitches(t testing.TB) *Switches {
	t.Helper()
	w := &Switches{more: make(chan struct{})}
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait) // runs last: once every subscription is closed
	for _, s := range ss.sentinels {
		sc := redis.NewSentinelClient(&redis.Options{Addr: s.Addr})
		ps := sc.Subscribe(t.Context(), "+switch-master")
		if _, err := ps.Receive(t.Context()); err != nil {
			t.Fatalf("redistest: SUBSCRIBE +switch-master on %s: %v", s.Addr, err)
		}
		wg.Go(func() {
			for m := range ps.Channel() {
				w.add(s.Addr, m.Payload)
			}
		})
		t.Cleanup(func() {
			_ = ps.Close()
			_ = sc.Close()
		})
	}
	return w
}

func (w *Switches) add(sentinel, payload string) {
	f := strings.Fields(payload) // name old-ip old-port new-ip new-port
	if len(f) != 5 || f[0] != SentinelMasterName {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.heard = append(w.heard, Switch{Sentinel: sentinel, Old: net.JoinHostPort(f[1], f[2]),
		New: net.JoinHostPort(f[3], f[4]), At: time.Now()})
	close(w.more)
	w.more = make(chan struct{})
}

// First returns the first announcement that arrived at or after since,
// waiting for it up to within.
func (w *Switches) First(since time.Time, within time.Duration) (Switch, error) {
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	for {
		w.mu.Lock()
		for _, s := range w.heard {
			if !s.At.Before(since) {
				w.mu.Unlock()
				return s, nil
			}
		}
		more := w.more
		w.mu.Unlock()
		select {
		case <-more:
		case <-deadline.C:
			return Switch{}, fmt.Errorf("redistest: no +switch-master within %v", within)
		}
	}
}

// Sentinel returns the sentinel listening on addr, or nil.
func (ss *SentinelSet) Sentinel(addr string) *Server {
	return serverAt(ss.sentinels, addr)
}

// FailoverVia asks the sentinel at addr for a graceful failover (SENTINEL
// FAILOVER), which it leads, and returns the address of the primary it
// replaces. It does not wait for the failover to complete.
func (ss *SentinelSet) FailoverVia(ctx context.Context, addr string) (string, error) {
	w := ss.watchers[addr]
	if w == nil {
		return "", fmt.Errorf("redistest: no sentinel of the set at %s", addr)
	}
	m, err := w.Master(ctx, SentinelMasterName).Result()
	if err != nil {
		return "", fmt.Errorf("redistest: SENTINEL MASTER on %s: %w", addr, err)
	}
	if err := w.Failover(ctx, SentinelMasterName).Err(); err != nil {
		return "", fmt.Errorf("redistest: SENTINEL FAILOVER on %s: %w", addr, err)
	}
	return net.JoinHostPort(m["ip"], m["port"]), nil
}

// PauseSentinel stops the sentinel at addr (SIGSTOP) until the returned
// function or the test's end resumes it: it hears nothing, announces
// nothing and answers nothing meanwhile, and its connections stay open.
func (ss *SentinelSet) PauseSentinel(t testing.TB, addr string) (resume func()) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	return Pause(t, c)
}

// ClientNames returns the names of the connections of the server or
// sentinel at addr (CLIENT LIST), normal and pub/sub alike; with normal,
// only those of normal connections.
func ClientNames(ctx context.Context, addr string, normal bool) ([]string, error) {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	list, err := c.Do(ctx, "CLIENT", "LIST").Text()
	if err != nil {
		return nil, fmt.Errorf("redistest: CLIENT LIST on %s: %w", addr, err)
	}
	var names []string
	for line := range strings.SplitSeq(list, "\n") {
		fields := map[string]string{}
		for _, f := range strings.Fields(line) {
			if k, v, ok := strings.Cut(f, "="); ok {
				fields[k] = v
			}
		}
		if fields["name"] != "" && (!normal || fields["flags"] == "N") {
			names = append(names, fields["name"])
		}
	}
	return names, nil
}

// WaitReady waits until a graceful failover can start: every sentinel
// reports the same primary with no failover in progress, knows every
// replica and every other sentinel, and every replica is in sync. It
// returns the primary's address.
func (ss *SentinelSet) WaitReady(within time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	replicas := len(ss.data) - 1
	for {
		primary, err := ss.settled(ctx)
		if err == nil {
			err = ss.replicasInSync(ctx, primary, replicas)
		}
		if err == nil {
			err = ss.known(ctx, primary, replicas)
		}
		if err == nil {
			return primary, nil
		}
		if !pause.For(ctx, 50*time.Millisecond) {
			return "", fmt.Errorf("redistest: the set is not ready for a failover within %v: %w", within, err)
		}
	}
}

// WaitDemoted waits until the server at addr answers ROLE as a replica.
func (ss *SentinelSet) WaitDemoted(addr string, within time.Duration) error {
	a := ss.admin[addr]
	if a == nil {
		return fmt.Errorf("redistest: no server of the set at %s", addr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	for {
		role, err := a.Do(ctx, "ROLE").Slice()
		if err == nil && len(role) > 0 && role[0] == "slave" {
			return nil
		}
		if err == nil {
			err = errors.New("it answers as a master")
		}
		if !pause.For(ctx, 20*time.Millisecond) {
			return fmt.Errorf("redistest: %s not demoted within %v: %w", addr, within, err)
		}
	}
}
