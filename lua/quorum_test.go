package lua_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/fairlock/fairlock/lua"
	"github.com/fairlock/fairlock/queue"
)

// quorumRig runs the quorum scripts on one master of a real server.
type quorumRig struct {
	t      *testing.T
	rdb    *redis.Client
	k      queue.Keys
	pubsub *redis.PubSub
	n      int
}

func newQuorumRig(t *testing.T) *quorumRig {
	k, err := queue.Quorum(redistest.Prefix(t), "q")
	require.NoError(t, err)
	r := &quorumRig{t: t, rdb: redistest.Shared(t).Client(t), k: k}
	r.pubsub = r.rdb.PSubscribe(context.Background(), k.Wake+":*")
	_, err = r.pubsub.Receive(context.Background())
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.pubsub.Close() })
	return r
}

func (r *quorumRig) entry(owner string) string {
	r.n++
	return queue.Entry(fmt.Sprintf("%016x", r.n)+"0000abcd"+queue.WakeVersion, time.Minute, owner)
}

func (r *quorumRig) try(owner, entry, mode string) lua.QReply {
	r.t.Helper()
	rep, err := lua.ReadQTry(lua.Classic.QTry(r.k, queue.NewID(), owner, entry, 60000, 30000, mode, 20000, 0).Run(context.Background(), r.rdb))
	require.NoError(r.t, err)
	return rep
}

func (r *quorumRig) join(owner, entry string, ticket, yield int64) lua.QReply {
	r.t.Helper()
	rep, err := lua.ReadQJoin(lua.Classic.QJoin(r.k, owner, entry, 60000, 30000, ticket, yield, 0).Run(context.Background(), r.rdb))
	require.NoError(r.t, err)
	return rep
}

func (r *quorumRig) release(owner, entry string, committed int64, last bool) lua.QReply {
	r.t.Helper()
	rep, err := lua.ReadQRelease(lua.Classic.QRelease(r.k, queue.NewID(), owner, entry, committed, 60000, last, 30000, 20000, 20000, 0).Run(context.Background(), r.rdb))
	require.NoError(r.t, err)
	return rep
}

// message waits for the next wake message.
func (r *quorumRig) message() string {
	r.t.Helper()
	m, err := r.pubsub.ReceiveTimeout(context.Background(), 5*time.Second)
	require.NoError(r.t, err)
	return m.(*redis.Message).Payload
}

// grant waits for the next hand-over message, passing over inquiries (a
// holder's entry alone): a holder that took a master by its try has no
// ticket there, so any waiter's key is smaller.
func (r *quorumRig) grant() string {
	r.t.Helper()
	for {
		if m := r.message(); strings.Contains(m, " ") {
			return m
		}
	}
}

func TestAQuorumMasterServesByTicketNotArrival(t *testing.T) {
	r := newQuorumRig(t)
	ea := r.entry("a")
	got := r.try("a", ea, "try")
	require.Equal(t, lua.QHeld, got.State)
	require.Positive(t, got.Now)
	tokA := got.Token

	// c arrives first with the larger ticket, b second with the smaller.
	ec, eb := r.entry("c"), r.entry("b")
	require.Equal(t, lua.QWaiting, r.try("c", ec, "try").State)
	require.Equal(t, lua.QWaiting, r.join("c", ec, 200, 0).State)
	require.Equal(t, lua.QWaiting, r.join("b", eb, 100, 0).State)
	// C is the largest ticket written.
	require.EqualValues(t, 200, r.try("d", r.entry("d"), "try").Ticket)

	// A release hands the lock to b, the smaller ticket, by push.
	require.Equal(t, lua.QReply{State: lua.QHeld}, r.release("a", ea, tokA, true))
	require.Equal(t, ea, r.message(), "the holder without a ticket was asked to yield")
	require.Contains(t, r.grant(), eb+" ")
	rb := r.join("b", eb, 100, 0)
	require.Equal(t, lua.QHeld, rb.State)
	require.Greater(t, rb.Token, tokA)
	require.False(t, rb.Lower)

	// A join of a's released call is refused: it is buried.
	require.Equal(t, lua.QGone, r.join("a", ea, 50, 0).State)
}

