package queue_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock/queue"
)

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// backends runs f on a rig on miniredis (gopher-lua, whose numbers print
// leniently) and on a rig on a real redis-server 7 (Lua 5.1, where
// tostring() of 1800000000000123 is "1.8000000000001e+15").
func backends(t *testing.T, f func(t *testing.T, r *rig)) {
	t.Run("miniredis", func(t *testing.T) {
		t.Parallel()
		f(t, newMiniRig(t, receiptTTL*1000))
	})
	t.Run("redis-server", func(t *testing.T) {
		t.Parallel()
		_, r := newServerRig(t, receiptTTL*1000)
		f(t, r)
	})
}

func TestTokensSurviveDigitForDigit(t *testing.T) {
	backends(t, func(t *testing.T, r *rig) {
		ctx := context.Background()
		now, err := r.now(ctx)
		require.NoError(t, err)
		// A counter ahead of the clock, so the next tokens are counter + 1:
		// 1800000000000123 while the clock reads before 2027-01-15, and a
		// value with the same low digits, ahead of the clock, afterwards.
		want := int64(1_800_000_000_000_123)
		for want <= (now+time.Hour.Milliseconds())*queue.TokensPerMs {
			want += 100_000_000_000_000
		}
		require.NoError(t, r.rdb.Set(ctx, r.keys.Token, want-1, 0).Err())

		const lease, ttl = 60_000, 30_000
		h, w := queue.Entry("000000000000000a", lease*time.Millisecond, "h"), queue.Entry("000000000000000b", lease*time.Millisecond, "w")
		rep, err := r.acquire(ctx, "grant", "h", h, lease, ttl, queue.ModeTry)
		require.NoError(t, err)
		require.Equal(t, queue.Reply{Granted: true, Token: want, Count: 1}, rep, "the reply")
		// The counter was written without an expiry, as versions before
		// expiring counters wrote it: the grant gives it one.
		require.Positive(t, r.rdb.PTTL(ctx, r.keys.Token).Val(), "the counter expires")
		rep, err = r.acquire(ctx, "grant", "h", h, lease, ttl, queue.ModeTry)
		require.NoError(t, err)
		require.Equal(t, queue.Reply{Granted: true, Token: want, Count: 1}, rep, "the reply of a re-sent call, read back from the hold")
		again := queue.Entry("000000000000000c", lease*time.Millisecond, "h")
		rep, err = r.acquire(ctx, "again", "h", again, lease, ttl, queue.ModeReenter)
		require.NoError(t, err)
		require.Equal(t, queue.Reply{Granted: true, Token: want, Count: 2}, rep, "the reply of a re-entry")
		rep, err = r.acquire(ctx, "again", "h", again, lease, ttl, queue.ModeReenter)
		require.NoError(t, err)
		require.Equal(t, queue.Reply{Granted: true, Token: want, Count: 2}, rep, "the reply of a re-sent re-entry, read back from its receipt")
		rep, err = r.acquire(ctx, "wait", "w", w, lease, ttl, queue.ModeWait)
		require.NoError(t, err)
		require.True(t, rep.Joined)
		n, err := r.release(ctx, "inner", "h", "", lease)
		require.NoError(t, err)
		require.Equal(t, queue.Released{Count: 1}, n)
		n, err = r.release(ctx, "release", "h", "", lease)
		require.NoError(t, err)
		require.Zero(t, n)
		rep, err = r.acquire(ctx, "claim", "w", w, lease, ttl, queue.ModeWait)
		require.NoError(t, err)
		require.Equal(t, queue.Reply{Granted: true, Token: want + 1, Count: 1}, rep, "the reply of a claim")

		require.Equal(t, itoa(want+1), r.rdb.HGet(ctx, r.keys.Lock, "token").Val(), "the hash field")
		require.Equal(t, itoa(want+1), r.rdb.Get(ctx, r.keys.Token).Val(), "the counter")
		require.Equal(t, itoa(want)+":2", r.rdb.Get(ctx, r.keys.Call("again")).Val(), "the receipt of a re-entry")
		_, msgs, err := r.state(ctx)
		require.NoError(t, err)
		require.Equal(t, []string{w + " " + itoa(want+1)}, msgs, "the wake message")
	})
}

