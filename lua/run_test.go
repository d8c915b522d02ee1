package lua_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/fairlock/fairlock/lua"
	"github.com/fairlock/fairlock/queue"
)

// ownServer starts a redis-server of the test's own, for what changes the
// whole server (FUNCTION FLUSH, ACL users, maxmemory).
func ownServer(t *testing.T, extra ...string) (*redistest.Server, *redis.Client) {
	t.Helper()
	srv, err := redistest.Start(extra...)
	require.NoError(t, err)
	t.Cleanup(srv.Stop)
	return srv, srv.Client(t)
}

// commandCalls returns how many times the server was sent each of cmds,
// run or rejected, from INFO commandstats ("fcall", "evalsha",
// "function|load", ...).
func commandCalls(t *testing.T, rdb *redis.Client, cmds ...string) map[string]int {
	t.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	require.NoError(t, err)
	n := map[string]int{}
	for _, c := range cmds {
		var calls, usec, rejected int
		var per float64
		if v := redistest.InfoField(info, "cmdstat_"+c); v != "" {
			_, err := fmt.Sscanf(v, "calls=%d,usec=%d,usec_per_call=%f,rejected_calls=%d,", &calls, &usec, &per, &rejected)
			require.NoError(t, err, v)
		}
		n[c] = calls + rejected
	}
	return n
}

// grantAndRelease takes a fresh lock with r and gives it back, checking
// both replies.
func grantAndRelease(t *testing.T, r *lua.Runner, rdb lua.Client, s *lua.Scripts, name string) {
	t.Helper()
	ctx := t.Context()
	k, err := queue.For(redistest.Prefix(t), name)
	require.NoError(t, err)
	entry := queue.Entry(queue.NewID()+queue.NewTag()+queue.WakeVersion, time.Minute, "o")
	rep, err := lua.ReadAcquire(r.Run(ctx, rdb, s.Acquire(k, queue.NewID(), "o", entry, 60000, 30000, queue.ModeTry, 20000)))
	require.NoError(t, err)
	require.True(t, rep.Granted)
	rel, err := lua.ReadRelease(r.Run(ctx, rdb, s.Release(k, queue.NewID(), "o", "", 60000, 20000)))
	require.NoError(t, err)
	require.Equal(t, 0, rel.Count)
}

func TestRunnerLoadsTheLibraryOnceAndCallsItsFunctions(t *testing.T) {
	_, rdb := ownServer(t)
	ctx := t.Context()
	r := lua.NewRunner()

	// 16 calls find the library missing at once: one loads it.
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() { grantAndRelease(t, r, rdb, lua.Classic, fmt.Sprint("first-", i)) })
	}
	wg.Wait()
	require.False(t, r.ScriptsOnly())
	libs, err := rdb.FunctionList(ctx, redis.FunctionListQuery{}).Result()
	require.NoError(t, err)
	require.Len(t, libs, 1)
	require.Equal(t, lua.Classic.Library.Name, libs[0].Name)
	calls := commandCalls(t, rdb, "fcall", "evalsha", "eval", "function|load")
	require.Equal(t, 1, calls["function|load"])
	require.Equal(t, 0, calls["evalsha"]+calls["eval"], "every call by FCALL")
	require.GreaterOrEqual(t, calls["fcall"], 32)

	// A server that lost its functions (FUNCTION FLUSH, a restart without
	// persistence) gets the library again at the next call.
	require.NoError(t, rdb.FunctionFlush(ctx).Err())
	grantAndRelease(t, r, rdb, lua.Classic, "after-flush")
	require.Equal(t, 2, commandCalls(t, rdb, "function|load")["function|load"])

	// The sharded set is a library of its own, beside the classic one.
	grantAndRelease(t, r, rdb, lua.Sharded, "sharded")
	libs, err = rdb.FunctionList(ctx, redis.FunctionListQuery{}).Result()
	require.NoError(t, err)
	require.Len(t, libs, 2)
	require.NotEqual(t, lua.Classic.Library.Name, lua.Sharded.Library.Name)
}

