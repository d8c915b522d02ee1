package fairlock_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/fairlock/fairlock/queue"
)

// A process that holds a Semaphore's permits or a RWMutex's lock, or
// waits for them, is killed (SIGKILL, as a crash). Its hold is given back
// when its lease ends, and its place in line when its waiter TTL ends;
// the waiters behind it that then fit are granted then, and no earlier.

// crashPermits is the capacity of the Semaphores of these tests.
const crashPermits = 3

// callOf returns the call spec of a caller of the lock name through c:
// for a Semaphore (sem) its permits ("1", "2", ...), for a RWMutex "r"
// (RLock) or "w" (Lock).
func callOf(c *fairlock.Client, sem bool, name, spec string) weightedCall {
	if sem {
		n, _ := strconv.ParseInt(spec, 10, 64)
		return acquireCall(c.Semaphore(name, crashPermits), n)
	}
	if spec == "r" {
		return readCall(c.RWMutex(name))
	}
	return writeCall(c.RWMutex(name))
}

// weightOf is the weight Redis counts for a call spec of callOf.
func weightOf(sem bool, spec string) int64 {
	switch {
	case sem:
		n, _ := strconv.ParseInt(spec, 10, 64)
		return n
	case spec == "w":
		return queue.RWCapacity
	}
	return 1
}

// helperArgs returns the role and options of a helper process that takes
// the lock as spec says (see callOf).
func helperArgs(sem bool, spec string) (string, []string) {
	switch {
	case sem:
		return "acquire", []string{"permits=" + strconv.Itoa(crashPermits), "weight=" + spec}
	case spec == "r":
		return "rlock", nil
	}
	return "wlock", nil
}

func TestKilledWeightedHolderProcessGivesItsHoldBackWhenItsLeaseEnds(t *testing.T) {
	redistest.Slow(t)
	t.Parallel()
	for _, tc := range []struct {
		name    string
		sem     bool
		dead    string   // what the killed process holds
		waiters []string // callers in line behind it, in order; all fit once it is gone
	}{
		{"semaphore", true, "2", []string{"2", "1"}},
		{"writer", false, "w", []string{"r", "r"}},
		{"reader", false, "r", []string{"w"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			ctx := context.Background()
			const name = "crash"
			kind := weightedKindOf(tc.sem)
			k := e.weightedKeys(name, kind)
			const lease = time.Second
			role, opts := helperArgs(tc.sem, tc.dead)
			holder := e.spawnHelper(role, name, append(opts, "lease="+lease.String())...)
			holder.awaitGrant(t, 10*time.Second)
			st := e.requireWeightedState(name, kind, 1, weightOf(tc.sem, tc.dead))
			var owner string
			var dead weightedHolder
			for o, h := range st.holders {
				owner, dead = o, h
			}

			calls := make([]weightedCall, len(tc.waiters))
			waits := make([]<-chan result, len(tc.waiters))
			for i, spec := range tc.waiters {
				calls[i] = callOf(e.client(), tc.sem, name, spec)
				waits[i] = lockAsync(ctx, calls[i])
				e.waitWeightedQueued(name, kind, i+1)
			}
			requireWaiting(t, waits[0], "a waiter while the process holds")

			holder.kill(t)
			killed := time.Now()
			// Nobody renews the dead hold any more: its lease ends when
			// Redis last set it to (the server's clock is this machine's).
			score, err := e.rdb.ZScore(ctx, k.Holders, owner).Result()
			require.NoError(t, err, "the dead process's hold is in Redis")
			leaseEnd := time.UnixMilli(int64(score))
			held := make([]context.Context, len(calls))
			for i, ch := range waits {
				r := await(t, ch, lease+5*time.Second)
				granted := time.Now()
				require.NoError(t, r.err, "waiter %d", i)
				require.False(t, granted.Before(leaseEnd),
					"waiter %d granted %v before the dead hold's lease ended", i, leaseEnd.Sub(granted))
				t.Logf("waiter %d granted %v after the kill (lease %v)", i, granted.Sub(killed), lease)
				tok, err := calls[i].token(r.ctx)
				require.NoError(t, err)
				require.Greater(t, tok, dead.token, "the token rises past the dead process's")
				held[i] = r.ctx
			}
			var used int64
			for _, spec := range tc.waiters {
				used += weightOf(tc.sem, spec)
			}
			st = e.requireWeightedState(name, kind, len(tc.waiters), used)
			require.NotContains(t, st.holders, owner, "the dead hold was dropped")
			for i, c := range calls {
				require.NoError(t, c.unlock(held[i]))
			}
			e.requireWeightedGone(name, kind)
		})
	}
}

func TestKilledWeightedHeadWaiterLeavesTheLineAfterItsWaiterTTL(t *testing.T) {
	redistest.Slow(t)
	t.Parallel()
	for _, tc := range []struct {
		name    string
		sem     bool
		holder  string   // a hold of this process, kept throughout
		dead    string   // the killed process waits for this, at the head
		waiters []string // behind it, blocked by it; they fit beside the holder
	}{
		{"semaphore", true, "1", "3", []string{"1", "1"}},
		{"rwmutex", false, "r", "w", []string{"r", "r"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			ctx := context.Background()
			const name = "dead-head"
			const ttl = time.Second
			kind := weightedKindOf(tc.sem)
			k := e.weightedKeys(name, kind)
			short := fairlock.WithWaiterTTL(ttl) // polls every third of it
			holder := callOf(e.client(short), tc.sem, name, tc.holder)
			hctx, err := holder.Lock(ctx)
			require.NoError(t, err)

			role, opts := helperArgs(tc.sem, tc.dead)
			head := e.spawnHelper(role, name, append(opts, "waiterTTL="+ttl.String())...)
			e.waitWeightedQueued(name, kind, 1)
			calls := make([]weightedCall, len(tc.waiters))
			waits := make([]<-chan result, len(tc.waiters))
			for i, spec := range tc.waiters {
				calls[i] = callOf(e.client(short), tc.sem, name, spec)
				waits[i] = lockAsync(ctx, calls[i])
				e.waitWeightedQueued(name, kind, i+2)
			}
			requireWaiting(t, waits[0], "a waiter that fits, behind a head that does not")

			head.kill(t)
			killed := time.Now()
			entry, err := e.rdb.LIndex(ctx, k.Queue, 0).Result()
			require.NoError(t, err)
			score, err := e.rdb.ZScore(ctx, k.Deadline, entry).Result()
			require.NoError(t, err, "the dead process is still first in line")
			deadline := time.UnixMilli(int64(score))

			held := make([]context.Context, len(calls))
			for i, ch := range waits {
				r := await(t, ch, ttl+5*time.Second)
				granted := time.Now()
				require.NoError(t, r.err, "waiter %d", i)
				require.False(t, granted.Before(deadline),
					"waiter %d passed the head %v before its waiter deadline", i, deadline.Sub(granted))
				t.Logf("waiter %d granted %v after the kill (waiter TTL %v)", i, granted.Sub(killed), ttl)
				held[i] = r.ctx
			}
			used := weightOf(tc.sem, tc.holder)
			for _, spec := range tc.waiters {
				used += weightOf(tc.sem, spec)
			}
			e.requireWeightedState(name, kind, 1+len(tc.waiters), used)
			require.Zero(t, e.weightedQueued(name, kind), "the dead waiter left the line")
			require.NoError(t, hctx.Err(), "the holder's hold goes on")
			for i, c := range calls {
				require.NoError(t, c.unlock(held[i]))
			}
			require.NoError(t, holder.unlock(hctx))
			e.requireWeightedGone(name, kind)
		})
	}
}
