package fairlock_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/internal/faultproxy"
	"github.com/fairlock/fairlock/internal/redistest"
)

// Faults of a quorum lock's masters on real servers: a minority killed
// during contention, one restarted empty after the lease, one cut off by
// a fault proxy (every Client's connections to it, or a holder's to two
// of three). Nobody holds beside a live hold, tokens rise in grant
// order, and grants go on while a majority answers.

func TestQuorumKeepsExclusionAndGrantsWhenAMinorityOfMastersDies(t *testing.T) {
	redistest.Slow(t)
	for _, tc := range []struct {
		masters int
		kill    []int
	}{{3, []int{1}}, {5, []int{0, 3}}} {
		t.Run(fmt.Sprintf("%d of %d", len(tc.kill), tc.masters), func(t *testing.T) {
			servers := redistest.Masters(t, tc.masters)
			var ms []*fairlock.Mutex
			for range 3 {
				ms = append(ms, quorumOf(t, servers, quorumFaultOpts()...).Mutex("hot"))
			}
			run := qcontend(t, ms, 3)
			run.await(t, 20, "before the kill")
			for _, i := range tc.kill {
				servers[i].Kill()
			}
			run.await(t, run.x.count()+40, "after the kill")
			run.halt(t)
			run.x.check(t)
		})
	}
}

