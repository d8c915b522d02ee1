package queue_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock/queue"
)

// The scripts read the server's clock only when a step needs it (a fresh
// token, a waiter's deadline, a queue head to prune): an uncontended grant
// reads it once, for its token, and its release, with nobody in line, not
// at all.
func TestScriptsReadTheClockOnlyWhenAStepNeedsIt(t *testing.T) {
	_, r := newServerRig(t, receiptTTL*1000)
	ctx := context.Background()
	timeCalls := func() int {
		stats, err := r.rdb.Info(ctx, "commandstats").Result()
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
	require.NoError(t, r.rdb.ConfigResetStat(ctx).Err())

	const lease, ttl = 60_000, 30_000
	h := queue.Entry("0000000000000001", lease*time.Millisecond, "h")
	o := queue.Entry("0000000000000002", lease*time.Millisecond, "o")
	rep, err := r.acquire(ctx, "c1", "h", h, lease, ttl, queue.ModeTry)
	require.NoError(t, err)
	require.True(t, rep.Granted)
	require.Equal(t, 1, timeCalls(), "a fresh grant reads the clock for its token")
	_, err = r.acquire(ctx, "c2", "o", o, lease, ttl, queue.ModeTry)
	require.NoError(t, err)
	require.Equal(t, 1, timeCalls(), "a try on a held lock needs no clock")
	n, err := r.release(ctx, "c3", "h", "", lease)
	require.NoError(t, err)
	require.Zero(t, n)
	require.Equal(t, 1, timeCalls(), "a release with nobody in line needs no clock")
}
