package fair

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock/internal/errs"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/fairlock/fairlock/queue"
)

// rig runs the scripts against miniredis with a clock the test moves.
type rig struct {
	t   *testing.T
	mr  *miniredis.Miniredis
	rdb *redis.Client
	l   *Mutex
	now time.Time
	ps  *redis.PubSub
}

const (
	rigLease = 30 * time.Second
	rigTTL   = 9 * time.Second
)

func newRig(t *testing.T) *rig {
	mr := miniredis.RunT(t)
	now := time.UnixMilli(1_700_000_000_000)
	mr.SetTime(now)
	mr.ClockTTL(true)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	e := mustEngine(t, rdb, Config{WaiterTTL: rigTTL, CallTimeout: 5 * time.Second,
		Heartbeat: time.Second, Logger: slog.New(slog.DiscardHandler)})
	keys, err := queue.For("p", "lock")
	require.NoError(t, err)
	ps := rdb.Subscribe(context.Background(), keys.Wake)
	_, err = ps.Receive(context.Background())
	require.NoError(t, err)
	t.Cleanup(func() { _ = ps.Close() })
	return &rig{t: t, mr: mr, rdb: rdb, l: e.Mutex(keys), now: now, ps: ps}
}

func (r *rig) advance(d time.Duration) {
	r.now = r.now.Add(d)
	r.mr.SetTime(r.now)
}

// clockToken is the token of a fresh grant at the rig's clock while the
// counter is behind it: the server's time in ms times 1000.
func (r *rig) clockToken() int64 { return r.now.UnixMilli() * 1000 }

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func entry(id string, owner string) string {
	return queue.Entry(id+"000000000000000"[:queue.WaiterIDLen-len(id)], rigLease, owner)
}

func (r *rig) acquire(owner, e, mode string) reply {
	r.t.Helper()
	rep, err := r.l.acquire(context.Background(), owner, e, rigLease, mode)
	require.NoError(r.t, err)
	r.check()
	return rep
}

func (r *rig) release(owner string) int {
	r.t.Helper()
	n, err := r.l.release(context.Background(), owner, rigLease)
	require.NoError(r.t, err)
	r.check()
	return n
}

// check asserts the invariants that hold after every script: the queue
// and the deadline set hold the same entries, no entry twice, and a free
// lock has no live waiter at the head.
func (r *rig) check() {
	r.t.Helper()
	ctx := context.Background()
	q := r.queue()
	members := r.rdb.ZRange(ctx, r.l.keys.Deadline, 0, -1).Val()
	require.ElementsMatch(r.t, q, members, "queue and deadlines differ")
	seen := map[string]bool{}
	for _, e := range q {
		require.False(r.t, seen[e], "entry %s queued twice", e)
		seen[e] = true
	}
	if len(q) > 0 && r.rdb.Exists(ctx, r.l.keys.Lock).Val() == 0 {
		d := r.rdb.ZScore(ctx, r.l.keys.Deadline, q[0]).Val()
		require.LessOrEqual(r.t, int64(d), r.now.UnixMilli(), "free lock with a live head")
	}
}

func (r *rig) holder() (owner string, count string, entry string) {
	v := r.rdb.HMGet(context.Background(), r.l.keys.Lock, "owner", "count", "entry").Val()
	o, _ := v[0].(string)
	c, _ := v[1].(string)
	e, _ := v[2].(string)
	return o, c, e
}

func (r *rig) queue() []string {
	return r.rdb.LRange(context.Background(), r.l.keys.Queue, 0, -1).Val()
}

func (r *rig) pttl() time.Duration {
	return r.rdb.PTTL(context.Background(), r.l.keys.Lock).Val()
}

// message returns the next wake message.
func (r *rig) message() string {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	m, err := r.ps.ReceiveMessage(ctx)
	require.NoError(r.t, err)
	return m.Payload
}

func TestReleaseHandsOverToHeadAndPublishesItsToken(t *testing.T) {
	r := newRig(t)
	require.True(t, r.acquire("h", entry("a", "h"), modeTry).granted)
	a, b := entry("b", "wa"), entry("c", "wb")
	require.False(t, r.acquire("wa", a, modeWait).granted)
	require.False(t, r.acquire("wb", b, modeWait).granted)
	require.Equal(t, []string{a, b}, r.queue())

	require.Equal(t, 0, r.release("h"))
	owner, count, e := r.holder()
	require.Equal(t, "wa", owner, "the lock is never free between two holders")
	require.Equal(t, "1", count)
	require.Equal(t, a, e)
	tok := r.clockToken() + 1 // within the ms of h's grant: the counter + 1
	require.Equal(t, a+" "+itoa(tok), r.message())
	require.Equal(t, []string{b}, r.queue())
	// The hand-over lasts the lease but no longer than the waiter deadline.
	require.Equal(t, rigTTL, r.pttl())

	// The head missed the push: its next poll claims the hold, count 1.
	rep := r.acquire("wa", a, modeWait)
	require.True(t, rep.granted)
	require.Equal(t, tok, rep.token)
	require.Equal(t, 1, rep.count)
	require.Equal(t, rigLease, r.pttl())
}

