package fair

import (
	"context"
	"errors"
	"log/slog"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock/lua"
	"github.com/fairlock/fairlock/notify"
)

// fakeCluster is a fakeServer that is a cluster client, and answers the
// version script as told.
type fakeCluster struct {
	fakeServer
	version    any // the script's answer: a string, or nil for a server before 7
	versionErr error
}

var _ notify.Cluster = fakeCluster{}

func (fakeCluster) MasterForKey(context.Context, string) (*redis.Client, error) {
	return nil, errors.New("not in this test")
}

func (fakeCluster) ReloadState(context.Context) {}

func (f fakeCluster) EvalSha(ctx context.Context, _ string, _ []string, _ ...any) *redis.Cmd {
	cmd := redis.NewCmd(ctx)
	switch {
	case f.versionErr != nil:
		cmd.SetErr(f.versionErr)
	case f.version == nil:
		cmd.SetErr(redis.Nil)
	default:
		cmd.SetVal(f.version)
	}
	return cmd
}

func TestWakeModeDependsOnlyOnTheClientKindAndTheServerVersion(t *testing.T) {
	const (
		v7  = "# Server\r\nredis_version:7.0.0\r\nredis_mode:cluster\r\n"
		v6  = "# Server\r\nredis_version:6.2.14\r\nredis_mode:cluster\r\n"
		v72 = "# Server\r\nredis_version:7.2.4\r\nredis_mode:standalone\r\n"
	)
	refused := replyError("NOPERM this user has no permissions to run the 'info' command")
	tests := []struct {
		name   string
		server Redis
		want   *lua.Scripts
	}{
		{"plain client on Redis 7", fakeServer{info: v72}, lua.Classic},
		{"plain client, INFO refused", fakeServer{infoErr: refused}, lua.Classic},
		{"cluster on Redis 7.0", fakeCluster{fakeServer: fakeServer{info: v7}}, lua.Sharded},
		{"cluster on Redis 6.2", fakeCluster{fakeServer: fakeServer{info: v6}}, lua.Classic},
		{"cluster, INFO refused, scripts see 7.2.4", fakeCluster{fakeServer: fakeServer{infoErr: refused}, version: "7.2.4"}, lua.Sharded},
		{"cluster, INFO refused, scripts see no version (before 7)", fakeCluster{fakeServer: fakeServer{infoErr: refused}}, lua.Classic},
		{"cluster, INFO and scripts refused", fakeCluster{fakeServer: fakeServer{infoErr: refused}, versionErr: replyError("NOPERM no scripts")}, lua.Classic},
		{"cluster, INFO names no version, scripts see 7.0.15", fakeCluster{fakeServer: fakeServer{info: "# Server\r\n"}, version: "7.0.15"}, lua.Sharded},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := &Engine{rdb: tt.server, log: slog.New(slog.DiscardHandler), cfg: Config{CallTimeout: 1e9}}
			e.layout.ok.Store(true) // the fake answers no script
			e.init(e.cfg.CallTimeout)
			got, err := e.scripts(context.Background())
			require.NoError(t, err)
			require.Same(t, tt.want, got)
			mode, err := e.hubMode(context.Background())
			require.NoError(t, err)
			require.Equal(t, tt.want == lua.Sharded, mode == notify.Sharded, "the hub is told the same")
		})
	}
}

func TestWakeModeIsNotDecidedByANetworkError(t *testing.T) {
	server := &fakeCluster{fakeServer: fakeServer{infoErr: errors.New("i/o timeout")}}
	e := &Engine{rdb: server, log: slog.New(slog.DiscardHandler), cfg: Config{CallTimeout: 1e9}}
	e.layout.ok.Store(true) // the fake answers no script
	e.init(e.cfg.CallTimeout)
	_, err := e.scripts(context.Background())
	require.ErrorContains(t, err, "i/o timeout")
	require.False(t, redisError(err), "a network error, retried like any")

	e.rdb = fakeCluster{fakeServer: fakeServer{info: "redis_version:7.0.15\r\n"}}
	got, err := e.scripts(context.Background())
	require.NoError(t, err)
	require.Same(t, lua.Sharded, got)
	e.rdb = fakeCluster{fakeServer: fakeServer{info: "redis_version:6.0.0\r\n"}}
	got, err = e.scripts(context.Background())
	require.NoError(t, err)
	require.Same(t, lua.Sharded, got, "decided once, for good")
}