// Every operation of the library is a function of it, named after the
// library, and the renewals that carry no helpers are not.
func TestEveryOperationBuiltOnTheHelpersIsAFunctionOfTheLibrary(t *testing.T) {
	_, rdb := ownServer(t)
	ctx := t.Context()
	for _, s := range []*lua.Scripts{lua.Classic, lua.Sharded} {
		require.NoError(t, lua.Load(ctx, rdb, s.Library))
		require.NoError(t, lua.Load(ctx, rdb, s.Library), "a loaded library loads again")
		require.Regexp(t, `^fairlock_[0-9a-f]{12}$`, s.Library.Name)
		libs, err := rdb.FunctionList(ctx, redis.FunctionListQuery{LibraryNamePattern: s.Library.Name}).Result()
		require.NoError(t, err)
		require.Len(t, libs, 1)
		var names []string
		for _, f := range libs[0].Functions {
			names = append(names, strings.TrimPrefix(f.Name, s.Library.Name+"_"))
		}
		require.ElementsMatch(t, []string{"acquire", "release", "cancel", "forceunlock", "multiacquire", "proclaim",
			"wacquire", "wrelease", "wcancel", "wresize", "wforce", "wrenew",
			"qtry", "qjoin", "qcancel", "qrelease", "qforce", "qcommit"}, names)
	}
	var k queue.Keys
	require.Equal(t, lua.Classic.Library.Name+"_acquire", lua.Classic.Acquire(k, "", "", "", 0, 0, "", 0).Function)
	require.Empty(t, lua.Renew(k, "", 0).Function)
	require.Empty(t, lua.QRenew(k, "", 0).Function)
}

func TestRunnerSendsScriptsWhereTheUserMayNotRunFunctions(t *testing.T) {
	_, admin := ownServer(t)
	ctx := t.Context()
	for _, c := range []struct {
		name  string
		rules []any
		load  bool // the library is there already
	}{
		{"no FCALL", []any{"-fcall"}, true},
		{"no FUNCTION LOAD, library missing", []any{"-function"}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			require.NoError(t, admin.FunctionFlush(ctx).Err())
			if c.load {
				require.NoError(t, lua.Load(ctx, admin, lua.Classic.Library))
			}
			user := strings.ReplaceAll(c.name, " ", "-")
			args := append([]any{"ACL", "SETUSER", user, "on", ">pw", "~*", "&*", "+@all"}, c.rules...)
			require.NoError(t, admin.Do(ctx, args...).Err())
			rdb := redis.NewClient(&redis.Options{Addr: admin.Options().Addr, Username: user, Password: "pw"})
			t.Cleanup(func() { _ = rdb.Close() })
			r := lua.NewRunner()
			grantAndRelease(t, r, rdb, lua.Classic, "a")
			require.True(t, r.ScriptsOnly())
			before := commandCalls(t, admin, "fcall", "evalsha")
			grantAndRelease(t, r, rdb, lua.Classic, "b")
			after := commandCalls(t, admin, "fcall", "evalsha")
			require.Equal(t, before["fcall"], after["fcall"], "FCALL is not tried again")
			require.Equal(t, before["evalsha"]+2, after["evalsha"])
		})
	}
}

// A server without functions (miniredis here, as Redis 6) runs every call
// by EVALSHA after the first.
func TestRunnerSendsScriptsToAServerWithoutFunctions(t *testing.T) {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	r := lua.NewRunner()
	grantAndRelease(t, r, rdb, lua.Classic, "a")
	require.True(t, r.ScriptsOnly())
	grantAndRelease(t, r, rdb, lua.Classic, "b")
}

// At its maxmemory, Redis starts no function that may write: the call goes
// as an EVAL instead, and so keeps the scripts' behaviour on a full server
// (a release goes through, a fresh grant is refused with OOM), while the
// Runner tries functions again at the next call.
func TestRunnerSendsACallRefusedForMemoryAsAScript(t *testing.T) {
	_, rdb := ownServer(t)
	ctx := t.Context()
	r := lua.NewRunner()
	k, err := queue.For(redistest.Prefix(t), "full")
	require.NoError(t, err)
	entry := queue.Entry(queue.NewID()+queue.NewTag()+queue.WakeVersion, time.Minute, "o")
	rep, err := lua.ReadAcquire(r.Run(ctx, rdb, lua.Classic.Acquire(k, queue.NewID(), "o", entry, 60000, 30000, queue.ModeTry, 20000)))
	require.NoError(t, err)
	require.True(t, rep.Granted)

	require.NoError(t, rdb.ConfigSet(ctx, "maxmemory", "1").Err())
	t.Cleanup(func() { _ = rdb.ConfigSet(context.Background(), "maxmemory", "0").Err() })
	before := commandCalls(t, rdb, "fcall", "eval", "evalsha")
	other, err := queue.For(redistest.Prefix(t), "other")
	require.NoError(t, err)
	_, err = lua.ReadAcquire(r.Run(ctx, rdb, lua.Classic.Acquire(other, queue.NewID(), "p", entry, 60000, 30000, queue.ModeTry, 20000)))
	require.ErrorContains(t, err, "OOM")
	rel, err := lua.ReadRelease(r.Run(ctx, rdb, lua.Classic.Release(k, queue.NewID(), "o", "", 60000, 20000)))
	require.NoError(t, err)
	require.Equal(t, 0, rel.Count)
	after := commandCalls(t, rdb, "fcall", "eval", "evalsha")
	require.Equal(t, before["fcall"]+2, after["fcall"], "each call tried FCALL first")
	// and went as a script: by EVALSHA, which the server lacked, then EVAL.
	require.Equal(t, before["evalsha"]+2, after["evalsha"])
	require.Equal(t, before["eval"]+2, after["eval"])
	require.False(t, r.ScriptsOnly())
}