func TestDeadHeadIsPrunedAtItsDeadline(t *testing.T) {
	r := newRig(t)
	require.True(t, r.acquire("h", entry("a", "h"), modeTry).granted)
	dead, live := entry("b", "dead"), entry("c", "live")
	require.False(t, r.acquire("dead", dead, modeWait).granted)
	require.False(t, r.acquire("live", live, modeWait).granted)

	// The live waiter heartbeats; the dead one does not.
	for range 4 {
		r.advance(rigTTL / 3)
		require.False(t, r.acquire("live", live, modeWait).granted)
	}
	require.Equal(t, 0, r.release("h"))
	owner, _, _ := r.holder()
	require.Equal(t, "live", owner, "the dead head was pruned past its deadline")
	require.Empty(t, r.queue())
	require.Zero(t, r.rdb.ZCard(context.Background(), r.l.keys.Deadline).Val())
}

func TestDeadHeadHandedTheLockExpiresAtItsDeadline(t *testing.T) {
	r := newRig(t)
	require.True(t, r.acquire("h", entry("a", "h"), modeTry).granted)
	dead, live := entry("b", "dead"), entry("c", "live")
	require.False(t, r.acquire("dead", dead, modeWait).granted)
	r.advance(time.Second)
	rep := r.acquire("live", live, modeWait)
	require.False(t, rep.granted)

	require.Equal(t, 0, r.release("h"))
	owner, _, _ := r.holder()
	require.Equal(t, "dead", owner, "still within its deadline: handed over")
	require.Equal(t, rigTTL-time.Second, r.pttl())

	// The live waiter's hint never exceeds the hold's expiry.
	rep = r.acquire("live", live, modeWait)
	require.False(t, rep.granted)
	require.LessOrEqual(t, rep.hint, rigTTL/3)
	r.advance(rigTTL - time.Second)
	rep = r.acquire("live", live, modeWait)
	require.True(t, rep.granted, "the dead head's hold expired at its deadline")
}

func TestWaitHintIsBoundedByLeaseAndHeartbeat(t *testing.T) {
	r := newRig(t)
	rep, err := r.l.acquire(context.Background(), "h", entry("a", "h"), 2*time.Second, modeTry)
	require.NoError(t, err)
	require.True(t, rep.granted)
	rep = r.acquire("w", entry("b", "w"), modeWait)
	require.Equal(t, 2*time.Second+time.Millisecond, rep.hint, "wake when the hold expires")
	r.advance(2 * time.Second)
	rep = r.acquire("x", entry("c", "x"), modeWait)
	require.False(t, rep.granted, "the free lock went to the head of the line")
	owner, _, _ := r.holder()
	require.Equal(t, "w", owner)
	require.LessOrEqual(t, rep.hint, rigTTL/3)
}

func TestTryModeNeverEnqueuesNorJumpsTheLine(t *testing.T) {
	r := newRig(t)
	require.True(t, r.acquire("h", entry("a", "h"), modeTry).granted)
	require.False(t, r.acquire("t", entry("b", "t"), modeTry).granted)
	require.Empty(t, r.queue())

	w := entry("c", "w")
	require.False(t, r.acquire("w", w, modeWait).granted)
	require.NoError(t, r.rdb.Del(context.Background(), r.l.keys.Lock).Err()) // lease ran out
	require.False(t, r.acquire("t", entry("d", "t"), modeTry).granted)
	owner, _, _ := r.holder()
	require.Equal(t, "w", owner)
	require.Equal(t, w+" "+itoa(r.clockToken()+1), r.message())
}

