package fairlock_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/fairlock/fairlock/queue"
)

// weightedACLRules creates the least-privileged Redis user of a Semaphore
// and a RWMutex under the default key prefix: their scripts call these
// commands, and nothing else is sent. docs/operations.md shows this very
// line; TestWeightedACLLeastPrivilegeUser checks both.
const weightedACLRules = "ACL SETUSER locker on >secret" +
	" resetkeys ~fairlock:* resetchannels &fairlock:* -@all" +
	" +evalsha +eval +fcall +function|load" +
	" +get +set +hmget +hset +hdel +hexists +del +pexpireat" +
	" +lindex +lpop +rpush +lrem +zscore +zadd +zrem +zrange +zcount +time +publish" +
	" +subscribe +unsubscribe +ping"

// everyPrimitiveACLRules creates a user of every primitive: the Mutex's
// line and what the weighted locks' scripts call on top of it.
// docs/operations.md shows this very line.
const everyPrimitiveACLRules = aclRules + " +zrange +zcount +hexists +pexpireat"

func TestWeightedACLLeastPrivilegeUser(t *testing.T) {
	redistest.Slow(t)
	t.Parallel()
	doc, err := os.ReadFile("docs/operations.md")
	require.NoError(t, err)
	for _, line := range []string{weightedACLRules, everyPrimitiveACLRules} {
		require.Contains(t, string(doc), "\n"+line+"\n", "docs/operations.md shows the rule line the test checks")
	}
	// The line of every primitive grants what each primitive's does, and
	// no rule before -@all: it serves them all.
	every := strings.Fields(everyPrimitiveACLRules)
	require.Less(t, slices.Index(every, "-@all"), slices.Index(every, "+evalsha"))
	for _, line := range []string{aclRules, weightedACLRules} {
		for _, rule := range strings.Fields(line) {
			require.Contains(t, every, rule, "the line of every primitive grants %s", rule)
		}
	}
	for _, sc := range weightedScenarios {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			srv, err := redistest.Start()
			require.NoError(t, err)
			t.Cleanup(srv.Stop)
			sc.run(&aclCalls{t: t}, aclServer(t, srv.Addr, srv.Client(t), weightedACLRules))
		})
	}
}

// TestWeightedACLEveryRuleOfTheLineIsNeeded drops one rule at a time from
// the line: each scenario fails, its first error ErrNoPermission: that of
// a call, or of the leave of a waiter that gave up, which its call
// reports unless it was answered after the cleanup grace (see
// requireLeft). Without +unsubscribe every call works, but the refusal
// of each unsubscription is logged.
func TestWeightedACLEveryRuleOfTheLineIsNeeded(t *testing.T) {
	redistest.Slow(t)
	t.Parallel()
	eachRuleLeftOut(t, weightedACLRules, func(t *testing.T, srv *redistest.Server, rule, line string) {
		for _, sc := range weightedScenarios {
			var calls *aclCalls
			failure := expectFailure(func(ft require.TestingT) {
				calls = &aclCalls{t: ft}
				sc.run(calls, aclServer(ft, srv.Addr, srv.Client(t), line))
			})
			require.NotEmpty(t, failure, "the %s ran without %s", sc.name, rule)
			first := calls.first()
			t.Logf("%s without %s: %v", sc.name, rule, first)
			if rule == "+unsubscribe" {
				require.NoError(t, first, "no call fails")
				require.Contains(t, failure, "refused to the user")
				continue
			}
			require.ErrorIs(t, first, fairlock.ErrNoPermission, "%s without %s: %s", sc.name, rule, firstLine(failure))
		}
	})
}

