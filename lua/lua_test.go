package lua_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/fairlock/fairlock/lua"
	"github.com/fairlock/fairlock/queue"
)

var operations = []string{"acquire", "release", "renew", "cancel", "forceunlock", "multiacquire", "proclaim"}

func TestShardedScriptsDifferOnlyInThePublishCommand(t *testing.T) {
	for _, name := range operations {
		classic, sharded := lua.Source(name), lua.ShardedSource(name)
		if name == "renew" {
			require.Equal(t, classic, sharded, "renew publishes nothing")
			continue
		}
		cl, sl := strings.Split(classic, "\n"), strings.Split(sharded, "\n")
		require.Len(t, sl, len(cl), name)
		var changed []string
		for i := range cl {
			if cl[i] != sl[i] {
				changed = append(changed, cl[i]+" -> "+sl[i])
			}
		}
		require.Equal(t, []string{"local publish_command = 'PUBLISH' -> local publish_command = 'SPUBLISH'"}, changed, name)
	}
	require.Equal(t, "PUBLISH", lua.Classic.Command)
	require.Equal(t, "SPUBLISH", lua.Sharded.Command)
	var k queue.Keys
	require.NotEqual(t, lua.Classic.Release(k, "", "", "", 0, 0).Script.Hash(), lua.Sharded.Release(k, "", "", "", 0, 0).Script.Hash())
}

// lock is one lock's keys and a waiter queued behind a holder.
type lock struct {
	keys   queue.Keys
	holder string // owner id of the hold
	entry  string // waiter entry in line
}

// queued makes "h" the holder of a fresh lock and queues a waiter behind
// it, with the classic scripts (they write the same state as the sharded
// ones).
func queued(t *testing.T, rdb *redis.Client) lock {
	t.Helper()
	ctx := t.Context()
	keys, err := queue.For(redistest.Prefix(t), "x")
	require.NoError(t, err)
	l := lock{keys: keys, holder: "h", entry: queue.Entry("00000000000000a1", time.Minute, "w")}
	acquire := func(call, owner, entry, mode string) queue.Reply {
		rep, err := lua.ReadAcquire(lua.Classic.Acquire(keys, call, owner, entry, 60000, 30000, mode, 20000).Run(ctx, rdb))
		require.NoError(t, err)
		return rep
	}
	require.True(t, acquire("c1", "h", queue.Entry("00000000000000a0", time.Minute, "h"), queue.ModeTry).Granted)
	require.True(t, acquire("c2", "w", l.entry, queue.ModeWait).Joined)
	return l
}

// receiveOne returns the payload of the first message on ps within d, or
// "" when none arrived.
func receiveOne(t *testing.T, ps *redis.PubSub, d time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return ""
		}
		msg, err := ps.ReceiveTimeout(t.Context(), left)
		if err != nil {
			return ""
		}
		if m, ok := msg.(*redis.Message); ok {
			return m.Payload
		}
	}
}

// subscribed returns a classic and a sharded subscription of channel,
// both confirmed.
func subscribed(t *testing.T, rdb *redis.Client, channel string) (classic, sharded *redis.PubSub) {
	t.Helper()
	classic, sharded = rdb.Subscribe(t.Context(), channel), rdb.SSubscribe(t.Context(), channel)
	t.Cleanup(func() { _ = classic.Close(); _ = sharded.Close() })
	for _, ps := range []*redis.PubSub{classic, sharded} {
		msg, err := ps.ReceiveTimeout(t.Context(), 5*time.Second)
		require.NoError(t, err)
		require.IsType(t, &redis.Subscription{}, msg)
	}
	return classic, sharded
}

// Each set's wake message reaches the subscribers of its own kind only: a
// hand-over by a sharded release is delivered to SSUBSCRIBE, never to
// SUBSCRIBE, and the other way round.
func TestEachSetWakesOnlyItsOwnKindOfSubscriber(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	for _, tt := range []struct {
		name    string
		scripts *lua.Scripts
		sharded bool
	}{
		{"classic", lua.Classic, false},
		{"sharded", lua.Sharded, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			l := queued(t, rdb)
			classic, sharded := subscribed(t, rdb, l.keys.Wake)
			n, err := lua.ReadRelease(tt.scripts.Release(l.keys, "c3", l.holder, "", 60000, 20000).Run(t.Context(), rdb))
			require.NoError(t, err)
			require.Zero(t, n, "the hold is over")

			hears, deaf := classic, sharded
			if tt.sharded {
				hears, deaf = sharded, classic
			}
			got := receiveOne(t, hears, 5*time.Second)
			require.True(t, strings.HasPrefix(got, l.entry+" "), "wake message %q names the waiter", got)
			require.Empty(t, receiveOne(t, deaf, 100*time.Millisecond), "the other kind of subscriber heard it")
		})
	}
}

// A sharded script run by a user who may not SPUBLISH does every write
// and answers NOPERM naming SPUBLISH, as the classic set does for PUBLISH.
func TestRefusedSPublishSaysNOPERM(t *testing.T) {
	srv := redistest.Shared(t)
	admin := srv.Client(t)
	ctx := t.Context()
	user := redistest.Prefix(t)
	require.NoError(t, admin.Do(ctx, "ACL", "SETUSER", user, "on", ">pw", "~*", "&*", "+@all", "-spublish").Err())
	t.Cleanup(func() { _ = admin.Do(context.Background(), "ACL", "DELUSER", user).Err() })
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: user, Password: "pw"})
	t.Cleanup(func() { _ = rdb.Close() })

	l := queued(t, admin)
	_, err := lua.ReadFlag(lua.Sharded.ForceUnlock(l.keys).Run(ctx, rdb))
	require.Error(t, err)
	require.True(t, strings.HasPrefix(err.Error(), "NOPERM fairlock: state changed, but SPUBLISH to "+l.keys.Wake+" was refused: "), err.Error())
	owner, err := admin.HGet(ctx, l.keys.Lock, "owner").Result()
	require.NoError(t, err)
	require.Equal(t, "w", owner, "the waiter was handed the lock all the same")
}

// The version probe answers the server's version (Redis 7 and later).
func TestVersionScriptAnswersTheServerVersion(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	v, err := lua.ReadVersion(lua.Version().Run(t.Context(), rdb))
	require.NoError(t, err)
	require.NotEmpty(t, v)
	info, err := rdb.Info(t.Context(), "server").Result()
	require.NoError(t, err)
	require.Contains(t, info, "redis_version:"+v+"\r\n")
}
