package fairlock_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/queue"
)

// Helpers of the tests that run a Semaphore and a RWMutex on every client
// kind and through faults (weighted_*_test.go), as the Mutex's tests do.

// permitsOf is a Semaphore's Acquire of n permits as a locker, so that
// lockAsync and await serve it as they serve a Mutex.
type permitsOf struct {
	s *fairlock.Semaphore
	n int64
}

func (p permitsOf) Lock(ctx context.Context) (context.Context, error) { return p.s.Acquire(ctx, p.n) }

// readerOf is a RWMutex's RLock as a locker; the RWMutex itself is the
// writer's.
type readerOf struct{ rw *fairlock.RWMutex }

func (r readerOf) Lock(ctx context.Context) (context.Context, error) { return r.rw.RLock(ctx) }

// requireWaiting asserts that the call that reports on ch has not
// returned: it waits in line.
func requireWaiting(t testing.TB, ch <-chan result, what string) {
	t.Helper()
	select {
	case r := <-ch:
		t.Fatalf("%s returned out of turn: %v", what, r.err)
	case <-time.After(50 * time.Millisecond):
	}
}

// weightedHolder is one holder's record of a weighted lock, as Redis
// keeps it: "<weight> <shared levels> <exclusive levels> <token> <entry>".
type weightedHolder struct {
	weight, shared, excl, token int64
}

// weightedState is what Redis keeps of a weighted lock: its holders by
// owner id, the weight held and the stored capacity (0: none).
type weightedState struct {
	holders        map[string]weightedHolder
	used, capacity int64
}

// writers counts the holders with a write level.
func (s weightedState) writers() int {
	n := 0
	for _, h := range s.holders {
		if h.excl > 0 {
			n++
		}
	}
	return n
}

// weightedStateOf reads what Redis keeps of the weighted lock name of
// kind through e.rdb.
func (e *env) weightedStateOf(name, kind string) (weightedState, error) {
	return weightedStateIn(e.rdb, e.weightedKeys(name, kind))
}

// weightedStateIn reads what Redis keeps of the weighted lock of keys k
// through rdb.
func weightedStateIn(rdb redis.UniversalClient, k queue.Keys) (weightedState, error) {
	fields, err := rdb.HGetAll(context.Background(), k.Lock).Result()
	if err != nil {
		return weightedState{}, err
	}
	st := weightedState{holders: map[string]weightedHolder{}}
	for f, v := range fields {
		switch {
		case f == "used":
			st.used, _ = strconv.ParseInt(v, 10, 64)
		case f == "permits":
			st.capacity, _ = strconv.ParseInt(v, 10, 64)
		case strings.HasPrefix(f, "o:"):
			var h weightedHolder
			parts := strings.Fields(v)
			if len(parts) != 5 {
				return weightedState{}, fmt.Errorf("holder record %q", v)
			}
			for i, p := range []*int64{&h.weight, &h.shared, &h.excl, &h.token} {
				if *p, err = strconv.ParseInt(parts[i], 10, 64); err != nil {
					return weightedState{}, fmt.Errorf("holder record %q: %w", v, err)
				}
			}
			st.holders[strings.TrimPrefix(f, "o:")] = h
		}
	}
	return st, nil
}

// requireWeightedState asserts what Redis keeps of the weighted lock: how
// many holders and how much weight they hold.
func (e *env) requireWeightedState(name, kind string, holders int, used int64) weightedState {
	e.t.Helper()
	st, err := e.weightedStateOf(name, kind)
	require.NoError(e.t, err)
	require.Len(e.t, st.holders, holders, "holders of %s: %v", name, st.holders)
	require.Equal(e.t, used, st.used, "weight held of %s", name)
	return st
}

// weightedQueued returns the length of the weighted lock's line.
func (e *env) weightedQueued(name, kind string) int64 {
	return e.rdb.LLen(context.Background(), e.weightedKeys(name, kind).Queue).Val()
}

// crowd checks the holds of one weighted lock as the callers that hold
// them see them: never more permits (a Semaphore) than its capacity,
// never a writer beside anyone (a RWMutex), and every token fresh. Each
// caller reports its hold with enter and its end with leave.
type crowd struct {
	capacity int64 // a Semaphore's; 0 for a RWMutex

	mu      sync.Mutex
	used    int64          // permits held; guarded by mu
	readers int            // guarded by mu
	writers int            // guarded by mu
	most    int64          // the most permits held at once; guarded by mu
	tokens  map[int64]bool // every token seen; guarded by mu
	broken  []string       // what went wrong; guarded by mu
	holds   atomic.Int64   // holds entered
}

func newCrowd(capacity int64) *crowd { return &crowd{capacity: capacity, tokens: map[int64]bool{}} }

// enter records a hold of weight n (a Semaphore's) or a read or write hold
// (a RWMutex's), under token.
func (c *crowd) enter(n int64, write bool, token int64) {
	c.holds.Add(1)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.tokens[token] {
		c.broken = append(c.broken, "token "+strconv.FormatInt(token, 10)+" granted twice")
	}
	c.tokens[token] = true
	switch {
	case c.capacity > 0:
		c.used += n
		c.most = max(c.most, c.used)
		if c.used > c.capacity {
			c.broken = append(c.broken, strconv.FormatInt(c.used, 10)+" permits held at once")
		}
	case write:
		c.writers++
		if c.writers > 1 || c.readers > 0 {
			c.broken = append(c.broken, "a writer beside another holder")
		}
	default:
		c.readers++
		if c.writers > 0 {
			c.broken = append(c.broken, "a reader beside a writer")
		}
	}
}

func (c *crowd) leave(n int64, write bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.capacity > 0:
		c.used -= n
	case write:
		c.writers--
	default:
		c.readers--
	}
}

// check fails t when a hold broke the lock's promise.
func (c *crowd) check(t testing.TB) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	require.Empty(t, c.broken)
}

// weightedKindOf returns the kind of keys of a Semaphore (sem true) or a
// RWMutex.
func weightedKindOf(sem bool) string {
	if sem {
		return queue.KindSemaphore
	}
	return queue.KindRWMutex
}

// weightedCall is one caller of a weighted lock: how it takes the lock
// (a locker, for lockAsync), gives it back and reads its token.
type weightedCall struct {
	locker
	unlock func(context.Context) error
	token  func(context.Context) (int64, error)
	write  bool  // a RWMutex's writer
	weight int64 // a Semaphore's permits
}

func acquireCall(s *fairlock.Semaphore, n int64) weightedCall {
	return weightedCall{locker: permitsOf{s, n}, unlock: s.Release, token: s.Token, weight: n}
}

func readCall(rw *fairlock.RWMutex) weightedCall {
	return weightedCall{locker: readerOf{rw}, unlock: rw.RUnlock, token: rw.Token}
}

func writeCall(rw *fairlock.RWMutex) weightedCall {
	return weightedCall{locker: rw, unlock: rw.Unlock, token: rw.Token, write: true}
}