func TestAQuorumHolderWithALargerKeyIsAskedToYield(t *testing.T) {
	r := newQuorumRig(t)
	// x takes the free master by its try, then joins with ticket 300.
	ex := r.entry("x")
	tx := r.try("x", ex, "try")
	require.Equal(t, lua.QHeld, tx.State)
	require.Equal(t, lua.QHeld, r.join("x", ex, 300, 0).State)

	// w, with the smaller ticket, joins: x is asked to yield, once.
	ew := r.entry("w")
	require.Equal(t, lua.QWaiting, r.join("w", ew, 100, 0).State)
	require.Equal(t, ex, r.message(), "an inquiry is the holder's entry alone")
	jx := r.join("x", ex, 300, 0)
	require.Equal(t, lua.QHeld, jx.State)
	require.True(t, jx.Lower)

	// x yields: w is handed the master, and x waits behind it by ticket.
	yx := r.join("x", ex, 300, tx.Token)
	require.Equal(t, lua.QWaiting, yx.State)
	require.Contains(t, r.message(), ew+" ")
	jw := r.join("w", ew, 100, 0)
	require.Equal(t, lua.QHeld, jw.State)
	require.False(t, jw.Lower)
	require.Greater(t, jw.Token, tx.Token)

	// A stale yield (a token x no longer holds under) changes nothing.
	require.Equal(t, lua.QWaiting, r.join("x", ex, 300, tx.Token).State)
	require.Equal(t, lua.QHeld, r.join("w", ew, 100, 0).State)
}

func TestAQuorumCommitRaisesTheCounter(t *testing.T) {
	r := newQuorumRig(t)
	ea := r.entry("a")
	ta := r.try("a", ea, "try")
	ctx := context.Background()
	far := ta.Token + 1_000_000
	rep, err := lua.ReadQCommit(lua.Classic.QCommit(r.k, "a", far, 60000, 30000, 0).Run(ctx, r.rdb))
	require.NoError(t, err)
	require.Equal(t, lua.QReply{State: lua.QHeld, Token: far}, rep)
	// A smaller token than the hold's is refused with the hold's.
	rep, err = lua.ReadQCommit(lua.Classic.QCommit(r.k, "a", ta.Token, 60000, 30000, 0).Run(ctx, r.rdb))
	require.NoError(t, err)
	require.Equal(t, lua.QReply{State: lua.QAbove, Token: far}, rep)
	// Another owner is told the counter.
	rep, err = lua.ReadQCommit(lua.Classic.QCommit(r.k, "b", far, 60000, 30000, 0).Run(ctx, r.rdb))
	require.NoError(t, err)
	require.Equal(t, lua.QWaiting, rep.State)
	require.Equal(t, far, rep.Counter)

	// The next grant here is above the committed token.
	r.release("a", ea, far, true)
	tb := r.try("b", r.entry("b"), "try")
	require.Equal(t, lua.QHeld, tb.State)
	require.Greater(t, tb.Token, far)
}

// A token or a ticket drawn on a master whose clock reads an hour later
// than this one's is kept here until this clock has passed it, not only
// for the lease or the waiter TTL: a grant here after the lock idled is
// still above it.
func TestAQuorumCounterRaisedAboveTheClockOutlastsIt(t *testing.T) {
	r := newQuorumRig(t)
	ctx := context.Background()
	ahead := int64(time.Hour / time.Microsecond)
	kept := func(key string) time.Duration {
		t.Helper()
		return r.rdb.PTTL(ctx, key).Val()
	}
	ea := r.entry("a")
	ta := r.try("a", ea, "try")
	far := ta.Token + ahead
	rep, err := lua.ReadQCommit(lua.Classic.QCommit(r.k, "a", far, 60000, 30000, 0).Run(ctx, r.rdb))
	require.NoError(t, err)
	require.Equal(t, lua.QHeld, rep.State)
	require.Greater(t, kept(r.k.Token), 59*time.Minute, "the commit")
	r.release("a", ea, far, true)
	require.Greater(t, kept(r.k.Token), 59*time.Minute, "the release's write-back")

	tb := r.try("b", r.entry("b"), "try")
	require.Equal(t, lua.QHeld, tb.State)
	require.Greater(t, tb.Token, far)
	require.Greater(t, kept(r.k.Token), 59*time.Minute, "a grant above the clock")

	r.join("c", r.entry("c"), ta.Now+ahead, 0)
	require.Greater(t, kept(r.k.Ticket), 59*time.Minute, "a ticket")
}