func TestTokensFromTheClockSurviveDigitForDigit(t *testing.T) {
	backends(t, func(t *testing.T, r *rig) {
		ctx := context.Background()
		const lease, ttl = 60_000, 30_000
		h, w := queue.Entry("000000000000000a", lease*time.Millisecond, "h"), queue.Entry("000000000000000b", lease*time.Millisecond, "w")
		before, err := r.now(ctx)
		require.NoError(t, err)
		rep, err := r.acquire(ctx, "grant", "h", h, lease, ttl, queue.ModeTry)
		require.NoError(t, err)
		again := queue.Entry("000000000000000c", lease*time.Millisecond, "h")
		_, err = r.acquire(ctx, "again", "h", again, lease, ttl, queue.ModeReenter)
		require.NoError(t, err)
		_, err = r.acquire(ctx, "wait", "w", w, lease, ttl, queue.ModeWait)
		require.NoError(t, err)
		_, err = r.release(ctx, "inner", "h", "", lease)
		require.NoError(t, err)
		_, err = r.release(ctx, "release", "h", "", lease)
		require.NoError(t, err)
		after, err := r.now(ctx)
		require.NoError(t, err)

		// now * 1000 has 16 digits: tostring() would print it in 13 or 14.
		require.True(t, rep.Granted)
		require.GreaterOrEqual(t, rep.Token, before*queue.TokensPerMs)
		require.LessOrEqual(t, rep.Token, after*queue.TokensPerMs)
		require.Equal(t, itoa(rep.Token)+":2", r.rdb.Get(ctx, r.keys.Call("again")).Val(), "the receipt of a re-entry")
		next := r.rdb.HGet(ctx, r.keys.Lock, "token").Val()
		require.Equal(t, next, r.rdb.Get(ctx, r.keys.Token).Val(), "the hash field and the counter")
		n, err := strconv.ParseInt(next, 10, 64)
		require.NoError(t, err, "the hash field")
		require.Greater(t, n, rep.Token)
		require.LessOrEqual(t, n, max(after*queue.TokensPerMs, rep.Token+1))
		_, msgs, err := r.state(ctx)
		require.NoError(t, err)
		require.Equal(t, []string{w + " " + next}, msgs, "the wake message")
	})
}

// A restart without persistence loses the counter; the tokens after it
// still rise, because the new grants read a later clock.
func TestTokensRiseAcrossARestart(t *testing.T) {
	srv, r := newServerRig(t, receiptTTL*1000)
	ctx := context.Background()
	const lease, ttl = 60_000, 30_000
	id := 0
	grant := func() int64 {
		t.Helper()
		id++
		e := queue.Entry(strconv.FormatInt(int64(id), 16), lease*time.Millisecond, "o")
		rep, err := r.acquire(ctx, "grant"+itoa(int64(id)), "o", e, lease, ttl, queue.ModeTry)
		require.NoError(t, err)
		require.True(t, rep.Granted)
		n, err := r.release(ctx, "release"+itoa(int64(id)), "o", "", lease)
		require.NoError(t, err)
		require.Zero(t, n)
		return rep.Token
	}
	var last int64
	for range 5 {
		tok := grant()
		require.Greater(t, tok, last)
		last = tok
	}

	require.NoError(t, srv.Restart())
	require.Zero(t, r.rdb.Exists(ctx, r.keys.Token).Val(), "the counter is gone")
	tok := grant()
	require.Greater(t, tok, last, "the first token after the restart")
	require.Greater(t, grant(), tok)

	// A failover to a replica whose counter is stale: the counter goes back
	// to an older value, and the next token is still the greatest once the
	// clock reads later than the last grant's token / 1000 (a real failover
	// takes seconds; here we wait for the clock to pass that millisecond).
	last = grant()
	require.NoError(t, r.rdb.Set(ctx, r.keys.Token, tok, 0).Err())
	require.Eventually(t, func() bool {
		now, err := r.now(ctx)
		return err == nil && now*queue.TokensPerMs > last
	}, 5*time.Second, time.Millisecond)
	require.Greater(t, grant(), last, "after a stale counter")
}

