package fair

import (
	"context"
	"errors"
	"log/slog"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock/internal/errs"
)

// fakeServer answers INFO and CONFIG GET as told; nothing else.
type fakeServer struct {
	redis.UniversalClient
	info    string
	infoErr error
	conf    map[string]string
	confErr error
}

func (f fakeServer) Info(ctx context.Context, _ ...string) *redis.StringCmd {
	cmd := redis.NewStringCmd(ctx)
	cmd.SetVal(f.info)
	cmd.SetErr(f.infoErr)
	return cmd
}

func (f fakeServer) ConfigGet(ctx context.Context, _ string) *redis.MapStringStringCmd {
	cmd := redis.NewMapStringStringCmd(ctx)
	cmd.SetVal(f.conf)
	cmd.SetErr(f.confErr)
	return cmd
}

// replyError is an error reply from the server.
type replyError string

func (e replyError) Error() string { return string(e) }
func (replyError) RedisError()     {}

func TestServerCheckRefusesOnlyWhatCannotBeSafe(t *testing.T) {
	const v7 = "# Server\r\nredis_version:7.2.4\r\nredis_mode:standalone\r\n"
	safe := map[string]string{"maxmemory": "0", "maxmemory-policy": "noeviction"}
	tests := []struct {
		name       string
		server     fakeServer
		unsafe     bool
		definitive bool
	}{
		{"noeviction", fakeServer{info: v7, conf: safe}, false, true},
		{"no limit set", fakeServer{info: v7, conf: map[string]string{"maxmemory": "0", "maxmemory-policy": "allkeys-lru"}}, false, true},
		{"evicting with a limit", fakeServer{info: v7, conf: map[string]string{"maxmemory": "104857600", "maxmemory-policy": "volatile-lru"}}, true, true},
		{"too old", fakeServer{info: "redis_version:4.0.14\r\n", conf: safe}, true, true},
		{"old but enough", fakeServer{info: "redis_version:5.0.0\r\n", conf: safe}, false, true},
		{"no version", fakeServer{info: "# Server\r\n", conf: safe}, false, true},
		{"INFO fails", fakeServer{infoErr: errors.New("i/o timeout")}, false, false},
		{"INFO refused", fakeServer{infoErr: replyError("NOPERM this user has no permissions to run the 'info' command")}, false, true},
		{"CONFIG refused", fakeServer{info: v7, confErr: replyError("ERR unknown command 'CONFIG'")}, false, true},
		{"CONFIG fails", fakeServer{info: v7, confErr: errors.New("i/o timeout")}, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := &Engine{rdb: tt.server, log: slog.New(slog.DiscardHandler), cfg: Config{CallTimeout: 1}}
			err, definitive := e.inspectServer(context.Background())
			assert.Equal(t, tt.definitive, definitive)
			if tt.unsafe {
				require.ErrorIs(t, err, errs.ErrUnsafeServer)
			} else {
				require.NoError(t, err)
			}
		})
	}
}

func TestVersionsCompareNumerically(t *testing.T) {
	assert.True(t, versionLess("4.0.14", "5.0.0"))
	assert.True(t, versionLess("6.2.14", "7.0.0"))
	assert.True(t, versionLess("7.0.9", "7.0.10"))
	assert.False(t, versionLess("5.0.0", "5.0.0"))
	assert.False(t, versionLess("7.2", "5.0.0"))
	assert.False(t, versionLess("255.255.255", "5.0.0"))
}

// A command refused for lack of permission is ErrNoPermission, whether
// it was sent directly or called by a script.
func TestRefusalsAreErrNoPermission(t *testing.T) {
	for _, tc := range []struct {
		reply   string
		refused bool
	}{
		{"NOPERM this user has no permissions to run the 'evalsha' command", true},
		{"NOPERM this user has no permissions to access one of the keys used as arguments", true},
		{"ERR The user executing the script can't run this command or subcommand script: 104a, on @user_script:59.", true},
		{"ERR The user executing the script can't access at least one of the keys mentioned in the command arguments", true},
		{"ERR ACL failure in script: User locker has no permissions to run the 'time' command script: 8a2f, on @user_script:4.", true},
		{"ERR Error running script: attempt to compare nil with number", false},
		{"WRONGTYPE Operation against a key holding the wrong kind of value", false},
	} {
		err := refusal(replyError(tc.reply))
		assert.Equal(t, tc.refused, errors.Is(err, errs.ErrNoPermission), tc.reply)
		assert.ErrorIs(t, err, replyError(tc.reply), "the server's reply is kept")
		assert.True(t, redisError(err))
	}
	require.NotErrorIs(t, refusal(errors.New("i/o timeout")), errs.ErrNoPermission)
}