// weightedClusterACLRules creates the least-privileged user of a
// Semaphore and a RWMutex on a Redis Cluster of Redis 7: as for a Mutex,
// sharded pub/sub in place of the classic one, and the slot map.
// docs/operations.md shows this very line.
const weightedClusterACLRules = "ACL SETUSER locker on >secret resetkeys ~fairlock:* resetchannels &fairlock:* -@all" +
	" +evalsha +eval +fcall +function|load +get +set +hget +hmget +hset +hdel +hexists +del +pexpireat" +
	" +lindex +lpop +rpush +lrem +zscore +zadd +zrem +zrange +zcount +time +spublish" +
	" +ssubscribe +sunsubscribe +ping +cluster|slots"

// weightedACLUserWithTheShardedRules runs both weighted scenarios as the
// user of weightedClusterACLRules, created on every node of the cluster
// (TestClusterShardedWakeUps shares its cluster): nothing is refused but
// what go-redis and the server check do without (COMMAND, INFO).
func weightedACLUserWithTheShardedRules(t *testing.T, cluster *redistest.Cluster, masters, replicas []string) {
	doc, err := os.ReadFile("docs/operations.md")
	require.NoError(t, err)
	require.Contains(t, string(doc), "\n"+weightedClusterACLRules+"\n", "docs/operations.md shows the rule line the test checks")
	ctx := context.Background()
	fields := strings.Fields(weightedClusterACLRules)
	args := make([]any, len(fields))
	for i, f := range fields {
		args[i] = f
	}
	nodes := map[string]*redis.Client{}
	for _, addr := range append(masters, replicas...) {
		nodes[addr] = cluster.Node(addr).Client(t)
		require.NoError(t, nodes[addr].Do(ctx, args...).Err())
		require.NoError(t, nodes[addr].Do(ctx, "ACL", "LOG", "RESET").Err())
	}
	d := aclDeployment{
		admin: cluster.Client(t),
		user: func() redis.UniversalClient {
			return redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs(), Username: "locker", Password: "secret"})
		},
		subscribed: func() int {
			n := 0
			for _, addr := range masters {
				n += len(nodes[addr].PubSubShardChannels(ctx, "fairlock:*").Val())
			}
			return n
		},
	}
	for _, sc := range weightedScenarios {
		t.Run(sc.name, func(t *testing.T) { sc.run(&aclCalls{t: t}, d) })
	}
	for addr, rdb := range nodes {
		entries, err := rdb.Do(ctx, "ACL", "LOG").Slice()
		require.NoError(t, err)
		for _, e := range entries {
			entry := fmt.Sprint(e)
			if strings.Contains(entry, "object:info") || strings.Contains(entry, "object:command") {
				continue
			}
			t.Errorf("refused on %s: %s", addr, entry)
		}
	}
}