func TestAQuorumReentryCountsOnceAndReleasesLevelByLevel(t *testing.T) {
	r := newQuorumRig(t)
	ea := r.entry("a")
	require.Equal(t, 1, r.try("a", ea, "try").Count)
	// A try sent again under the same entry claims, counting nothing.
	require.Equal(t, 1, r.try("a", ea, "try").Count)
	call := queue.NewID()
	enter := func() lua.QReply {
		rep, err := lua.ReadQTry(lua.Classic.QTry(r.k, call, "a", r.entry("a"), 60000, 30000, "reenter", 20000, 0).Run(context.Background(), r.rdb))
		require.NoError(t, err)
		return rep
	}
	require.Equal(t, 2, enter().Count)
	require.Equal(t, 2, enter().Count, "a re-sent re-entry answers from its receipt")
	// A re-entry of an owner that holds nothing takes nothing.
	rep, err := lua.ReadQTry(lua.Classic.QTry(r.k, queue.NewID(), "b", r.entry("b"), 60000, 30000, "reenter", 20000, 0).Run(context.Background(), r.rdb))
	require.NoError(t, err)
	require.Equal(t, lua.QWaiting, rep.State)

	require.Equal(t, lua.QReply{State: lua.QHeld, Count: 1}, r.release("a", ea, 0, false))
	require.Equal(t, lua.QReply{State: lua.QHeld}, r.release("a", ea, 0, true))
	// The entry's tombstone is the receipt of its last release: another
	// one answers as that one did, and does nothing.
	require.Equal(t, lua.QReply{State: lua.QHeld}, r.release("a", ea, 0, true))
	// Nothing is left but the counters and the tombstone, which expire.
	keys, err := r.rdb.Keys(context.Background(), r.k.Lock+"*").Result()
	require.NoError(t, err)
	for _, k := range keys {
		ttl, err := r.rdb.PTTL(context.Background(), k).Result()
		require.NoError(t, err)
		require.Positive(t, ttl, k)
	}
}

func TestAQuorumTryNeverPassesAWaiter(t *testing.T) {
	r := newQuorumRig(t)
	ea := r.entry("a")
	ta := r.try("a", ea, "try")
	ew := r.entry("w")
	require.Equal(t, lua.QWaiting, r.join("w", ew, 100, 0).State)
	r.release("a", ea, ta.Token, true)
	require.Contains(t, r.grant(), ew+" ")
	require.Equal(t, lua.QWaiting, r.try("z", r.entry("z"), "try").State)
	// Cancel gives back the hand-over and buries the call.
	dropped, err := lua.ReadFlag(lua.Classic.QCancel(r.k, ew, 30000, 20000, 0).Run(context.Background(), r.rdb))
	require.NoError(t, err)
	require.True(t, dropped)
	require.Equal(t, lua.QGone, r.join("w", ew, 100, 0).State)
	require.Equal(t, lua.QHeld, r.try("z", r.entry("z"), "try").State)
}

// A quorum master draws K + 1 while it has a counter K, whatever its
// clock, so that masters whose counters are equal draw equal tokens; a
// master with no counter (it expired, or the master lost its data) draws
// its clock's term, which a skewed clock moves.
func TestAQuorumTokenIsTheCounterNextOrTheClockTerm(t *testing.T) {
	r := newQuorumRig(t)
	ctx := context.Background()
	ea := r.entry("a")
	plain := r.try("a", ea, "try")
	r.release("a", ea, 0, true)
	skew := int64(time.Hour / time.Microsecond)
	try := func(owner, entry string) lua.QReply {
		t.Helper()
		rep, err := lua.ReadQTry(lua.Classic.QTry(r.k, queue.NewID(), owner, entry, 60000, 30000, "try", 20000, skew).Run(ctx, r.rdb))
		require.NoError(t, err)
		require.Equal(t, lua.QHeld, rep.State)
		return rep
	}
	eb := r.entry("b")
	next := try("b", eb)
	require.Equal(t, plain.Token+1, next.Token, "the counter's next, not the skewed clock's term")
	require.Greater(t, next.Now, plain.Now+skew-int64(time.Minute/time.Microsecond), "the answer carries the skewed clock")
	r.release("b", eb, 0, true)

	require.NoError(t, r.rdb.Del(ctx, r.k.Token).Err()) // as when K expires
	fresh := try("c", r.entry("c"))
	require.Greater(t, fresh.Token, plain.Token+skew-int64(time.Minute/time.Microsecond), "no counter: the skewed clock's term")
}