func TestResentCallsCountOnce(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	first, err := r.l.acquireCall(ctx, "call1", "o", entry("a", "o"), rigLease, modeTry)
	require.NoError(t, err)
	again, err := r.l.acquireCall(ctx, "call1", "o", entry("a", "o"), rigLease, modeTry)
	require.NoError(t, err)
	require.Equal(t, first, again)
	_, count, _ := r.holder()
	require.Equal(t, "1", count, "a re-sent grant is not a re-entry")

	_, err = r.l.acquireCall(ctx, "call2", "o", entry("b", "o"), rigLease, modeTry)
	require.NoError(t, err)
	rep, err := r.l.acquireCall(ctx, "call2", "o", entry("b", "o"), rigLease, modeTry)
	require.NoError(t, err)
	require.Equal(t, 2, rep.count, "a re-sent re-entry counts once")

	n, err := r.l.releaseCall(ctx, "call3", "o", rigLease, r.l.e.receiptTTL())
	require.NoError(t, err)
	require.Equal(t, 1, n)
	n, err = r.l.releaseCall(ctx, "call3", "o", rigLease, r.l.e.receiptTTL())
	require.NoError(t, err)
	require.Equal(t, 1, n, "a re-sent release releases once")

	n, err = r.l.releaseCall(ctx, "call4", "o", rigLease, r.l.e.receiptTTL())
	require.NoError(t, err)
	require.Equal(t, 0, n)
	n, err = r.l.releaseCall(ctx, "call4", "o", rigLease, r.l.e.receiptTTL())
	require.NoError(t, err)
	require.Equal(t, 0, n, "a re-sent final release still answers released, not 'not held'")

	// Receipts expire.
	r.advance(2 * 5 * time.Second)
	require.Zero(t, r.rdb.Exists(ctx, r.l.keys.Call("call1"), r.l.keys.Call("call4")).Val())
}

func TestCancelGivesBackARacingHandOver(t *testing.T) {
	r := newRig(t)
	require.True(t, r.acquire("h", entry("a", "h"), modeTry).granted)
	a, b := entry("b", "wa"), entry("c", "wb")
	require.False(t, r.acquire("wa", a, modeWait).granted)
	require.False(t, r.acquire("wb", b, modeWait).granted)
	require.Equal(t, 0, r.release("h"))
	require.Equal(t, a+" "+itoa(r.clockToken()+1), r.message())

	// wa gave up as the lock was handed to it.
	gaveBack, err := r.l.cancel(context.Background(), "wa", a)
	require.NoError(t, err)
	require.True(t, gaveBack)
	owner, _, _ := r.holder()
	require.Equal(t, "wb", owner)
	require.Equal(t, b+" "+itoa(r.clockToken()+2), r.message())

	// A re-sent cancel does nothing more.
	gaveBack, err = r.l.cancel(context.Background(), "wa", a)
	require.NoError(t, err)
	require.False(t, gaveBack)
	owner, _, _ = r.holder()
	require.Equal(t, "wb", owner)
}

func TestRenewOnlyExtendsTheOwnersHold(t *testing.T) {
	r := newRig(t)
	require.True(t, r.acquire("h", entry("a", "h"), modeTry).granted)
	r.advance(10 * time.Second)
	ok, err := r.l.renew(context.Background(), "other", rigLease)
	require.NoError(t, err)
	require.False(t, ok)
	require.Equal(t, rigLease-10*time.Second, r.pttl())
	ok, err = r.l.renew(context.Background(), "h", rigLease)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, rigLease, r.pttl())
}

func TestFreshGrantTokenIsTheClockOrTheCounterPlusOne(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	grant := func() int64 {
		t.Helper()
		rep := r.acquire("o", entry("a", "o"), modeTry)
		require.True(t, rep.granted)
		require.Equal(t, 0, r.release("o"))
		require.Equal(t, itoa(rep.token), r.rdb.Get(ctx, r.l.keys.Token).Val(), "the token becomes the counter")
		return rep.token
	}
	require.Equal(t, r.clockToken(), grant(), "the server's time in ms times 1000")
	require.Equal(t, r.clockToken()+1, grant(), "within the same ms: the counter + 1")
	r.advance(time.Millisecond)
	require.Equal(t, r.clockToken(), grant(), "one ms later: the clock again")

	// A counter ahead of the clock goes on by one, digit for digit.
	require.NoError(t, r.rdb.Set(ctx, r.l.keys.Token, "1800000000000122", 0).Err())
	rep := r.acquire("o", entry("b", "o"), modeTry)
	require.Equal(t, int64(1_800_000_000_000_123), rep.token)
	require.Equal(t, "1800000000000123", r.rdb.HGet(ctx, r.l.keys.Lock, "token").Val())
	require.Equal(t, 0, r.release("o"))

	// A clock past the counter wins again.
	r.advance(time.Duration(1_900_000_000_000-r.now.UnixMilli()) * time.Millisecond)
	require.Equal(t, int64(1_900_000_000_000_000), grant())
}