func TestQuorumMasterRestartedEmptyAfterTheLeaseGrantsNoSecondHolder(t *testing.T) {
	redistest.Slow(t)
	servers := redistest.Masters(t, 3)
	first := quorumOf(t, servers, quorumFaultOpts()...).Mutex("job")
	second := quorumOf(t, servers, quorumFaultOpts()...).Mutex("job")
	third := quorumOf(t, servers, quorumFaultOpts()...).Mutex("job")
	k := quorumKeys(t, "job")
	direct := make([]*redis.Client, len(servers))
	for i, s := range servers {
		direct[i] = s.Client(t)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	held, err := first.Lock(ctx)
	require.NoError(t, err)
	tok, err := first.Token(held)
	require.NoError(t, err)
	// A fast-path grant reaches the master its doorway did not ask a
	// moment after Lock returns: the waiter is started once the hold is on
	// every master, or its doorway could take that master first.
	for _, rdb := range direct {
		waitQuorumHeld(t, rdb, k)
	}
	owner := direct[1].HGet(ctx, k.Lock, "owner").Val()
	require.NotEmpty(t, owner)

	next := lockAfter(ctx, second, held)
	for _, rdb := range direct {
		queuedOn(t, rdb, k, 1)
	}
	granted := func() bool { return len(next) > 0 }

	// Master 0 crashes, and stays down longer than any hold or place in
	// line it had could last (the delayed restart of quorum locks'
	// deployment rules). Meanwhile the first holder keeps its majority.
	servers[0].Kill()
	require.Never(t, granted, max(quorumFaultLease, quorumFaultTTL)*3/2, 10*time.Millisecond,
		"the waiter was granted while master 0 was down")
	require.NoError(t, held.Err())
	require.NoError(t, servers[0].Restart())

	// Master 0 is back, empty: the waiter joins its line there and is
	// handed its free lock, a minority, while the first holder keeps the
	// other two.
	require.Eventually(t, func() bool {
		o := direct[0].HGet(ctx, k.Lock, "owner").Val()
		return granted() || o != "" && o != owner
	}, 10*time.Second, 5*time.Millisecond, "the waiter did not take restarted master 0")
	require.Never(t, granted, 2*quorumFaultLease, 10*time.Millisecond,
		"the waiter was granted on restarted master 0 while the first holder held the others")
	require.NoError(t, held.Err(), "the first holder lost its majority")
	require.Equal(t, owner, direct[1].HGet(ctx, k.Lock, "owner").Val())
	require.Equal(t, owner, direct[2].HGet(ctx, k.Lock, "owner").Val())
	_, err = third.TryLock(ctx)
	require.ErrorIs(t, err, fairlock.ErrLocked)
	locked, err := third.IsLocked(ctx)
	require.NoError(t, err)
	require.True(t, locked)
	again, err := first.Token(held)
	require.NoError(t, err)
	require.Equal(t, tok, again)

	require.NoError(t, first.Unlock(held))
	g := awaitGrant(t, next, 10*time.Second)
	require.True(t, g.firstEnded, "the waiter was granted before the first hold ended")
	tok2, err := second.Token(g.held)
	require.NoError(t, err)
	require.Greater(t, tok2, tok)
	require.NoError(t, second.Unlock(g.held))
}

// quorumCuts are the ways a fault proxy cuts a master off.
var quorumCuts = []struct {
	name string
	cut  func(*faultproxy.Proxy)
}{
	// Calls hang without an error until the redis client's read timeout.
	{"frozen", (*faultproxy.Proxy).FreezeAll},
	// Calls fail at once.
	{"rejected", (*faultproxy.Proxy).Reject},
}

func TestQuorumKeepsExclusionAndGrantsThroughAPartitionedMaster(t *testing.T) {
	redistest.Slow(t)
	for _, tc := range quorumCuts {
		t.Run(tc.name, func(t *testing.T) { quorumPartition(t, tc.cut, false) })
	}
}

func TestQuorumMasterCutOffFromOneClientServesTheOthers(t *testing.T) {
	redistest.Slow(t)
	for _, tc := range quorumCuts {
		t.Run(tc.name, func(t *testing.T) { quorumPartition(t, tc.cut, true) })
	}
}

// quorumPartition runs three Clients in contention on three masters,
// each Client reaching master 0 through a proxy of its own, and cuts
// master 0 off from every Client, or from the first only (one), then
// heals it. Nobody overlaps, grants go on throughout, and master 0 grants
// holds again after healing; with one Client cut off, it goes on
// granting the others during the partition too.
func quorumPartition(t *testing.T, cut func(*faultproxy.Proxy), one bool) {
	servers := redistest.Masters(t, 3)
	var (
		ms      []*fairlock.Mutex
		proxies []*faultproxy.Proxy
	)
	for range 3 {
		p := faultproxy.New(t, servers[0].Addr)
		proxies = append(proxies, p)
		addrs := []string{p.Addr(), servers[1].Addr, servers[2].Addr}
		ms = append(ms, quorumVia(t, addrs, quorumFaultOpts()...).Mutex("hot"))
	}
	if one {
		proxies = proxies[:1]
	}
	k := quorumKeys(t, "hot")
	direct := servers[0].Client(t)
	// counter reads master 0's token counter, which moves with every hold
	// master 0 grants.
	counter := func() int64 {
		v, _ := strconv.ParseInt(direct.Get(context.Background(), k.Token).Val(), 10, 64)
		return v
	}

	run := qcontend(t, ms, 3)
	run.await(t, 20, "before the partition")
	for _, p := range proxies {
		cut(p)
	}
	at := counter()
	run.await(t, run.x.count()+30, "during the partition")
	if one {
		// Once the cut-off Client's hold or place there has run out,
		// master 0 grants the others holds.
		require.Eventually(t, func() bool { return counter() > at }, 15*time.Second, 10*time.Millisecond,
			"master 0 granted the Clients that reach it nothing during the partition")
	}
	for _, p := range proxies {
		p.Heal()
	}
	at = counter()
	run.await(t, run.x.count()+30, "after healing")
	require.Eventually(t, func() bool { return counter() > at }, 15*time.Second, 10*time.Millisecond,
		"master 0 granted nothing after healing")
	run.halt(t)
	run.x.check(t)
}

func TestQuorumHolderCutOffFromAMajorityLosesItsLeaseBeforeAnotherIsGranted(t *testing.T) {
	redistest.Slow(t)
	for _, tc := range quorumCuts {
		t.Run(tc.name, func(t *testing.T) {
			servers := redistest.Masters(t, 3)
			p0 := faultproxy.New(t, servers[0].Addr)
			p1 := faultproxy.New(t, servers[1].Addr)
			// A drift factor of 5% puts 100ms between the end of the
			// holder's validity and the end of its hold on the masters,
			// so that the two time.Now() readings below are far apart.
			opts := quorumFaultOpts(fairlock.WithDriftFactor(0.05))
			cut := quorumVia(t, []string{p0.Addr(), p1.Addr(), servers[2].Addr}, opts...).Mutex("job")
			other := quorumOf(t, servers, opts...).Mutex("job")
			k := quorumKeys(t, "job")
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()

			held, err := cut.Lock(ctx)
			require.NoError(t, err)
			tok, err := cut.Token(held)
			require.NoError(t, err)
			for _, s := range servers { // the hold on every master first (see above)
				waitQuorumHeld(t, s.Client(t), k)
			}
			ended := make(chan time.Time, 1)
			stop := context.AfterFunc(held, func() { ended <- time.Now() })
			defer stop()

			next := lockAfter(ctx, other, held)
			for _, s := range servers {
				queuedOn(t, s.Client(t), k, 1)
			}
			tc.cut(p0)
			tc.cut(p1)

			g := awaitGrant(t, next, quorumFaultLease+10*time.Second)
			require.True(t, g.firstEnded, "the other Client was granted while the cut-off hold was live")
			require.ErrorIs(t, context.Cause(held), fairlock.ErrLeaseLost)
			var lost time.Time
			select {
			case lost = <-ended:
			case <-time.After(5 * time.Second):
				t.Fatal("the cut-off hold's end was not reported")
			}
			require.True(t, g.at.After(lost), "granted at %v, the cut-off hold ended at %v", g.at, lost)
			t.Logf("granted %v after the cut-off hold ended", g.at.Sub(lost))
			tok2, err := other.Token(g.held)
			require.NoError(t, err)
			require.Greater(t, tok2, tok)
			require.ErrorIs(t, cut.Unlock(held), fairlock.ErrLeaseLost)

			// Healed, the cut-off Client locks again. Its connections that
			// were frozen stay broken until each times out, and a Lock
			// call whose first round meets them on both masters fails
			// with ErrNoQuorum: it tries again.
			p0.Heal()
			p1.Heal()
			require.NoError(t, other.Unlock(g.held))
			var again context.Context
			for deadline := time.Now().Add(20 * time.Second); ; {
				again, err = cut.Lock(ctx)
				if errors.Is(err, fairlock.ErrNoQuorum) && time.Now().Before(deadline) {
					t.Logf("after healing: %v", err)
					continue
				}
				require.NoError(t, err)
				break
			}
			tok3, err := cut.Token(again)
			require.NoError(t, err)
			require.Greater(t, tok3, tok2)
			require.NoError(t, cut.Unlock(again))
		})
	}
}

// TestQuorumWaiterGrantedByEveryMasterKeepsItsHoldWhenOneIsLost: a
// waiting Lock joins the line on every master, so that every master
// hands itself to it when the holder unlocks; once one of the three is
// killed, the other two renew the hold for several leases, its context
// does not end, and it commits its token and unlocks.
func TestQuorumWaiterGrantedByEveryMasterKeepsItsHoldWhenOneIsLost(t *testing.T) {
	redistest.Slow(t)
	t.Parallel()
	const lease = 2 * time.Second
	ctx := context.Background()
	servers := redistest.Masters(t, 3)
	ma := quorumOf(t, servers).Mutex("job")
	mb := quorumOf(t, servers, fairlock.WithLease(lease)).Mutex("job")
	k := quorumKeys(t, "job")
	rdbs := make([]*redis.Client, len(servers))
	for i, s := range servers {
		rdbs[i] = s.Client(t)
	}
	heldA, err := ma.Lock(ctx)
	require.NoError(t, err)
	for _, rdb := range rdbs { // the hold on every master first (see above)
		waitQuorumHeld(t, rdb, k)
	}
	ownerA := rdbs[0].HGet(ctx, k.Lock, "owner").Val()
	require.NotEmpty(t, ownerA)

	waitB := lockAsync(ctx, mb)
	for _, rdb := range rdbs {
		waitQuorumQueued(t, rdb, k, 1)
	}
	require.NoError(t, ma.Unlock(heldA))
	rb := await(t, waitB, 10*time.Second)
	require.NoError(t, rb.err)
	require.Eventually(t, func() bool {
		for _, rdb := range rdbs {
			if owner := rdb.HGet(ctx, k.Lock, "owner").Val(); owner == "" || owner == ownerA {
				return false
			}
		}
		return true
	}, 10*time.Second, 5*time.Millisecond, "every master hands itself to B")

	servers[0].Kill()
	select {
	case <-rb.ctx.Done():
		t.Fatalf("the hold ended while two of its three masters held it: %v", context.Cause(rb.ctx))
	case <-time.After(4 * lease):
	}
	ttl, err := mb.TTL(rb.ctx)
	require.NoError(t, err)
	require.Greater(t, ttl, lease/3, "the validity is renewed by the two masters left")
	tctx, cancel := context.WithTimeout(rb.ctx, 3*time.Second)
	defer cancel()
	_, err = mb.Token(tctx)
	require.NoError(t, err)
	require.NoError(t, mb.Unlock(rb.ctx))
}

// A master that stops answering, before anything has noticed, delays a
// Lock's doorway by its hedge, not by a call timeout: the doorway asks a
// majority first, and the other masters as soon as that majority is slow.
func TestQuorumDoorwayIsNotHeldUpByAMasterThatHangsUnnoticed(t *testing.T) {
	redistest.Slow(t)
	t.Parallel()
	servers := redistest.Masters(t, 3)
	p := faultproxy.New(t, servers[0].Addr)
	const callTimeout = 30 * time.Second
	c := quorumVia(t, []string{p.Addr(), servers[1].Addr, servers[2].Addr}, fairlock.WithCallTimeout(callTimeout))
	ctx := context.Background()
	held, err := c.Mutex("warm").Lock(ctx) // every master reached once
	require.NoError(t, err)
	require.NoError(t, c.Mutex("warm").Unlock(held))

	p.FreezeAll()
	defer p.Heal()
	// Each Lock's doorway starts at a random master: in ten, the hung one
	// is among the first asked about 7 times.
	for i := range 10 {
		start := time.Now()
		m := c.Mutex(fmt.Sprint("n", i))
		held, err := m.Lock(ctx)
		require.NoError(t, err)
		require.NoError(t, m.Unlock(held))
		t.Logf("%d: %v", i, time.Since(start))
		require.Less(t, time.Since(start), callTimeout/3, "Lock+Unlock %d waited for the hung master", i)
	}
}
