package fair

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ErrUnsafeServer: the Redis server cannot keep a lock safely (a version
// older than the scripts need, or an eviction policy that may evict lock
// keys). The root package re-exports it.
var ErrUnsafeServer = errors.New("fairlock: redis server cannot keep locks safely")

// MinServerVersion is the oldest Redis the scripts run on: they read the
// server's clock before they write, which Redis replicates correctly (as
// effects) by default from 5.0 on.
const MinServerVersion = "5.0.0"

// checkServer checks the server once, at the first Lock of the Client: a
// version too old for the scripts, or an eviction policy that may evict
// lock keys, fails every Lock with ErrUnsafeServer (and is logged). A
// server that refuses INFO or CONFIG (an error reply: a managed service, an
// ACL user without them) is logged once and trusted; a check cut short by
// a network error is logged and tried again at the next Lock, which goes
// ahead.
//
// The check honours ctx, and is bounded by the call timeout whatever ctx.
func (e *Engine) checkServer(ctx context.Context) error {
	if e.checked.Load() {
		return e.checkErr
	}
	select {
	case e.checking <- struct{}{}:
		defer func() { <-e.checking }()
	case <-ctx.Done():
		return ctx.Err()
	}
	if e.checked.Load() {
		return e.checkErr
	}
	cctx, cancel := context.WithTimeout(ctx, e.cfg.CallTimeout)
	defer cancel()
	err, definitive := e.inspectServer(cctx)
	if definitive {
		e.checkErr = err
		e.checked.Store(true)
	}
	return err
}

// inspectServer returns why the server is unsafe (nil: it is safe), and
// whether that answer is definitive.
func (e *Engine) inspectServer(ctx context.Context) (error, bool) {
	info, err := e.rdb.Info(ctx, "server").Result()
	if err != nil {
		e.log.Warn("fairlock: could not read the server's version; going ahead", "err", err)
		return nil, redisError(err) // a refused INFO stays refused
	}
	version := infoField(info, "redis_version")
	switch {
	case version == "":
		e.log.Warn("fairlock: the server does not report its version; going ahead")
	case versionLess(version, MinServerVersion):
		err := fmt.Errorf("%w: version %s, the scripts need %s or later", ErrUnsafeServer, version, MinServerVersion)
		e.log.Error("fairlock: refusing to lock", "err", err)
		return err, true
	}

	conf, err := e.rdb.ConfigGet(ctx, "maxmemory*").Result()
	if err != nil {
		e.log.Warn("fairlock: could not read the server's eviction policy; make sure it is noeviction",
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
			ErrUnsafeServer, policy, maxmemory)
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