// A Redis 7 ACL user without permission on the wake channel cannot
// PUBLISH. The release still hands the lock over completely, and the
// caller learns that the wake message was not sent.
func TestRefusedPublishReachesTheCallerAsNOPERM(t *testing.T) {
	srv, err := redistest.Start()
	require.NoError(t, err)
	t.Cleanup(srv.Stop)
	ctx := context.Background()
	admin := srv.Client(t)
	require.NoError(t, admin.Do(ctx, "ACL", "SETUSER", "nopub", "on", ">pw", "~*", "resetchannels", "+@all").Err())
	user := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: "nopub", Password: "pw"})
	t.Cleanup(func() { _ = user.Close() })
	e := mustEngine(t, user, Config{WaiterTTL: rigTTL, CallTimeout: 5 * time.Second,
		Heartbeat: time.Second, Logger: slog.New(slog.DiscardHandler)})
	keys, err := queue.For(redistest.Prefix(t), "lock")
	require.NoError(t, err)
	l := e.Mutex(keys)

	rep, err := l.acquire(ctx, "h", entry("a", "h"), rigLease, modeTry)
	require.NoError(t, err)
	require.True(t, rep.granted)
	w := entry("b", "w")
	rep, err = l.acquire(ctx, "w", w, rigLease, modeWait)
	require.NoError(t, err)
	require.False(t, rep.granted)

	n, err := l.release(ctx, "h", rigLease)
	var rerr redis.Error
	require.True(t, errors.As(err, &rerr), "a server error reply, not %v", err)
	require.ErrorIs(t, err, errs.NoPermission)
	require.True(t, publishRefused(err), "%q", err)
	prefix := "NOPERM fairlock: state changed, but PUBLISH to " + keys.Wake + " was refused: "
	require.True(t, strings.HasPrefix(rerr.Error(), prefix), "%q", rerr)
	require.Greater(t, len(rerr.Error()), len(prefix), "the server's message follows")
	require.Zero(t, n)

	hold := admin.HGetAll(ctx, keys.Lock).Val()
	require.Equal(t, "w", hold["owner"], "the waiter is the owner")
	require.Equal(t, w, hold["entry"])
	require.Equal(t, hold["token"], admin.Get(ctx, keys.Token).Val())
	require.Empty(t, admin.LRange(ctx, keys.Queue, 0, -1).Val(), "the queue was popped")
	require.Zero(t, admin.ZCard(ctx, keys.Deadline).Val())
	var answers []string
	for _, k := range admin.Keys(ctx, keys.Call("*")).Val() {
		answers = append(answers, admin.Get(ctx, k).Val())
	}
	require.Contains(t, answers, "0", "the release's receipt was written")

	// The waiter, which heard nothing, claims the hold at its next poll.
	rep, err = l.acquire(ctx, "w", w, rigLease, modeWait)
	require.NoError(t, err)
	require.True(t, rep.granted)
	require.Equal(t, hold["token"], itoa(rep.token))
}

// The scripts read the server's clock only when a step needs it (a fresh
// token, a waiter's deadline, a queue head to prune): an uncontended grant
// reads it once, for its token, and its release, with nobody in line, not
// at all.
func TestScriptsReadTheClockOnlyWhenAStepNeedsIt(t *testing.T) {
	srv, err := redistest.Start()
	require.NoError(t, err)
	t.Cleanup(srv.Stop)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = rdb.Close() })
	e := mustEngine(t, rdb, Config{WaiterTTL: rigTTL, CallTimeout: 5 * time.Second})
	keys, err := queue.For("p", "lock")
	require.NoError(t, err)
	l := e.Mutex(keys)
	ctx := context.Background()
	timeCalls := func() int {
		stats, err := rdb.Info(ctx, "commandstats").Result()
		require.NoError(t, err)
		for line := range strings.Lines(stats) {
			if rest, ok := strings.CutPrefix(line, "cmdstat_time:calls="); ok {
				n, err := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
				require.NoError(t, err)
				return n
			}
		}
		return 0
	}
	require.NoError(t, rdb.ConfigResetStat(ctx).Err())

	rep, err := l.acquire(ctx, "h", entry("1", "h"), rigLease, modeTry)
	require.NoError(t, err)
	require.True(t, rep.granted)
	require.Equal(t, 1, timeCalls(), "a fresh grant reads the clock for its token")
	_, err = l.acquire(ctx, "o", entry("2", "o"), rigLease, modeTry)
	require.NoError(t, err)
	require.Equal(t, 1, timeCalls(), "a try on a held lock needs no clock")
	n, err := l.release(ctx, "h", rigLease)
	require.NoError(t, err)
	require.Zero(t, n)
	require.Equal(t, 1, timeCalls(), "a release with nobody in line needs no clock")
}