// A holder whose user may not publish still hands over: its release
// grants the waiters that fit and reports ErrNoPermission, naming the
// wake channel, and each waiter granted learns it at its next poll.
func TestWeightedRefusedWakeMessageStillHandsOver(t *testing.T) {
	t.Parallel()
	srv, err := redistest.Start()
	require.NoError(t, err)
	t.Cleanup(srv.Stop)
	admin := srv.Client(t)
	line := strings.Replace(weightedACLRules, " +publish", "", 1)
	require.NotEqual(t, weightedACLRules, line)
	rdb := newACLUser(t, srv.Addr, admin, line)
	t.Cleanup(func() { _ = rdb.Close() })
	holders, err := fairlock.New(rdb, fairlock.WithLogger(slog.New(&logRecorder{})))
	require.NoError(t, err)
	t.Cleanup(func() { _ = holders.Close() })
	// The waiters' Client polls every 200ms.
	waiters, err := fairlock.New(srv.Client(t), fairlock.WithWaiterTTL(600*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(func() { _ = waiters.Close() })
	e := &env{t: t, rdb: admin, prefix: "fairlock"}

	for _, tc := range []struct {
		name   string
		sem    bool
		hold   string
		behind []string // granted together by the release
	}{
		{"semaphore", true, "3", []string{"2", "1"}},
		{"rwmutex", false, "w", []string{"r", "r"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			const name = "no-publish"
			kind := weightedKindOf(tc.sem)
			holder := callOf(holders, tc.sem, name, tc.hold)
			hctx, err := holder.Lock(ctx)
			require.NoError(t, err)
			calls := make([]weightedCall, len(tc.behind))
			waits := make([]<-chan result, len(tc.behind))
			for i, spec := range tc.behind {
				calls[i] = callOf(waiters, tc.sem, name, spec)
				waits[i] = lockAsync(ctx, calls[i])
				e.waitWeightedQueued(name, kind, i+1)
			}

			err = holder.unlock(hctx)
			require.ErrorIs(t, err, fairlock.ErrNoPermission)
			require.ErrorContains(t, err, "handed to the next waiter")
			require.ErrorContains(t, err, e.weightedKeys(name, kind).Wake)
			requireDone(t, hctx, time.Second)
			require.NotErrorIs(t, context.Cause(hctx), fairlock.ErrLeaseLost, "the hold was released, not lost")
			var used int64
			for i, ch := range waits {
				r := await(t, ch, refusalWithin)
				require.NoError(t, r.err, "waiter %d finds its grant at its next poll", i)
				defer func() { require.NoError(t, calls[i].unlock(r.ctx)) }()
				used += weightOf(tc.sem, tc.behind[i])
			}
			e.requireWeightedState(name, kind, len(tc.behind), used)
		})
	}
}

// pollHolder is a go-redis hook that holds up the client's first
// wait-mode poll (a script with queue.ModeWait among its arguments) on
// its way to Redis: held is closed when it comes, and it goes on once
// release is closed.
type pollHolder struct {
	once          sync.Once
	held, release chan struct{}
}

func (p *pollHolder) DialHook(next redis.DialHook) redis.DialHook { return next }

func (p *pollHolder) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if isScript(cmd) && slices.Contains(cmd.Args(), any(queue.ModeWait)) {
			p.once.Do(func() {
				close(p.held)
				<-p.release
			})
		}
		return next(ctx, cmd)
	}
}

func (p *pollHolder) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// A waiter whose context ends while its poll is on the way leaves the
// line once the poll is answered, and the call reports that leave's
// refusal, as it does for a give-up between two polls.
func TestAGiveUpDuringAPollReportsTheRefusedLeave(t *testing.T) {
	t.Parallel()
	srv, err := redistest.Start()
	require.NoError(t, err)
	t.Cleanup(srv.Stop)
	admin := srv.Client(t)
	line := strings.Replace(weightedACLRules, " +lrem", "", 1)
	require.NotEqual(t, weightedACLRules, line)
	rdb := newACLUser(t, srv.Addr, admin, line)
	t.Cleanup(func() { _ = rdb.Close() })
	poll := &pollHolder{held: make(chan struct{}), release: make(chan struct{})}
	rdb.AddHook(poll)
	waiters, err := fairlock.New(rdb, fairlock.WithLogger(slog.New(&logRecorder{})))
	require.NoError(t, err)
	t.Cleanup(func() { _ = waiters.Close() })
	holders, err := fairlock.New(admin)
	require.NoError(t, err)
	t.Cleanup(func() { _ = holders.Close() })
	ctx := context.Background()
	const name = "gives-up"

	blocker, err := holders.RWMutex(name).Lock(ctx)
	require.NoError(t, err)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	gaveUp := lockAsync(wctx, readerOf{waiters.RWMutex(name)})
	select {
	case <-poll.held:
	case <-time.After(refusalWithin):
		require.FailNow(t, "no wait-mode poll within "+refusalWithin.String())
	}
	cancel()
	close(poll.release)

	r := await(t, gaveUp, refusalWithin)
	require.ErrorIs(t, r.err, context.Canceled)
	require.ErrorIs(t, r.err, fairlock.ErrNoPermission, "the call reports that its leave was refused")
	require.ErrorContains(t, r.err, "leaving the queue")
	require.NoError(t, holders.RWMutex(name).Unlock(blocker))
}