// The counter expires with the hold it was taken for, also while the lock
// is still held (the holder renewed) and waited for. The tokens after it
// still rise: the hand-over and the grants after it read a later clock.
func TestTokensRiseAfterTheCounterExpiresWhileTheLockIsBusy(t *testing.T) {
	backends(t, func(t *testing.T, r *rig) {
		ctx := context.Background()
		const short, long = 200, 60_000 // ms
		// gone waits until the counter has expired: on miniredis time is
		// moved past its expiry, on a real server it runs out.
		gone := func() {
			t.Helper()
			if r.mr != nil {
				r.advance(short + 1)
			}
			require.Eventually(t, func() bool { return r.rdb.Exists(ctx, r.keys.Token).Val() == 0 },
				5*time.Second, time.Millisecond, "the counter expires")
		}
		h := queue.Entry("000000000000000a", short*time.Millisecond, "h")
		w := queue.Entry("000000000000000b", short*time.Millisecond, "w")
		rep, err := r.acquire(ctx, "grant", "h", h, short, long, queue.ModeTry)
		require.NoError(t, err)
		require.True(t, rep.Granted)
		first := rep.Token
		ttl := r.rdb.PTTL(ctx, r.keys.Token).Val()
		require.Positive(t, ttl, "the counter expires")
		require.LessOrEqual(t, ttl, short*time.Millisecond, "with the hold")
		renewed, err := r.renew(ctx, "h", long)
		require.NoError(t, err)
		require.True(t, renewed)
		_, err = r.acquire(ctx, "wait", "w", w, short, long, queue.ModeWait)
		require.NoError(t, err)

		gone()
		require.Equal(t, "h", r.rdb.HGet(ctx, r.keys.Lock, "owner").Val(), "the hold outlives the counter")
		rep, err = r.acquire(ctx, "again", "h", queue.Entry("000000000000000c", 0, "h"), 0, long, queue.ModeReenter)
		require.NoError(t, err)
		require.Equal(t, queue.Reply{Granted: true, Token: first, Count: 2}, rep, "a re-entry keeps the hold's token")
		require.Zero(t, r.rdb.Exists(ctx, r.keys.Token).Val(), "and writes no counter")

		// The hand-over: a fresh token, above the first, from the clock.
		_, err = r.release(ctx, "inner", "h", "", 0)
		require.NoError(t, err)
		_, err = r.release(ctx, "outer", "h", "", 0)
		require.NoError(t, err)
		rep, err = r.acquire(ctx, "claim", "w", w, short, long, queue.ModeWait)
		require.NoError(t, err)
		require.True(t, rep.Granted)
		require.Greater(t, rep.Token, first, "the hand-over's token")
		require.Equal(t, itoa(rep.Token), r.rdb.Get(ctx, r.keys.Token).Val(), "a new counter")

		// The lock free, the counter gone again: a grant still rises.
		handed := rep.Token
		_, err = r.release(ctx, "release", "w", "", 0)
		require.NoError(t, err)
		gone()
		rep, err = r.acquire(ctx, "grant2", "h", queue.Entry("000000000000000d", short*time.Millisecond, "h"), short, long, queue.ModeTry)
		require.NoError(t, err)
		require.True(t, rep.Granted)
		require.Greater(t, rep.Token, handed, "the grant after the counter expired")
	})
}

// A counter that lasts only 1 ms never lets a token repeat or go back:
// holds of lease 0 (gone at once, their counter kept 1 ms) granted over
// and over, many in one millisecond, across many millisecond boundaries,
// and now and then after the counter expired.
func TestTokensRiseWhenTheCounterLastsAMillisecond(t *testing.T) {
	_, r := newServerRig(t, receiptTTL*1000)
	ctx := context.Background()
	var last int64
	sameMs := 0
	for i := range int64(2000) {
		if i%200 == 199 {
			require.Eventually(t, func() bool { return r.rdb.Exists(ctx, r.keys.Token).Val() == 0 },
				5*time.Second, time.Millisecond, "the counter expires")
		}
		owner := "o" + itoa(i) // never a re-entry
		e := queue.Entry(strconv.FormatInt(i+1, 16), 0, owner)
		rep, err := r.acquire(ctx, "grant"+itoa(i), owner, e, 0, 30_000, queue.ModeTry)
		require.NoError(t, err)
		require.Equal(t, queue.Reply{Granted: true, Token: rep.Token, Count: 1}, rep, "grant %d", i)
		require.Greater(t, rep.Token, last, "grant %d", i)
		if rep.Token == last+1 {
			sameMs++
		}
		last = rep.Token
	}
	require.Positive(t, sameMs, "grants in the millisecond of the one before")
}
