package queue_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/fairlock/fairlock/queue"
)

// A release that hands the lock to a waiter of the releasing Client (the
// same tag) publishes nothing and answers the wake message, which the
// Client then hands to its waiter; a re-sent release answers it again. A
// hand-over to another Client's waiter is published as before.
func TestAReleaseHandsOffToAWaiterOfItsOwnClientWithoutPublishing(t *testing.T) {
	srv, err := redistest.Start()
	require.NoError(t, err)
	t.Cleanup(srv.Stop)
	r := newRig(t, srv.Addr, redistest.Prefix(t), 20_000)
	ctx := context.Background()
	const lease, ttl = 60_000, 30_000
	const own, other = "0a1b2c3d", "99999999"
	entry := func(id, tag, owner string) string {
		return queue.Entry("00000000000000"+id+tag+queue.WakeVersion, lease*time.Millisecond, owner)
	}
	h, a, b := entry("01", own, "h"), entry("0a", own, "a"), entry("0b", other, "b")
	var rep queue.Reply
	rep, err = r.acquire(ctx, "c1", "h", h, lease, ttl, queue.ModeTry)
	require.NoError(t, err)
	require.True(t, rep.Granted)
	for i, e := range []string{a, b} {
		rep, err := r.acquire(ctx, "c"+strconv.Itoa(i+2), strings.Split(e, ":")[2], e, lease, ttl, queue.ModeWait)
		require.NoError(t, err)
		require.True(t, rep.Joined)
	}
	_, _, err = r.state(ctx) // drain the channel
	require.NoError(t, err)

	rel, err := r.release(ctx, "r1", "h", own, lease)
	require.NoError(t, err)
	require.Zero(t, rel.Count)
	require.Len(t, rel.Wakes, 1)
	fields := strings.Fields(rel.Wakes[0])
	require.Len(t, fields, 3, "<entry> <token> <µs>: %q", rel.Wakes[0])
	require.Equal(t, a, fields[0], "handed to the head, a waiter of the releasing Client")
	s, msgs, err := r.state(ctx)
	require.NoError(t, err)
	require.Empty(t, msgs, "nothing published for a local hand-off")
	require.NotNil(t, s.Hold)
	require.Equal(t, "a", s.Hold.Owner)
	require.Equal(t, fields[1], strconv.FormatInt(s.Hold.Token, 10))
	at, err := strconv.ParseInt(fields[2], 10, 64)
	require.NoError(t, err)
	require.InDelta(t, s.Now, at/1000, 1000, "the server's time of the hand-over, in µs")

	again, err := r.release(ctx, "r1", "h", own, lease)
	require.NoError(t, err)
	require.Equal(t, rel, again, "a re-sent release answers the same wake message")

	rel, err = r.release(ctx, "r2", "a", own, lease)
	require.NoError(t, err)
	require.Equal(t, queue.Released{}, rel, "b waits in another Client: published, not answered")
	_, msgs, err = r.state(ctx)
	require.NoError(t, err)
	require.Len(t, msgs, 1)
	require.True(t, strings.HasPrefix(msgs[0], b+" "), "%q", msgs[0])
}
