package queue_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock/fairlock/lua"
	"github.com/fairlock/fairlock/queue"
)

// The rig's side of weighted locks: the calls of their scripts, through
// the bindings of package lua, and their state read back in the model's
// terms.

// weightedLocks returns the keys of the weighted locks of the runs, a
// RWMutex and a Semaphore of one name under prefix, in key order.
func weightedLocks(prefix string) ([]queue.Keys, error) {
	rw, err1 := queue.Weighted(prefix, "lock", queue.KindRWMutex)
	sem, err2 := queue.Weighted(prefix, "lock", queue.KindSemaphore)
	return []queue.Keys{rw, sem}, errors.Join(err1, err2)
}

func (r *rig) wacquire(ctx context.Context, call, owner, entry string, lease, waiterTTL int64, mode string, v lua.Level, capacity int64) (queue.Reply, error) {
	return lua.ReadAcquire(r.runner.Run(ctx, r.rdb, lua.Classic.WAcquire(r.keys, call, owner, entry, lease, waiterTTL, mode, r.receiptTTL, v, capacity)))
}

func (r *rig) wrelease(ctx context.Context, call, owner, own string, lease int64, v lua.Level) (queue.Released, error) {
	return lua.ReadRelease(r.runner.Run(ctx, r.rdb, lua.Classic.WRelease(r.keys, call, owner, own, lease, r.receiptTTL, v)))
}

func (r *rig) wrenew(ctx context.Context, owner string, lease int64) (bool, error) {
	return lua.ReadFlag(r.runner.Run(ctx, r.rdb, lua.Classic.WRenew(r.keys, owner, lease)))
}

func (r *rig) wcancel(ctx context.Context, owner, entry string) (bool, error) {
	return lua.ReadFlag(r.runner.Run(ctx, r.rdb, lua.Classic.WCancel(r.keys, owner, entry)))
}

func (r *rig) wforce(ctx context.Context, owner string) (bool, error) {
	return lua.ReadFlag(r.runner.Run(ctx, r.rdb, lua.Classic.WForce(r.keys, owner)))
}

func (r *rig) wresize(ctx context.Context, permits int64) (int64, error) {
	return lua.ReadCount(r.runner.Run(ctx, r.rdb, lua.Classic.WResize(r.keys, permits)))
}

// weightedReads is what wstates reads of one weighted lock: its keys, then
// the receipts they name.
type weightedReads struct {
	hash                *redis.MapStringStringCmd
	hashTTL, leasesTTL  *redis.DurationCmd
	leases, dls, joined *redis.ZSliceCmd
	line                *redis.StringSliceCmd
	token               *redis.StringCmd
	tokenTTL            *redis.DurationCmd
	calls               *redis.StringSliceCmd
	receipts            []*redis.StringCmd // of calls, in order
	receiptTTLs         []*redis.DurationCmd
}

// wstates reads the keys and receipts of every lock of the rig as weighted
// locks, and the messages their wake channels carried since the last
// call, in the order they were published (see states).
func (r *rig) wstates(ctx context.Context) ([]queue.WeightedState, []queue.Wake, error) {
	r.barriers++
	barrier := "barrier " + strconv.Itoa(r.barriers)
	p := r.rdb.Pipeline()
	tm := p.Time(ctx)
	reads := make([]weightedReads, len(r.locks))
	for i, k := range r.locks {
		reads[i] = weightedReads{
			hash:      p.HGetAll(ctx, k.Lock),
			hashTTL:   p.PTTL(ctx, k.Lock),
			leases:    p.ZRangeWithScores(ctx, k.Holders, 0, -1),
			leasesTTL: p.PTTL(ctx, k.Holders),
			line:      p.LRange(ctx, k.Queue, 0, -1),
			dls:       p.ZRangeWithScores(ctx, k.Deadline, 0, -1),
			joined:    p.ZRangeWithScores(ctx, k.Joined, 0, -1),
			token:     p.Get(ctx, k.Token),
			tokenTTL:  p.PTTL(ctx, k.Token),
			calls:     p.Keys(ctx, k.Call("*")),
		}
	}
	p.Publish(ctx, r.locks[0].Wake, barrier)
	if _, err := p.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, nil, err
	}
	p = r.rdb.Pipeline()
	for i := range reads {
		rd := &reads[i]
		for _, key := range rd.calls.Val() {
			rd.receipts = append(rd.receipts, p.Get(ctx, key))
			rd.receiptTTLs = append(rd.receiptTTLs, p.PTTL(ctx, key))
		}
	}
	if _, err := p.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, nil, err
	}
	now := tm.Val().UnixMilli()
	ss := make([]queue.WeightedState, len(r.locks))
	for i, k := range r.locks {
		s, err := weightedState(k, now, reads[i])
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", k.Lock, err)
		}
		ss[i] = s
	}
	msgs, err := r.messagesUntil(ctx, barrier)
	return ss, msgs, err
}

// weightedState makes the state of the weighted lock k, at server time
// now, from what wstates read of it.
func weightedState(k queue.Keys, now int64, rd weightedReads) (queue.WeightedState, error) {
	s := queue.WeightedState{Now: now, Holders: map[string]queue.Holder{}, Leases: map[string]int64{},
		Queue: rd.line.Val(), Deadlines: map[string]int64{}, Joined: map[string]int64{}, Receipts: map[string]queue.Receipt{}}
	expiry := func(d time.Duration) int64 {
		if d < 0 {
			return 0 // never, or gone
		}
		return now + d.Milliseconds()
	}
	for f, v := range rd.hash.Val() {
		var err error
		switch owner, holder := strings.CutPrefix(f, "o:"); {
		case holder:
			s.Holders[owner], err = queue.ParseHolder(v)
		case f == "permits":
			s.Capacity, err = strconv.ParseInt(v, 10, 64)
		case f == "used":
			s.Used, err = strconv.ParseInt(v, 10, 64)
		case f == "expires":
			s.Expires, err = strconv.ParseInt(v, 10, 64)
		default:
			err = fmt.Errorf("unknown field %q", f)
		}
		if err != nil {
			return s, fmt.Errorf("hash field %s=%q: %w", f, v, err)
		}
	}
	if len(rd.hash.Val()) > 0 {
		s.HashEnd = expiry(rd.hashTTL.Val())
	}
	for _, z := range rd.leases.Val() {
		s.Leases[z.Member.(string)] = int64(z.Score)
	}
	if len(s.Leases) > 0 {
		s.LeasesEnd = expiry(rd.leasesTTL.Val())
	}
	for _, z := range rd.dls.Val() {
		s.Deadlines[z.Member.(string)] = int64(z.Score)
	}
	for _, z := range rd.joined.Val() {
		s.Joined[z.Member.(string)] = int64(z.Score)
	}
	if rd.token.Err() == nil {
		n, err := strconv.ParseInt(rd.token.Val(), 10, 64)
		if err != nil {
			return s, fmt.Errorf("token counter %q: %w", rd.token.Val(), err)
		}
		s.LastToken, s.TokenEnd = n, expiry(rd.tokenTTL.Val())
	}
	for i, key := range rd.calls.Val() {
		s.Receipts[strings.TrimPrefix(key, k.Call(""))] = queue.Receipt{Answer: rd.receipts[i].Val(), ExpiresAt: expiry(rd.receiptTTLs[i].Val())}
	}
	return s, nil
}
