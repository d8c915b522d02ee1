package fair

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/fairlock/fairlock/internal/errs"
	"github.com/fairlock/fairlock/lua"
	"github.com/fairlock/fairlock/notify"
)

// minServerVersion is the oldest Redis the scripts run on: they read the
// server's clock before they write, which Redis replicates correctly (as
// effects) by default from 5.0 on.
const minServerVersion = "5.0.0"

// minShardedVersion is the oldest Redis on which a cluster Client sends
// wake messages by sharded pub/sub (SPUBLISH, SSUBSCRIBE).
const minShardedVersion = "7.0.0"

// checkServer checks the server once, at the first Lock of the Client: a
// version too old for the scripts, or an eviction policy that may evict
// lock keys, fails every Lock with errs.ErrUnsafeServer (and is logged). A
// server that refuses INFO or CONFIG (an error reply: a managed service, an
// ACL user without them) is logged once and trusted; a check cut short by
// a network error is logged and tried again at the next Lock, which goes
// ahead.
//
// The check runs on a goroutine of the engine, detached from ctx and
// bounded by the call timeout; Lock calls that come while it runs join it.
// Each returns when the check is over or when its own ctx ends (with ctx's
// error), so ctx bounds Lock even while the server does not answer; the
// check then goes on, and its verdict counts for the Lock calls after it.
func (e *Engine) checkServer(ctx context.Context) error {
	if e.checked.Load() {
		return e.checkErr
	}
	_, err := e.checking.do(e, ctx, func() (struct{}, error) {
		if e.checked.Load() {
			return struct{}{}, e.checkErr
		}
		cctx, cancel := e.detached(ctx)
		defer cancel()
		err, definitive := e.inspectServer(cctx)
		if definitive {
			e.checkErr = err
			e.checked.Store(true)
		}
		return struct{}{}, err
	})
	return err
}

// inspectServer returns why the server is unsafe (nil: it is safe), and
// whether that answer is definitive.
func (e *Engine) inspectServer(ctx context.Context) (error, bool) {
	sent := time.Now()
	info, err := e.rdb.Info(ctx, "server").Result()
	e.called(sent, err)
	if err != nil {
		e.log.Log(ctx, failLevel(err), "fairlock: could not read the server's version; going ahead", "err", err)
		return nil, redisError(err) // a refused INFO stays refused
	}
	version := infoField(info, "redis_version")
	switch {
	case version == "":
		e.log.Warn("fairlock: the server does not report its version; going ahead")
	case versionLess(version, minServerVersion):
		err := fmt.Errorf("%w: version %s, the scripts need %s or later", errs.ErrUnsafeServer, version, minServerVersion)
		e.log.Error("fairlock: refusing to lock", "err", err)
		return err, true
	}

	conf, err := e.rdb.ConfigGet(ctx, "maxmemory*").Result()
	if err != nil {
		e.log.Log(ctx, failLevel(err), "fairlock: could not read the server's eviction policy; make sure it is noeviction",
			"err", err)
		return nil, redisError(err) // a refused CONFIG stays refused
	}
	policy, maxmemory := conf["maxmemory-policy"], conf["maxmemory"]
	switch {
	case policy == "" || policy == "noeviction":
	case maxmemory == "0" || maxmemory == "":
		e.log.Warn("fairlock: the eviction policy may evict lock keys once maxmemory is set; use noeviction",
			"maxmemory-policy", policy)
	default:
		err := fmt.Errorf("%w: maxmemory-policy %s with maxmemory %s may evict lock keys (use noeviction)",
			errs.ErrUnsafeServer, policy, maxmemory)
		e.log.Error("fairlock: refusing to lock", "err", err)
		return err, true
	}
	return nil, true
}

// infoField returns the value of one "name:value" line of an INFO reply.
func infoField(info, name string) string {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return ""
}

// versionLess compares dotted versions numerically ("6.2.14" < "7.0.0");
// parts that are not numbers count as 0.
func versionLess(a, b string) bool {
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	for i := range max(len(as), len(bs)) {
		var x, y int
		if i < len(as) {
			x, _ = strconv.Atoi(as[i])
		}
		if i < len(bs) {
			y, _ = strconv.Atoi(bs[i])
		}
		if x != y {
			return x < y
		}
	}
	return false
}

