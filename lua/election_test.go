package lua_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/fairlock/fairlock/lua"
	"github.com/fairlock/fairlock/queue"
)

// electionRig runs the scripts on one election of a real server, and
// listens on its leader channel.
type electionRig struct {
	t      *testing.T
	rdb    *redis.Client
	k      queue.Keys
	leader *redis.PubSub
	n      int
}

func newElectionRig(t *testing.T) *electionRig {
	k, err := queue.Election(redistest.Prefix(t), "e")
	require.NoError(t, err)
	r := &electionRig{t: t, rdb: redistest.Shared(t).Client(t), k: k}
	r.leader = r.rdb.Subscribe(context.Background(), k.Leader)
	_, err = r.leader.Receive(context.Background())
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.leader.Close() })
	return r
}

// candidate returns a fresh candidate entry of owner, with a tag.
func (r *electionRig) candidate(owner string) string {
	r.n++
	return queue.Entry(fmt.Sprintf("%016x", r.n)+"0000abcd"+queue.CandidateVersion, time.Minute, owner)
}

// campaign sends owner's candidate entry with value in mode.
func (r *electionRig) campaign(owner, entry, mode, value string) queue.Reply {
	r.t.Helper()
	rep, err := lua.ReadAcquire(lua.Classic.Campaign(r.k, queue.NewID(), owner, entry, 60000, 30000, mode, 20000, value).Run(context.Background(), r.rdb))
	require.NoError(r.t, err)
	return rep
}

func (r *electionRig) release(owner string) int {
	r.t.Helper()
	rep, err := lua.ReadRelease(lua.Classic.Release(r.k, queue.NewID(), owner, "", 60000, 20000).Run(context.Background(), r.rdb))
	require.NoError(r.t, err)
	return rep.Count
}

// hold returns the hold's owner, entry and value ("" for each when free).
func (r *electionRig) hold() (owner, entry, value string) {
	r.t.Helper()
	v, err := r.rdb.HMGet(context.Background(), r.k.Lock, "owner", "entry", "value").Result()
	require.NoError(r.t, err)
	owner, _ = v[0].(string)
	entry, _ = v[1].(string)
	value, _ = v[2].(string)
	return owner, entry, value
}

// values returns the values waiting beside the line.
func (r *electionRig) values() map[string]string {
	r.t.Helper()
	m, err := r.rdb.HGetAll(context.Background(), r.k.Values).Result()
	require.NoError(r.t, err)
	return m
}

// told waits for one message on the leader channel.
func (r *electionRig) told() {
	r.t.Helper()
	select {
	case m := <-r.leader.Channel():
		require.Equal(r.t, "leader", m.Payload)
	case <-time.After(5 * time.Second):
		r.t.Fatal("the leader channel was not told")
	}
}

// quiet requires that nothing more was told on the leader channel.
func (r *electionRig) quiet() {
	r.t.Helper()
	require.NoError(r.t, r.rdb.Ping(context.Background()).Err()) // anything published before has arrived by its answer
	select {
	case m := <-r.leader.Channel():
		r.t.Fatalf("told %q on the leader channel", m.Payload)
	case <-time.After(50 * time.Millisecond):
	}
}

