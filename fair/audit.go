package fair

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// A failover can undo a release: the old primary acknowledged it but had
// not passed it to the replica that was promoted (a graceful Sentinel
// failover leaves the old primary taking writes for about a second after
// the promotion). The new primary then still has the hold, nobody owns
// it, and the lock stays blocked until its lease runs out. The audit
// catches that: for a while after each release that ended a hold, it
// looks, once a second, whether the hold is back (the same owner under the
// same token, which no later grant can have) and if so sends the same
// release again, under the same call id: its receipt was lost with it, so
// it acts once.
//
// It runs only for clients that can fail over (a cluster client, the
// failover client); on one server a release is never undone.

const (
	auditSpan  = 10 * time.Second // how long a release is watched
	auditEvery = time.Second      // how often
)

// released is one release that ended a hold.
type released struct {
	l          *Lock
	call       string
	owner      string
	token      string
	receiptTTL int64
	at         time.Time
}

type audit struct {
	e       *Engine
	enabled bool

	mu      sync.Mutex
	recent  map[string]released // lock hash key -> its latest release; guarded by mu
	running bool                // the auditing goroutine runs; guarded by mu
}

func newAudit(e *Engine, rdb Redis) *audit {
	enabled := false
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		enabled = true
	case *redis.Client:
		enabled = c.Options().Addr == "FailoverClient" // how go-redis names its failover client
	}
	return &audit{e: e, enabled: enabled, recent: make(map[string]released)}
}

// note records a release that ended a hold of l.
func (a *audit) note(l *Lock, call, owner string, token int64, receiptTTL int64) {
	if a == nil || !a.enabled {
		return
	}
	a.mu.Lock()
	a.recent[l.keys.Lock] = released{l: l, call: call, owner: owner, token: strconv.FormatInt(token, 10),
		receiptTTL: receiptTTL, at: time.Now()}
	start := !a.running
	a.running = true
	a.mu.Unlock()
	if start && !a.e.goUnlessClosed(a.run) {
		a.mu.Lock()
		a.running = false
		a.mu.Unlock()
	}
}

// run audits the recent releases once a second until none is left or the
// engine closes.
func (a *audit) run() {
	t := time.NewTicker(auditEvery)
	defer t.Stop()
	for {
		select {
		case <-a.e.closing:
			return
		case <-t.C:
		}
		a.mu.Lock()
		var due []released
		for k, r := range a.recent {
			if time.Since(r.at) > auditSpan {
				delete(a.recent, k)
				continue
			}
			due = append(due, r)
		}
		if len(due) == 0 {
			a.running = false
			a.mu.Unlock()
			return
		}
		a.mu.Unlock()
		for _, r := range due {
			if a.check(r) {
				a.mu.Lock()
				if a.recent[r.l.keys.Lock] == r {
					delete(a.recent, r.l.keys.Lock)
				}
				a.mu.Unlock()
			}
		}
	}
}

// check looks whether r's hold is back, and sends r again if it is. It
// reports whether r needs no more watching.
func (a *audit) check(r released) bool {
	ctx, cancel := a.e.detached(context.Background())
	defer cancel()
	v, err := a.e.rdb.HMGet(ctx, r.l.keys.Lock, "owner", "token").Result()
	if err != nil {
		return false // look again at the next tick
	}
	owner, _ := v[0].(string)
	token, _ := v[1].(string)
	if owner != r.owner || token != r.token {
		return false
	}
	a.e.log.Warn("fairlock: a failover undid a release; sending it again", "lock", r.l.keys.Name)
	n, err := r.l.releaseCall(ctx, r.call, r.owner, 0, r.receiptTTL)
	switch {
	case err != nil && !publishRefused(err):
		return false
	case n > 0:
		a.e.log.Warn("fairlock: a failover undid more than one release; the lock expires after its lease",
			"lock", r.l.keys.Name)
	}
	return true
}
