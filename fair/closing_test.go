package fair

import (
	"bytes"
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock/internal/errs"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/fairlock/fairlock/lua"
	"github.com/fairlock/fairlock/queue"
)

// slowReleases is a go-redis hook that, once armed, holds back by d every
// command or pipeline that runs a release script (release.lua,
// wrelease.lua, qrelease.lua), as a slow link would, and counts the
// replies of the releases: the owner still held (found), or held no more
// (gone).
type slowReleases struct {
	d           time.Duration
	armed       atomic.Bool
	found, gone atomic.Int64
}

// releases are the release calls (release.lua, wrelease.lua,
// qrelease.lua), by which they are known: their scripts' SHA1s and their
// functions' names.
var releases = func() map[string]bool {
	known := map[string]bool{}
	for _, c := range []lua.Call{
		lua.Classic.Release(queue.Keys{}, "", "", "", 0, 0),
		lua.Classic.WRelease(queue.Keys{}, "", "", "", 0, 0, lua.Level{}),
		lua.Classic.QRelease(queue.Keys{}, "", "", "", 0, 0, false, 0, 0, 0, 0),
	} {
		known[c.Script.Hash()] = true
		if c.Function != "" {
			known[c.Function] = true
		}
	}
	return known
}()

// isRelease reports whether cmd runs a release script or function.
func isRelease(cmd redis.Cmder) bool {
	args := cmd.Args()
	if len(args) < 2 {
		return false
	}
	body, _ := args[1].(string)
	switch cmd.Name() {
	case "evalsha", "fcall":
		return releases[body]
	case "eval":
		sum := sha1.Sum([]byte(body))
		return releases[hex.EncodeToString(sum[:])]
	}
	return false
}

// unrun reports whether err says the server ran nothing: it lacked the
// script or the library.
func unrun(err error) bool {
	msg, ok := errs.Reply(err)
	return ok && (strings.HasPrefix(msg, "NOSCRIPT") || strings.HasPrefix(msg, "ERR Function not found"))
}

func (h *slowReleases) count(cmd redis.Cmder) {
	c, ok := cmd.(*redis.Cmd)
	if !ok || !h.armed.Load() || !isRelease(cmd) || unrun(c.Err()) {
		return
	}
	switch v := c.Val().(type) {
	case int64: // release.lua, wrelease.lua: the levels left, or -1
		if v >= 0 {
			h.found.Add(1)
		} else {
			h.gone.Add(1)
		}
	case []any: // release.lua: {0, wake message}; qrelease.lua: {held, levels}
		_, handed := v[1].(string)
		if held, _ := v[0].(int64); handed || held == 1 {
			h.found.Add(1)
		} else {
			h.gone.Add(1)
		}
	}
}

func (h *slowReleases) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *slowReleases) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.armed.Load() && isRelease(cmd) {
			time.Sleep(h.d)
		}
		err := next(ctx, cmd)
		h.count(cmd)
		return err
	}
}
func (h *slowReleases) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if h.armed.Load() && slices.ContainsFunc(cmds, isRelease) {
			time.Sleep(h.d)
		}
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			h.count(cmd)
		}
		return err
	}
}

// closeLease is the lease of the holds Close ends here, and closeDelay
// how long each release (each pipeline of releases) is held back: longer
// than the lease, so that a hold whose renewals stopped when Close
// started would be gone before its release arrived, while a renewal
// every third of the lease has time to spare on a busy machine.
const (
	closeLease = 1500 * time.Millisecond
	closeDelay = 2 * time.Second
)

// must returns v, and panics on err: for keys of valid names.
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// endsAt returns when ctx ended, once it has.
func endsAt(ctx context.Context) <-chan time.Time {
	ch := make(chan time.Time, 1)
	context.AfterFunc(ctx, func() { ch <- time.Now() })
	return ch
}