func TestACandidateLeadsWithTheValueItCampaignedWith(t *testing.T) {
	r := newElectionRig(t)
	a := r.candidate("a")
	rep := r.campaign("a", a, queue.ModeTry, "alpha")
	require.True(t, rep.Granted)
	owner, entry, value := r.hold()
	require.Equal(t, []string{"a", a, "alpha"}, []string{owner, entry, value})
	r.told()

	// The next candidates wait with their values beside the line.
	b, c := r.candidate("b"), r.candidate("c")
	require.False(t, r.campaign("b", b, queue.ModeWait, "beta").Granted)
	require.False(t, r.campaign("c", c, queue.ModeWait, "gamma").Granted)
	require.Equal(t, map[string]string{b: "beta", c: "gamma"}, r.values())
	r.quiet()

	// A resignation hands the leadership on with the next one's value,
	// told once.
	require.Equal(t, 0, r.release("a"))
	owner, entry, value = r.hold()
	require.Equal(t, []string{"b", b, "beta"}, []string{owner, entry, value})
	require.Equal(t, map[string]string{c: "gamma"}, r.values())
	r.told()
	r.quiet()

	// A candidate that gives up takes its value away.
	require.NoError(t, lua.Classic.Cancel(r.k, "c", c).Run(context.Background(), r.rdb).Err())
	require.Empty(t, r.values())
	r.quiet()

	// The last leader's resignation leaves no leader, and says so.
	require.Equal(t, 0, r.release("b"))
	owner, _, _ = r.hold()
	require.Empty(t, owner)
	r.told()
	n, err := r.rdb.Exists(context.Background(), r.k.Values, r.k.Lock, r.k.Queue).Result()
	require.NoError(t, err)
	require.Zero(t, n, "nothing is left of the election")
}

func TestADeadCandidateLeavesNoValueBehind(t *testing.T) {
	r := newElectionRig(t)
	a, b, c := r.candidate("a"), r.candidate("b"), r.candidate("c")
	require.True(t, r.campaign("a", a, queue.ModeTry, "alpha").Granted)
	r.told()
	require.False(t, r.campaign("b", b, queue.ModeWait, "beta").Granted)
	require.False(t, r.campaign("c", c, queue.ModeWait, "gamma").Granted)
	// b dies: its deadline passes without a poll.
	require.NoError(t, r.rdb.ZAdd(context.Background(), r.k.Deadline, redis.Z{Score: 1, Member: b}).Err())
	require.Equal(t, 0, r.release("a"))
	owner, entry, value := r.hold()
	require.Equal(t, []string{"c", c, "gamma"}, []string{owner, entry, value}, "the dead head is passed over")
	require.Empty(t, r.values(), "and its value dropped")
}

func TestOnlyTheLeaderProclaims(t *testing.T) {
	r := newElectionRig(t)
	a, b := r.candidate("a"), r.candidate("b")
	require.True(t, r.campaign("a", a, queue.ModeTry, "alpha").Granted)
	r.told()
	require.False(t, r.campaign("b", b, queue.ModeWait, "beta").Granted)

	proclaim := func(owner, entry, value string) bool {
		ok, err := lua.ReadFlag(lua.Classic.Proclaim(r.k, owner, entry, value).Run(context.Background(), r.rdb))
		require.NoError(t, err)
		return ok
	}
	require.True(t, proclaim("a", a, "alpha 2"))
	_, _, value := r.hold()
	require.Equal(t, "alpha 2", value)
	r.told()

	require.False(t, proclaim("b", b, "beta 2"), "a candidate in line")
	require.False(t, proclaim("a", r.candidate("a"), "alpha 3"), "the leader's owner under another entry")
	_, _, value = r.hold()
	require.Equal(t, "alpha 2", value)
	require.Equal(t, map[string]string{b: "beta"}, r.values())
	r.quiet()
}

func TestAForcedLeadershipEndIsTold(t *testing.T) {
	r := newElectionRig(t)
	a := r.candidate("a")
	require.True(t, r.campaign("a", a, queue.ModeTry, "alpha").Granted)
	r.told()
	removed, err := lua.ReadFlag(lua.Classic.ForceUnlock(r.k).Run(context.Background(), r.rdb))
	require.NoError(t, err)
	require.True(t, removed)
	r.told()
}

func TestAMutexGrantIsNoLeadership(t *testing.T) {
	r := newElectionRig(t)
	e := queue.Entry("00000000000000010000abcd"+queue.WakeVersion, time.Minute, "m")
	require.True(t, r.campaign("m", e, queue.ModeTry, "ignored").Granted)
	_, _, value := r.hold()
	require.Empty(t, value)
	require.Equal(t, 0, r.release("m"))
	r.quiet()
}
