package queue_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/fairlock/fairlock/queue"
)

// Every script that hands the lock over, run by a Redis 7 ACL user who may
// not PUBLISH on the wake channel: the script completes every write the
// model makes (the state compared in full, receipts included), sends no
// wake message, and answers with an error reply that starts with NOPERM.
func TestRefusedPublishLeavesTheWholeStateChangeAndSaysNOPERM(t *testing.T) {
	srv, err := redistest.Start()
	require.NoError(t, err)
	t.Cleanup(srv.Stop)
	ctx := context.Background()
	require.NoError(t, srv.Client(t).Do(ctx, "ACL", "SETUSER", "nopub", "on", ">pw", "~*", "resetchannels", "+@all").Err())
	user := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: "nopub", Password: "pw"})
	t.Cleanup(func() { _ = user.Close() })

	const lease, ttl = 60_000, 30_000
	entry := func(id, owner string) string {
		return queue.Entry("00000000000000"+id, lease*time.Millisecond, owner)
	}
	acquire := func(id, owner, mode string) call {
		return call{kind: opPoll, id: "call-" + id, owner: owner, entry: entry(id, owner), lease: lease, ttl: ttl, mode: mode}
	}
	release := func(id, owner string) call {
		return call{kind: opRelease, id: "call-" + id, owner: owner, lease: lease}
	}
	cancel := func(id, owner string) call {
		return call{kind: opCancel, owner: owner, entry: entry(id, owner)}
	}
	// h holds the lock, a and b wait in line.
	setup := []call{acquire("01", "h", queue.ModeTry), acquire("0a", "a", queue.ModeWait), acquire("0b", "b", queue.ModeWait)}

	for _, tt := range []struct {
		name    string
		before  []call // run as the default user, after the setup
		expire  bool   // then the hold's lease runs out
		refused call   // run as the user who may not publish
		owner   string // who holds the lock after it
	}{
		{name: "release", refused: release("02", "h"), owner: "a"},
		{name: "forceunlock", refused: call{kind: opForce}, owner: "a"},
		{name: "cancel of a racing hand-over", before: []call{release("02", "h")}, refused: cancel("0a", "a"), owner: "b"},
		{name: "cancel with the lock free", expire: true, refused: cancel("0b", "b"), owner: "a"},
		{name: "acquire in wait mode with the lock free", expire: true, refused: acquire("0c", "c", queue.ModeWait), owner: "a"},
		{name: "acquire in try mode with the lock free", expire: true, refused: acquire("0c", "c", queue.ModeTry), owner: "a"},
		{name: "re-entry with the lock free", expire: true, refused: acquire("0d", "h", queue.ModeReenter), owner: "a"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t, srv.Addr, redistest.Prefix(t), receiptTTL*1000)
			now, err := r.now(ctx)
			require.NoError(t, err)
			d := newDiffer(t, r, newWorld(1000, true, "lock"), now, 1000, "a refused PUBLISH")
			for _, c := range append(setup, tt.before...) {
				d.step(c)
			}
			if tt.expire {
				// The hold's lease ran out (expiry runs no script).
				d.log = append(d.log, "the hold expires")
				require.NoError(t, r.rdb.Del(ctx, r.keys.Lock).Err())
				d.model(0).ExpireHold()
			}

			asUser := *r
			asUser.rdb = user
			res, err := d.apply(&asUser, tt.refused)
			var rerr redis.Error
			require.True(t, errors.As(err, &rerr), "a server error reply, not %v", err)
			prefix := "NOPERM fairlock: state changed, but PUBLISH to " + r.keys.Wake + " was refused: "
			require.True(t, strings.HasPrefix(err.Error(), prefix), "%q", err)
			require.Greater(t, len(err.Error()), len(prefix), "the server's message follows")
			t.Logf("%s (in place of %+v)", err, res.want)
			d.compare(tt.refused, res, true)
			require.Equal(t, tt.owner, d.model(0).State().Hold.Owner)
		})
	}
}