// requireEndedAtOnce checks that each hold's context ended with
// errs.ErrClosed within a moment of start: Close does not wait for the
// releases to end them.
func requireEndedAtOnce(t *testing.T, start time.Time, holds []context.Context, ended []<-chan time.Time) {
	t.Helper()
	for i, at := range ended {
		select {
		case end := <-at:
			require.Less(t, end.Sub(start), closeDelay/2, "hold %d ended when its release was answered, not at Close", i)
		default:
			t.Fatalf("hold %d did not end at Close", i)
		}
		require.ErrorIs(t, context.Cause(holds[i]), errs.ErrClosed)
	}
}

// Close keeps renewing each hold it ended until the answer to its
// release comes: releases slower than the lease still find every hold,
// a Mutex's, one entered twice, and a weighted lock's. The holds'
// contexts end at once.
func TestCloseRenewsEachHoldUntilItsReleaseIsAnswered(t *testing.T) {
	redistest.Slow(t)
	srv, err := redistest.Start()
	require.NoError(t, err)
	t.Cleanup(srv.Stop)
	rdb := srv.Client(t)
	slow := &slowReleases{d: closeDelay}
	rdb.AddHook(slow)
	e := mustEngine(t, rdb, Config{WaiterTTL: 10 * time.Second, CallTimeout: 10 * time.Second})
	prefix := redistest.Prefix(t)
	ctx := context.Background()
	sem, err := queue.Weighted(prefix, "w", queue.KindSemaphore)
	require.NoError(t, err)
	w := e.Weighted(sem, NewWeights(3), lua.Level{Weight: 2})
	for _, l := range []*Mutex{e.Mutex(must(queue.For(prefix, "warm"))), w} { // the release scripts loaded
		h, err := l.Lock(ctx, Request{Owner: "warm", Lease: closeLease})
		require.NoError(t, err)
		require.NoError(t, h.Unlock(ctx))
	}

	var holds []*Hold
	for _, name := range []string{"a", "b", "c"} {
		keys, err := queue.For(prefix, name)
		require.NoError(t, err)
		h, err := e.Mutex(keys).Lock(ctx, Request{Owner: name, Lease: closeLease})
		require.NoError(t, err)
		holds = append(holds, h)
	}
	require.NoError(t, holds[0].Enter(ctx)) // two levels
	h, err := w.Lock(ctx, Request{Owner: "w", Lease: closeLease})
	require.NoError(t, err)
	holds = append(holds, h)

	var (
		states []context.Context
		ended  []<-chan time.Time
	)
	for _, h := range holds {
		states = append(states, h.Context())
		ended = append(ended, endsAt(h.Context()))
	}
	slow.armed.Store(true)
	start := time.Now()
	require.NoError(t, e.Close())
	requireEndedAtOnce(t, start, states, ended)
	require.Zero(t, slow.gone.Load(), "releases found their hold gone: it was not renewed until they came")
	require.EqualValues(t, len(holds)+1, slow.found.Load(), "releases that found their hold (one per level)")
	for _, h := range holds {
		n, err := srv.Client(t).Exists(ctx, h.l.keys.Lock).Result()
		require.NoError(t, err)
		require.Zero(t, n, "%s is left", h.l.keys.Lock)
	}
}