// The replies that send a call again are told by their whole shape: a
// script's own refusal that happens to name a function, a key or FCALL is
// the call's answer, and is never sent twice.
func TestRunnerSendsAgainOnlyWhatTheServerDidNotRun(t *testing.T) {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	k, err := queue.For("p", "function-fcall")
	require.NoError(t, err)
	call := lua.Classic.Release(k, "c", "o", "", 1, 1)
	for _, c := range []struct {
		reply string
		again bool
	}{
		{"ERR Function not found", true},
		{"NOPERM this user has no permissions to run the 'fcall' command", true},
		{"NOPERM User u has no permissions to run the 'fcall' command", true},
		{"ERR unknown command 'FCALL', with args beginning with: ", true},
		{"ERR unknown command `fcall`, with args beginning with: ", true},
		{"OOM command not allowed when used memory > 'maxmemory'.", true},
		{"NOPERM fairlock: state changed, but PUBLISH to p:{function-fcall}:wake was refused: the 'fcall' command", false},
		{"NOPERM this user has no permissions to access one of the keys used as arguments", false},
		{"ERR unknown command 'fcallx'", false},
		{"LOADING Redis is loading the dataset in memory", false},
	} {
		r := lua.NewRunner()
		s := r.Start(call)
		require.Equal(t, lua.ByFunction, s.Via)
		require.Equal(t, c.again, r.Again(t.Context(), rdb, call, &s, redis.NewCmdResult(nil, redisError(c.reply)).Err()), c.reply)
	}
}

// redisError is an error reply of the server.
type redisError string

func (e redisError) Error() string { return string(e) }
func (redisError) RedisError()     {}

// A load serves every later call, so it does not end with the call that
// found the library missing: here that call's context has ended already
// (as a quorum's slowest master's does once a majority answered), and the
// library is loaded all the same.
func TestRunnerLoadsTheLibraryForACallWhoseContextEnded(t *testing.T) {
	_, rdb := ownServer(t)
	k, err := queue.For(redistest.Prefix(t), "ended")
	require.NoError(t, err)
	call := lua.Classic.Release(k, queue.NewID(), "o", "", 60000, 20000)
	ctx, cancel := context.WithCancel(t.Context())
	r := lua.NewRunner()
	s := r.Start(call)
	err = call.Send(ctx, rdb, s.Via).Err()
	require.ErrorContains(t, err, "Function not found")
	cancel()
	require.True(t, r.Again(ctx, rdb, call, &s, err))
	require.Equal(t, lua.ByFunction, s.Via, "loaded: the call goes by FCALL again")
	libs, err := rdb.FunctionList(t.Context(), redis.FunctionListQuery{}).Result()
	require.NoError(t, err)
	require.Len(t, libs, 1)
}

