package fair

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/fairlock/fairlock/internal/errs"
	"github.com/fairlock/fairlock/lua"
	"github.com/fairlock/fairlock/queue"
)

// An election is a Mutex whose Lock calls are candidates: each carries a
// value (Request.Value), and its grant is a leadership that holds the
// value in Redis beside the hold's owner and token (see is_candidate in
// lua/lib.lua). Everything else (the line, hand-overs, leases, the
// watchdog, re-sent calls) is the Mutex's.

// Election returns the election of this engine called name, its keys made
// with prefix (see queue.Election): a Mutex whose holds are leaderships.
func (e *Engine) Election(prefix, name string) (queue.Keys, Elector, error) {
	keys, err := queue.Election(prefix, name)
	if err != nil {
		return keys, nil, err
	}
	l := e.Mutex(keys)
	l.kind = kindElection
	return keys, l, nil
}

// Leadership is an election's leadership as Redis has it.
type Leadership struct {
	Owner string        // owner id of the hold
	Entry string        // the candidate entry it was granted to
	Value string        // the leader's value
	Term  int64         // the fencing token of its grant
	Since time.Time     // when it was granted, by the server's clock
	TTL   time.Duration // the lease left when read
}

// Leader reads the leadership of the election l: ok is false when it has
// no leader (nobody holds it). Errors as for IsLocked.
func (l *Mutex) Leader(ctx context.Context) (lead Leadership, ok bool, err error) {
	lead, err = read(l.e, ctx, func(ctx context.Context) (Leadership, error) {
		// One round trip, not a transaction (the least-privileged user has
		// no MULTI): the lease left only times an observer's next read,
		// and a change between the two is told on the election's channel.
		p := l.e.rdb.Pipeline()
		hm := p.HMGet(ctx, l.keys.Lock, "owner", "entry", "value", "token", "since")
		pttl := p.PTTL(ctx, l.keys.Lock)
		if _, err := p.Exec(ctx); err != nil {
			return Leadership{}, refusal(err)
		}
		return parseLeadership(hm.Val(), pttl.Val())
	})
	return lead, err == nil && lead.Owner != "", err
}

// parseLeadership reads the fields owner, entry, value, token and since of
// an election's hold, and its PTTL: the zero Leadership when nobody holds
// it.
func parseLeadership(v []any, pttl time.Duration) (Leadership, error) {
	owner, _ := v[0].(string)
	if owner == "" || pttl == -2 {
		return Leadership{}, nil
	}
	lead := Leadership{Owner: owner, TTL: max(pttl, 0)}
	lead.Entry, _ = v[1].(string)
	lead.Value, _ = v[2].(string)
	token, _ := v[3].(string)
	since, _ := v[4].(string)
	var err error
	if lead.Term, err = strconv.ParseInt(token, 10, 64); err != nil {
		return Leadership{}, fmt.Errorf("%w: election token %q", errs.ErrUnexpectedReply, token)
	}
	ms, err := strconv.ParseInt(since, 10, 64)
	if err != nil {
		return Leadership{}, fmt.Errorf("%w: election since %q", errs.ErrUnexpectedReply, since)
	}
	lead.Since = time.UnixMilli(ms)
	return lead, nil
}

// Proclaim makes value the value of the leadership held, without an
// election. It reports false, having changed nothing, when Redis no
// longer has held as the election's leadership (the lease was lost). The
// call runs as ForceUnlock's does: detached from ctx, bounded by the call
// timeout; when ctx ends first it returns ctx's error and the call goes
// on in the background.
func (l *Mutex) Proclaim(ctx context.Context, held Held, value string) (bool, error) {
	h, ok := held.(*Hold)
	if !ok {
		return false, errs.ErrNotHeld
	}
	if err := ctx.Err(); err != nil {
		return false, err
	}
	return within(l.e, ctx, func() (bool, error) {
		cctx, cancel := l.e.detached(ctx)
		defer cancel()
		// Sent again while Redis does not answer (a restart, a failover
		// under way), as a TryLock's attempt is, until the call timeout:
		// a Proclaim that ran twice writes the same value twice.
		done, err := untilAnswered(cctx, func() (bool, error) {
			return l.e.flagCall(cctx, func(s *lua.Scripts) lua.Call { return s.Proclaim(l.keys, h.owner, h.entry, value) })
		})
		if publishRefused(err) {
			return true, fmt.Errorf("fairlock: the value was proclaimed, but %w", refusal(err))
		}
		return done, refusal(err)
	}, func(done bool, err error) {
		l.e.log.Info("fairlock: proclaim answered after its caller gave up", l.lockAttrs("done", done, "err", err)...)
	})
}

// leaderID is the id under which a Client's watcher of an election waits
// on its leader channel: the message told there ("leader", see
// tell_leader in lua/lib.lua) is a wake for that id. One watcher per
// election and Client (the root package's) serves all its observers.
const leaderID = "leader"

// WatchLeader subscribes to the leader channel of the election l through
// the engine's hub, and returns once Redis confirmed it: the waiter is
// signalled at every change of leadership told from then on, and each
// time such a message may have been lost (a reconnect, a failover). The
// caller must Stop it. Errors as for the hub's Watch, a refused
// subscription as an errs.ErrNoPermission.
func (l *Mutex) WatchLeader(ctx context.Context) (LeaderWatch, error) {
	w, err := l.e.hub.Watch(ctx, l.keys.Leader, leaderID)
	if err != nil {
		return nil, refusal(err)
	}
	return w, nil
}