// The same of a quorum's holds: each is renewed on every master until
// every master has answered its release. Here master 0 answers later than
// the lease, the others at once: once they have, no majority holds any
// more, and the hold must still be renewed on master 0.
func TestQuorumCloseRenewsEachHoldUntilItsReleaseIsAnswered(t *testing.T) {
	redistest.Slow(t)
	servers := redistest.Masters(t, 3)
	var (
		masters []Redis
		slows   []*slowReleases
	)
	for i, s := range servers {
		rdb := s.Client(t)
		slow := &slowReleases{}
		if i == 0 {
			slow.d = closeDelay
		}
		rdb.AddHook(slow)
		masters, slows = append(masters, rdb), append(slows, slow)
	}
	qm, err := NewQuorum(masters, Config{WaiterTTL: 10 * time.Second, CallTimeout: 10 * time.Second}, QuorumConfig{Drift: 0.01})
	require.NoError(t, err)
	t.Cleanup(func() { _ = qm.Close() })
	prefix := redistest.Prefix(t)
	ctx := context.Background()
	warm, err := qm.Mutex(must(queue.Quorum(prefix, "warm"))).Lock(ctx, Request{Owner: "warm", Lease: closeLease, Wait: true})
	require.NoError(t, err)
	require.NoError(t, warm.Unlock(ctx)) // the release script loaded on every master
	landed := func(key string, count int) func() bool {
		return func() bool {
			for _, s := range servers {
				n, err := s.Client(t).HGet(ctx, key, "count").Int()
				if errors.Is(err, redis.Nil) {
					n, err = 0, nil
				}
				if err != nil || n != count {
					return false
				}
			}
			return true
		}
	}
	require.Eventually(t, landed(warm.l.keys.Lock, 0), 5*time.Second, time.Millisecond, "the release of warm on every master")

	var holds []*QHold
	for _, name := range []string{"a", "b"} {
		keys, err := queue.Quorum(prefix, name)
		require.NoError(t, err)
		h, err := qm.Mutex(keys).Lock(ctx, Request{Owner: name, Lease: closeLease, Wait: true})
		require.NoError(t, err)
		holds = append(holds, h)
	}
	require.NoError(t, holds[0].Enter(ctx)) // two levels
	require.Eventually(t, landed(holds[0].l.keys.Lock, 2), 5*time.Second, time.Millisecond, "the re-entry on every master")

	var (
		states []context.Context
		ended  []<-chan time.Time
	)
	for _, h := range holds {
		states = append(states, h.Context())
		ended = append(ended, endsAt(h.Context()))
	}
	for _, slow := range slows {
		slow.armed.Store(true)
	}
	start := time.Now()
	require.NoError(t, qm.Close())
	requireEndedAtOnce(t, start, states, ended)
	for i, slow := range slows {
		require.Zero(t, slow.gone.Load(), "master %d: releases found their hold gone: it was not renewed until they came", i)
		require.EqualValues(t, len(holds)+1, slow.found.Load(), "master %d: releases that found their hold (one per level)", i)
		for _, h := range holds {
			n, err := servers[i].Client(t).Exists(ctx, h.l.keys.Lock).Result()
			require.NoError(t, err)
			require.Zero(t, n, "%s is left on master %d", h.l.keys.Lock, i)
		}
	}
}

// syncBuffer is a bytes.Buffer safe for concurrent use: a log's output.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// countWaits counts the WAIT commands sent (with eachCmd).
type countWaits struct{ n atomic.Int64 }

func (h *countWaits) count(cmd redis.Cmder) {
	if cmd.Name() == "wait" {
		h.n.Add(1)
	}
}

// With replicas to wait for, Close asks them once, after all the
// releases of a server are answered: when it returns, a replica in sync
// has every release; when the replica is gone, that is logged.
func TestCloseAsksTheReplicasOnceForAllItsReleases(t *testing.T) {
	redistest.Slow(t)
	primary, err := redistest.Start("--repl-diskless-sync-delay", "0")
	require.NoError(t, err)
	t.Cleanup(primary.Stop)
	replica, err := redistest.Start()
	require.NoError(t, err)
	t.Cleanup(replica.Stop)
	ctx := context.Background()
	host, port, err := net.SplitHostPort(primary.Addr)
	require.NoError(t, err)
	rep := replica.Client(t)
	require.NoError(t, rep.Do(ctx, "REPLICAOF", host, port).Err())
	require.Eventually(t, func() bool {
		info, err := rep.Info(ctx, "replication").Result()
		return err == nil && infoField(info, "master_link_status") == "up"
	}, 10*time.Second, 10*time.Millisecond, "the replica is in sync")
	prefix := redistest.Prefix(t)

	closeWith := func(name string) (string, []queue.Keys) {
		var log syncBuffer
		rdb := primary.Client(t)
		waits := &countWaits{}
		rdb.AddHook(eachCmd(waits.count))
		e := mustEngine(t, rdb, Config{WaiterTTL: 10 * time.Second, CallTimeout: 5 * time.Second,
			Replicas: 1, ReplicaTimeout: time.Second, Logger: slog.New(slog.NewTextHandler(&log, nil))})
		var keys []queue.Keys
		for i := range 3 {
			k, err := queue.For(prefix, fmt.Sprintf("%s-%d", name, i))
			require.NoError(t, err)
			_, err = e.Mutex(k).Lock(ctx, Request{Owner: k.Name, Lease: time.Minute})
			require.NoError(t, err)
			keys = append(keys, k)
		}
		if name == "gone" {
			require.NoError(t, rep.Do(ctx, "REPLICAOF", "NO", "ONE").Err())
		}
		waits.n.Store(0)
		require.NoError(t, e.Close())
		require.EqualValues(t, 1, waits.n.Load(), "WAITs sent by Close")
		return log.String(), keys
	}

	log, keys := closeWith("synced")
	require.NotContains(t, log, "did not acknowledge")
	for _, k := range keys {
		n, err := rep.Exists(ctx, k.Lock).Result()
		require.NoError(t, err)
		require.Zero(t, n, "the replica still has %s when Close returned", k.Lock)
	}
	log, _ = closeWith("gone")
	require.Contains(t, log, "Close released the holds it ended, but the replicas did not acknowledge it")
	require.Contains(t, log, "asked for 1 replica, the primary has 0 connected")
}