// wake is how wake messages travel: the scripts that publish them and the
// way the hub subscribes to hear them.
type wake struct {
	mode    notify.Mode
	scripts *lua.Scripts
}

var (
	classicWake = &wake{mode: notify.Classic, scripts: lua.Classic}
	shardedWake = &wake{mode: notify.Sharded, scripts: lua.Sharded}
)

// wakeMode returns how wake messages travel for this Client, deciding it
// at the first call that needs it. Every Client of one deployment must
// decide the same, or none would hear the others' hand-overs, so the rule
// depends on nothing but the kind of client and the server's version:
//
//   - a Redis Cluster client (*redis.ClusterClient) on Redis 7.0 or later:
//     sharded (SPUBLISH, and SSUBSCRIBE on the master of each channel's
//     slot);
//   - any other client, or an older server: classic (PUBLISH, SUBSCRIBE).
//
// The version is INFO's redis_version; when INFO is refused (an ACL user
// without it, a managed service), it is the version the scripts see
// (lua.Version: redis.REDIS_VERSION, which servers before 7 lack), so
// a user that may not run INFO decides as one that may. A server that
// names no version either way gets classic, which every server supports.
// A network error decides nothing: the call fails, and the next asks
// again.
//
// The question runs on a goroutine of the engine, detached from ctx and
// bounded by the call timeout; calls that come while it runs join it.
// Each returns when it is answered or when its own ctx ends (with ctx's
// error); the question then goes on, and its answer counts for the calls
// after it.
func (e *Engine) wakeMode(ctx context.Context) (*wake, error) {
	if w := e.wake.Load(); w != nil {
		return w, nil
	}
	if _, ok := e.rdb.(notify.Cluster); !ok {
		e.wake.CompareAndSwap(nil, classicWake)
		return e.wake.Load(), nil
	}
	return e.deciding.do(e, ctx, func() (*wake, error) {
		if w := e.wake.Load(); w != nil {
			return w, nil
		}
		cctx, cancel := e.detached(ctx)
		defer cancel()
		version, err := e.serverVersion(cctx)
		if err != nil {
			return nil, err
		}
		w := classicWake
		if version != "" && !versionLess(version, minShardedVersion) {
			w = shardedWake
		}
		e.wake.Store(w)
		e.log.Debug("fairlock: wake messages use "+w.scripts.Command, "redis_version", version, "mode", w.mode.String())
		return w, nil
	})
}

// hubMode tells the notify hub how the scripts publish.
func (e *Engine) hubMode(ctx context.Context) (notify.Mode, error) {
	w, err := e.wakeMode(ctx)
	if err != nil {
		return notify.Classic, err
	}
	return w.mode, nil
}

// scripts returns the set of scripts this Client runs.
func (e *Engine) scripts(ctx context.Context) (*lua.Scripts, error) {
	w, err := e.wakeMode(ctx)
	if err != nil {
		return nil, err
	}
	if err := e.checkLayout(ctx); err != nil {
		return nil, err
	}
	return w.scripts, nil
}

// serverVersion returns the server's Redis version from INFO or, when INFO
// is refused or names none, from a script; "" when neither says, and an
// error only when the server could not be asked.
func (e *Engine) serverVersion(ctx context.Context) (string, error) {
	sent := time.Now()
	info, err := e.rdb.Info(ctx, "server").Result()
	e.called(sent, err)
	if err != nil && !redisError(err) {
		return "", err
	}
	if v := infoField(info, "redis_version"); err == nil && v != "" {
		return v, nil
	}
	v, err := lua.ReadVersion(e.run(ctx, lua.Version()))
	switch {
	case err == nil:
		return v, nil // "" from a server before Redis 7
	case redisError(err):
		e.log.Warn("fairlock: cannot read the server's version (INFO and scripts refused); wake messages use PUBLISH",
			"err", err)
		return "", nil
	}
	return "", err
}
