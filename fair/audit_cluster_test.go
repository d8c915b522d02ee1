package fair

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/fairlock/fairlock/queue"
)

// auditReads are the commands of the audit's reads.
var auditReads = []string{"hmget", "hget", "zscore"}

// nodeTrips is a go-redis hook for the node clients of a cluster client:
// per node, the round trips that carried audit reads, alone or in a
// pipeline, and the reads they carried.
type nodeTrips struct {
	mu        sync.Mutex
	pipelines map[string]int // guarded by mu; by node address
	singles   map[string]int // guarded by mu
	reads     map[string]int // guarded by mu
}

func newNodeTrips() *nodeTrips {
	return &nodeTrips{pipelines: map[string]int{}, singles: map[string]int{}, reads: map[string]int{}}
}

// on returns the hook of the node at addr.
func (n *nodeTrips) on(addr string) redis.Hook { return nodeHook{n: n, addr: addr} }

func (n *nodeTrips) count(addr string, cmds []redis.Cmder, pipelined bool) {
	reads := 0
	for _, c := range cmds {
		if slices.Contains(auditReads, c.Name()) {
			reads++
		}
	}
	if reads == 0 {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.reads[addr] += reads
	if pipelined {
		n.pipelines[addr]++
	} else {
		n.singles[addr]++
	}
}

// take returns the counts so far and starts afresh.
func (n *nodeTrips) take() (pipelines, singles, reads map[string]int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	pipelines, singles, reads = n.pipelines, n.singles, n.reads
	n.pipelines, n.singles, n.reads = map[string]int{}, map[string]int{}, map[string]int{}
	return pipelines, singles, reads
}

type nodeHook struct {
	n    *nodeTrips
	addr string
}

func (h nodeHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h nodeHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.count(h.addr, []redis.Cmder{cmd}, false)
		return next(ctx, cmd)
	}
}

func (h nodeHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.count(h.addr, cmds, true)
		return next(ctx, cmds)
	}
}

// One look of the audit of a cluster client reads every call it watches
// in one pipeline per master, however many locks the calls are on. Each
// round of clearing reads again, in one pipeline per master, only the
// locks that showed a trace: here a tenth of them, each holding a level of
// an ended call's owner, which the round releases.
func TestAuditReadsEveryLockInOnePipelinePerMaster(t *testing.T) {
	redistest.Slow(t)
	cluster := redistest.ClusterFor(t, 3, 0)
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs()})
	t.Cleanup(func() { _ = rdb.Close() })
	trips := newNodeTrips()
	rdb.OnNewNode(func(c *redis.Client) { c.AddHook(trips.on(c.Options().Addr)) })
	e := mustEngine(t, rdb, Config{WaiterTTL: 9 * time.Second, CallTimeout: 5 * time.Second,
		Logger: slog.New(slog.DiscardHandler)})
	a := e.audit
	require.True(t, a.enabled, "a cluster client's engine audits")
	a.takenOver()
	ctx := context.Background()
	prefix := redistest.Prefix(t)

	const names, traced = 300, 30
	masters := map[string]bool{}
	var held []*Mutex
	for i := range names {
		keys, err := queue.For(prefix, fmt.Sprintf("n%d", i))
		require.NoError(t, err)
		m, err := cluster.MasterOf(ctx, keys.Lock)
		require.NoError(t, err)
		masters[m] = true
		l := e.Mutex(keys)
		owner := fmt.Sprintf("o%d", i)
		en := l.entry(Request{Owner: owner, Lease: rigLease})
		if i%(names/traced) == 0 {
			rep, err := l.acquire(ctx, owner, en, rigLease, queue.ModeTry)
			require.NoError(t, err)
			require.True(t, rep.Granted)
			held = append(held, l)
		}
		a.ended(l, l, Request{Owner: owner}, en, nil, "")
	}
	require.Len(t, masters, 3, "the names are on every master")
	require.Len(t, held, traced)

	trips.take()
	a.lookNow()
	pipelines, singles, reads := trips.take()
	require.Empty(t, singles, "no read alone")
	total := 0
	for m := range masters {
		require.Equal(t, 2, pipelines[m], "master %s: one pipeline for the look, one for the round that cleared", m)
		total += reads[m]
	}
	require.Len(t, pipelines, 3, "no other node was read")
	require.Equal(t, 2*names+2*traced, total, "an HMGET and a ZSCORE per lock, then per traced lock")
	for _, l := range held {
		require.Zero(t, rdb.Exists(ctx, l.keys.Lock).Val(), "%s released", l.keys.Name)
	}

	a.lookNow() // no trace left: one pipeline per master
	pipelines, singles, _ = trips.take()
	require.Empty(t, singles)
	for m := range masters {
		require.Equal(t, 1, pipelines[m], "master %s", m)
	}
}