// sentAt records when the first release script naming each owner was
// sent (with eachCmd).
type sentAt struct {
	mu sync.Mutex
	at map[string]time.Time // owner -> time; guarded by mu
}

func (h *sentAt) record(cmd redis.Cmder) {
	if !isRelease(cmd) {
		return
	}
	args := cmd.Args()
	n, _ := args[2].(int) // numkeys; ARGV[1] is the owner
	if len(args) <= 3+n {
		return
	}
	owner, _ := args[3+n].(string)
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.at[owner]; !ok {
		h.at[owner] = time.Now()
	}
}

// On a quorum master, Close sends a hold's release after the calls of
// that hold still out there (its turn), and the releases of the other
// holds without waiting for it.
func TestQuorumCloseDoesNotHoldUpReleasesBehindAnotherHoldsCall(t *testing.T) {
	redistest.Slow(t)
	servers := redistest.Masters(t, 3)
	var masters []Redis
	sent := &sentAt{at: map[string]time.Time{}}
	for i, s := range servers {
		rdb := s.Client(t)
		if i == 0 {
			rdb.AddHook(eachCmd(sent.record))
		}
		masters = append(masters, rdb)
	}
	qm, err := NewQuorum(masters, Config{WaiterTTL: 10 * time.Second, CallTimeout: 5 * time.Second}, QuorumConfig{Drift: 0.01})
	require.NoError(t, err)
	t.Cleanup(func() { _ = qm.Close() })
	prefix := redistest.Prefix(t)
	ctx := context.Background()
	holds := map[string]*QHold{}
	for _, owner := range []string{"busy", "idle"} {
		keys, err := queue.Quorum(prefix, owner)
		require.NoError(t, err)
		h, err := qm.Mutex(keys).Lock(ctx, Request{Owner: owner, Lease: 30 * time.Second, Wait: true})
		require.NoError(t, err)
		holds[owner] = h
	}

	const out = 500 * time.Millisecond
	_, answered := holds["busy"].ord.turn(0) // a call of busy's still out on master 0
	time.AfterFunc(out, answered)
	start := time.Now()
	require.NoError(t, qm.Close())
	sent.mu.Lock()
	defer sent.mu.Unlock()
	require.Contains(t, sent.at, "idle")
	require.Contains(t, sent.at, "busy")
	require.Less(t, sent.at["idle"].Sub(start), out/2, "idle's release waited for busy's call")
	require.GreaterOrEqual(t, sent.at["busy"].Sub(start), out*9/10, "busy's release went before its call was answered")
	for _, h := range holds {
		n, err := servers[0].Client(t).Exists(ctx, h.l.keys.Lock).Result()
		require.NoError(t, err)
		require.Zero(t, n, "%s is left on master 0", h.l.keys.Lock)
	}
}
