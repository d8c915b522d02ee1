package shortly

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// reply is an error reply of the server, as go-redis returns one.
type reply string

func (r reply) Error() string { return string(r) }
func (reply) RedisError()     {}

func TestReplyTellsTheRepliesThatSayReadyShortly(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{reply("LOADING Redis is loading the dataset in memory"), true},
		{reply("BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE."), true},
		{reply("TRYAGAIN Multiple keys request during rehashing of slot"), true},
		{reply("CLUSTERDOWN The cluster is down"), true},
		{reply("MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'."), true},
		{reply("READONLY You can't write against a read only replica."), true},
		{reply("NOREPLICAS Not enough good replicas to write."), true},
		{reply("EXECABORT Transaction discarded because of: LOADING Redis is loading the dataset in memory"), true},
		{fmt.Errorf("fairlock: inspect: %w", reply("LOADING Redis is loading the dataset in memory")), true},
		{reply("EXECABORT Transaction discarded because of: NOPERM this user has no permissions"), false},
		{reply("NOPERM this user has no permissions to run the 'evalsha' command"), false},
		{reply("OOM command not allowed when used memory > 'maxmemory'."), false},
		{reply("ERR Error running script"), false},
		{errors.New("LOADING but not a reply of the server"), false},
		{io.EOF, false},
		{nil, false},
	} {
		assert.Equal(t, tc.want, Reply(tc.err), "%v", tc.err)
	}
}

func TestDoSendsAgainUntilTheServerAnswers(t *testing.T) {
	calls := 0
	v, err := Do(context.Background(), func() (int, error) {
		calls++
		if calls < 4 {
			return 0, reply("LOADING Redis is loading the dataset in memory")
		}
		return 42, nil
	})
	require.NoError(t, err)
	assert.Equal(t, 42, v)
	assert.Equal(t, 4, calls)
}

func TestDoReturnsAnyOtherErrorAtOnce(t *testing.T) {
	calls := 0
	err := Run(context.Background(), func() error {
		calls++
		return reply("NOPERM this user has no permissions")
	})
	require.EqualError(t, err, "NOPERM this user has no permissions")
	assert.Equal(t, 1, calls)
}

func TestDoStopsWhenTheContextEndsAndKeepsBothErrors(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	calls := 0
	err := Run(ctx, func() error {
		calls++
		return reply("LOADING Redis is loading the dataset in memory")
	})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	var r reply
	require.ErrorAs(t, err, &r)
	assert.True(t, Reply(err))
	assert.Greater(t, calls, 1, "sent again before the deadline")
	assert.Less(t, calls, 20, "paused between sends")
}

func TestDoKeepsTheReplyWhenTheLastSendFailsForTheContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	calls := 0
	err := Run(ctx, func() error {
		calls++
		if calls == 1 {
			return reply("READONLY You can't write against a read only replica.")
		}
		cancel() // as if the call was sent again just as ctx ended
		return ctx.Err()
	})
	require.ErrorIs(t, err, context.Canceled)
	assert.True(t, Reply(err), "the refusal is kept: %v", err)
}
