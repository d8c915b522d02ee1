package lua_test

import (
	"context"
	"errors"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock/internal/errs"
	"github.com/fairlock/fairlock/lua"
	"github.com/fairlock/fairlock/queue"
)

// reply is a command that answered v, or failed with err.
func reply(v any, err error) *redis.Cmd {
	cmd := redis.NewCmd(context.Background())
	cmd.SetVal(v)
	cmd.SetErr(err)
	return cmd
}

func TestReadersTellEveryReplyTheScriptsGive(t *testing.T) {
	rep, err := lua.ReadAcquire(reply([]any{int64(1), int64(1700000000000000), int64(2)}, nil))
	require.NoError(t, err)
	require.Equal(t, queue.Reply{Granted: true, Token: 1700000000000000, Count: 2}, rep)
	rep, err = lua.ReadAcquire(reply([]any{int64(0), "250", int64(3)}, nil))
	require.NoError(t, err, "a number sent as a string reads as the number")
	require.Equal(t, queue.Reply{Hint: 250, Joined: true, Position: 3}, rep)
	rep, err = lua.ReadAcquire(reply([]any{int64(0), int64(250), int64(0)}, nil))
	require.NoError(t, err)
	require.Equal(t, queue.Reply{Hint: 250}, rep, "a heartbeat of a waiter in line")

	n, err := lua.ReadRelease(reply(int64(-1), nil))
	require.NoError(t, err)
	require.Equal(t, queue.Released{Count: -1}, n)
	n, err = lua.ReadRelease(reply([]any{int64(0), "0123456789abcdef0a1b2c3d1:1000:o 42 1764083400123456"}, nil))
	require.NoError(t, err)
	require.Equal(t, queue.Released{Wakes: []string{"0123456789abcdef0a1b2c3d1:1000:o 42 1764083400123456"}}, n, "a local hand-off")
	n, err = lua.ReadRelease(reply([]any{int64(1), "a 42 1", "b 43 1"}, nil))
	require.NoError(t, err)
	require.Equal(t, queue.Released{Count: 1, Wakes: []string{"a 42 1", "b 43 1"}}, n, "a weighted release's local grants")
	for _, bad := range []any{[]any{int64(-1), "x 1"}, []any{int64(0), ""}, []any{int64(0), "x 1", int64(2)}, []any{int64(0)}, []any{}, "0"} {
		_, err = lua.ReadRelease(reply(bad, nil))
		require.ErrorIs(t, err, errs.ErrUnexpectedReply, "%v", bad)
	}
	ok, err := lua.ReadFlag(reply(int64(1), nil))
	require.NoError(t, err)
	require.True(t, ok)
	ok, err = lua.ReadFlag(reply(int64(0), nil))
	require.NoError(t, err)
	require.False(t, ok)

	v, err := lua.ReadVersion(reply(nil, redis.Nil))
	require.NoError(t, err)
	require.Empty(t, v, "a server before Redis 7 names no version")
}

func TestReadersRefuseRepliesNoScriptGives(t *testing.T) {
	for name, read := range map[string]func() error{
		"acquire, two fields":    func() error { _, err := lua.ReadAcquire(reply([]any{int64(1), int64(5)}, nil)); return err },
		"acquire, flag 2":        func() error { _, err := lua.ReadAcquire(reply([]any{int64(2), int64(5), int64(1)}, nil)); return err },
		"acquire, not a number":  func() error { _, err := lua.ReadAcquire(reply([]any{int64(1), "x", int64(1)}, nil)); return err },
		"acquire, a nested list": func() error { _, err := lua.ReadAcquire(reply([]any{int64(1), []any{}, int64(1)}, nil)); return err },
		"flag 2":                 func() error { _, err := lua.ReadFlag(reply(int64(2), nil)); return err },
	} {
		require.ErrorIs(t, read(), errs.ErrUnexpectedReply, name)
	}
	refused := errors.New("NOPERM no")
	_, err := lua.ReadAcquire(reply(nil, refused))
	require.ErrorIs(t, err, refused, "a failed call's error is returned as it is")
}