// With Go set, a call that finds the library missing goes by EVAL at once,
// as one that finds its script missing would, and the library loads in the
// background (once, however many calls found it missing) for the calls
// after it.
func TestRunnerLoadsTheLibraryInTheBackground(t *testing.T) {
	_, rdb := ownServer(t)
	ctx := t.Context()
	var loads []func()
	r := lua.NewRunner()
	r.Go = func(f func()) bool { loads = append(loads, f); return true }
	k, err := queue.For(redistest.Prefix(t), "background")
	require.NoError(t, err)
	entry := queue.Entry(queue.NewID()+queue.NewTag()+queue.WakeVersion, time.Minute, "o")
	rep, err := lua.ReadAcquire(r.Run(ctx, rdb, lua.Classic.Acquire(k, queue.NewID(), "o", entry, 60000, 30000, queue.ModeTry, 20000)))
	require.NoError(t, err)
	require.True(t, rep.Granted)
	require.Equal(t, map[string]int{"fcall": 1, "eval": 1, "function|load": 0},
		commandCalls(t, rdb, "fcall", "eval", "function|load"), "FCALL, refused, then EVAL at once")
	_, err = lua.ReadAcquire(r.Run(ctx, rdb, lua.Classic.Acquire(k, queue.NewID(), "p", entry, 60000, 30000, queue.ModeTry, 20000)))
	require.NoError(t, err)
	require.Len(t, loads, 1, "one load however many calls found the library missing")
	loads[0]()
	rel, err := lua.ReadRelease(r.Run(ctx, rdb, lua.Classic.Release(k, queue.NewID(), "o", "", 60000, 20000)))
	require.NoError(t, err)
	require.Equal(t, 0, rel.Count)
	require.Equal(t, map[string]int{"fcall": 3, "eval": 2, "function|load": 1},
		commandCalls(t, rdb, "fcall", "eval", "function|load"), "loaded: FCALL alone")
}

// heldLoad is a client whose first FUNCTION LOAD, once the server has run
// it, waits for release before it answers: a load still running.
type heldLoad struct {
	*redis.Client
	ran, release chan struct{}
	once         sync.Once
}

func (h *heldLoad) FunctionLoad(ctx context.Context, code string) *redis.StringCmd {
	cmd := h.Client.FunctionLoad(ctx, code)
	h.once.Do(func() {
		close(h.ran)
		<-h.release
	})
	return cmd
}

// A call sent while a background load runs, after the server lost what
// that load sent (FUNCTION FLUSH between the two), is not taken as served
// by it: one more load follows, so the calls after it find the library.
func TestRunnerLoadsAgainForACallTheRunningLoadCannotServe(t *testing.T) {
	_, rdb := ownServer(t)
	ctx := t.Context()
	held := &heldLoad{Client: rdb, ran: make(chan struct{}), release: make(chan struct{})}
	r := lua.NewRunner()
	done := make(chan struct{})
	var started sync.WaitGroup
	r.Go = func(f func()) bool {
		started.Add(1)
		go func() {
			defer started.Done()
			f()
		}()
		return true
	}
	k, err := queue.For(redistest.Prefix(t), "held")
	require.NoError(t, err)
	entry := queue.Entry(queue.NewID()+queue.NewTag()+queue.WakeVersion, time.Minute, "o")
	rep, err := lua.ReadAcquire(r.Run(ctx, held, lua.Classic.Acquire(k, queue.NewID(), "o", entry, 60000, 30000, queue.ModeTry, 20000)))
	require.NoError(t, err)
	require.True(t, rep.Granted)
	<-held.ran // the first load ran on the server and has not answered
	require.NoError(t, rdb.FunctionFlush(ctx).Err())
	rel, err := lua.ReadRelease(r.Run(ctx, held, lua.Classic.Release(k, queue.NewID(), "o", "", 60000, 20000)))
	require.NoError(t, err)
	require.Equal(t, 0, rel.Count)
	close(held.release)
	go func() {
		started.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the background loads did not end")
	}
	libs, err := rdb.FunctionList(ctx, redis.FunctionListQuery{}).Result()
	require.NoError(t, err)
	require.Len(t, libs, 1, "the library is there for the calls after")
	require.Equal(t, map[string]int{"fcall": 2, "eval": 2, "function|load": 2},
		commandCalls(t, rdb, "fcall", "eval", "function|load"), "one load for each call")
}

// Preload loads the library before the first call, once, and the first
// call then goes by FCALL alone.
func TestRunnerPreloadsTheLibraryOnce(t *testing.T) {
	_, rdb := ownServer(t)
	r := lua.NewRunner()
	r.Preload(t.Context(), rdb, lua.Classic.Library)
	r.Preload(t.Context(), rdb, lua.Classic.Library)
	grantAndRelease(t, r, rdb, lua.Classic, "preloaded")
	require.Equal(t, map[string]int{"fcall": 2, "eval": 0, "evalsha": 0, "function|load": 1},
		commandCalls(t, rdb, "fcall", "eval", "evalsha", "function|load"))
}
