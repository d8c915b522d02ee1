package fair

import (
	"context"
	"errors"
	"github.com/fairlock/fairlock/internal/errs"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// stateReloader is a client that keeps its own map of the deployment (a
// *redis.ClusterClient: which master serves which slot) and can be told
// to refresh it.
type stateReloader interface {
	ReloadState(ctx context.Context)
}

var _ stateReloader = (*redis.ClusterClient)(nil)

// reloadEvery bounds how often a failed call asks for a new map: the
// client reloads in the background, so asking more often gains nothing.
const reloadEvery = 250 * time.Millisecond

// topology asks the client for a fresh map of the deployment when a call
// fails in a way that a failover or a slot migration explains. go-redis
// reloads a cluster's slot map on its own only every so often (and on a
// MOVED it follows), so without this a lock whose master died stays
// unreachable until that reload, long after the cluster failed over.
type topology struct {
	reloader stateReloader // nil: the client needs no map
	last     atomic.Int64  // unix nanoseconds of the last reload asked for
}

func newTopology(rdb Redis) *topology {
	r, _ := rdb.(stateReloader)
	return &topology{reloader: r}
}

// failed notes the error of one call to Redis.
func (t *topology) failed(err error) {
	if t == nil || t.reloader == nil || err == nil || !stale(err) {
		return
	}
	now := time.Now().UnixNano()
	last := t.last.Load()
	if now-last < int64(reloadEvery) || !t.last.CompareAndSwap(last, now) {
		return
	}
	t.reloader.ReloadState(context.Background())
}

// stale reports whether err may mean the client's map of the deployment
// is out of date: a network error or timeout (the node may be dead), or a
// reply that says the slot moved or its master is failing over.
func stale(err error) bool {
	if errors.Is(err, redis.ErrClosed) || errors.Is(err, context.Canceled) || errors.Is(err, errs.ErrLayout) {
		return false
	}
	return !redisError(err) || replyStarts(err, "MOVED", "ASK", "CLUSTERDOWN", "TRYAGAIN", "READONLY", "MASTERDOWN", "LOADING")
}
