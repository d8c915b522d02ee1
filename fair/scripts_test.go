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

// rig runs one lock's scripts through an engine against miniredis. What
// the scripts do is checked against the reference model in package queue;
// the tests here check what the engine makes of it.
type rig struct {
	t   *testing.T
	rdb *redis.Client
	l   *Mutex
}

const (
	rigLease = 30 * time.Second
	rigTTL   = 9 * time.Second
)

func newRig(t *testing.T) *rig {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	e := mustEngine(t, rdb, Config{WaiterTTL: rigTTL, CallTimeout: 5 * time.Second,
		Heartbeat: time.Second, Logger: slog.New(slog.DiscardHandler)})
	keys, err := queue.For("p", "lock")
	require.NoError(t, err)
	return &rig{t: t, rdb: rdb, l: e.Mutex(keys)}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func entry(id string, owner string) string {
	return queue.Entry(id+"000000000000000"[:queue.WaiterIDLen-len(id)], rigLease, owner)
}

func (r *rig) acquire(owner, e, mode string) queue.Reply {
	r.t.Helper()
	rep, err := r.l.acquire(context.Background(), owner, e, rigLease, mode)
	require.NoError(r.t, err)
	return rep
}

func (r *rig) holder() (owner string, count string, entry string) {
	v := r.rdb.HMGet(context.Background(), r.l.keys.Lock, "owner", "count", "entry").Val()
	o, _ := v[0].(string)
	c, _ := v[1].(string)
	e, _ := v[2].(string)
	return o, c, e
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

	rep, err := l.acquire(ctx, "h", entry("a", "h"), rigLease, queue.ModeTry)
	require.NoError(t, err)
	require.True(t, rep.Granted)
	w := entry("b", "w")
	rep, err = l.acquire(ctx, "w", w, rigLease, queue.ModeWait)
	require.NoError(t, err)
	require.False(t, rep.Granted)

	n, err := l.release(ctx, "h", rigLease)
	var rerr redis.Error
	require.True(t, errors.As(err, &rerr), "a server error reply, not %v", err)
	require.ErrorIs(t, err, errs.ErrNoPermission)
	require.True(t, publishRefused(err), "%q", err)
	prefix := "NOPERM fairlock: state changed, but PUBLISH to " + keys.Wake + " was refused: "
	require.True(t, strings.HasPrefix(rerr.Error(), prefix), "%q", rerr)
	require.Greater(t, len(rerr.Error()), len(prefix), "the server's message follows")
	require.Zero(t, n)

	// The lock was handed over all the same (queue's
	// TestRefusedPublishLeavesTheWholeStateChangeAndSaysNOPERM compares
	// every key with the model): the waiter, which heard nothing, claims
	// the hold at its next poll.
	token := admin.HGet(ctx, keys.Lock, "token").Val()
	rep, err = l.acquire(ctx, "w", w, rigLease, queue.ModeWait)
	require.NoError(t, err)
	require.True(t, rep.Granted)
	require.Equal(t, token, itoa(rep.Token))
}
