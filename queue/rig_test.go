package queue_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/fairlock/fairlock/lua"
	"github.com/fairlock/fairlock/queue"
)

// rigStart is the server time at which a miniredis rig starts.
const rigStart = 1_700_000_000_000

// rig runs the scripts against the locks of one Redis server, through
// the bindings of package lua that the fair package runs them with, and
// reads the locks' state back in the model's terms. Its single-lock calls
// go to keys, the first of its locks (on aims them at another).
type rig struct {
	rdb        *redis.Client
	runner     *lua.Runner          // FCALL on a real server, EVALSHA on miniredis, which has no functions
	keys       queue.Keys           // the lock of the single-lock calls
	locks      []queue.Keys         // every lock of the rig, in key order
	ps         *redis.PubSub        // subscribed to the wake channels of every lock
	mr         *miniredis.Miniredis // nil on a real server
	clock      time.Time            // miniredis's clock
	receiptTTL int64
	barriers   int
}

// newMiniRig returns a rig on a fresh miniredis whose clock starts at
// rigStart and moves only with advance; TTLs run down with that clock.
// Its locks are named names (in key order), or "lock" alone.
func newMiniRig(t testing.TB, receiptTTL int64, names ...string) *rig {
	mr := startMiniredis(t)
	return newRigOf(t, mr.Addr(), receiptTTL, mutexKeys(t, "m", names...)).onMiniredis(mr)
}

// startMiniredis starts a miniredis whose clock reads rigStart and
// moves only with advance; TTLs run down with that clock.
func startMiniredis(t testing.TB) *miniredis.Miniredis {
	mr := miniredis.RunT(t)
	mr.SetTime(time.UnixMilli(rigStart))
	mr.ClockTTL(true)
	return mr
}

// onMiniredis returns the rig, which runs on mr, started by
// startMiniredis.
func (r *rig) onMiniredis(mr *miniredis.Miniredis) *rig {
	r.mr, r.clock = mr, time.UnixMilli(rigStart)
	return r
}

// newServerRig returns a rig on a redis-server of the test's own, which
// stops when the test ends, and the server.
func newServerRig(t testing.TB, receiptTTL int64) (*redistest.Server, *rig) {
	t.Helper()
	srv, err := redistest.Start()
	require.NoError(t, err)
	t.Cleanup(srv.Stop)
	return srv, newRig(t, srv.Addr, redistest.Prefix(t), receiptTTL)
}

// newRig returns a rig on the server at addr with the locks names (in key
// order), or the lock "lock" alone (see newRigOf).
func newRig(t testing.TB, addr, prefix string, receiptTTL int64, names ...string) *rig {
	return newRigOf(t, addr, receiptTTL, mutexKeys(t, prefix, names...))
}

// mutexKeys returns the keys of the locks names under prefix, or of the
// lock "lock" alone. Each has an election's Values and Leader besides,
// made from its hash key as lib.lua makes them: the scripts know a
// candidate by its entry, on whatever keys they are called, and the runs
// mix candidates among the waiters of every lock.
func mutexKeys(t testing.TB, prefix string, names ...string) []queue.Keys {
	t.Helper()
	if len(names) == 0 {
		names = []string{"lock"}
	}
	keys := make([]queue.Keys, len(names))
	for i, name := range names {
		k, err := queue.For(prefix, name)
		require.NoError(t, err)
		k.Values, k.Leader = k.Lock+":values", k.Lock+":leader"
		keys[i] = k
	}
	return keys
}

// newRigOf returns a rig on the server at addr with the locks of keys (in
// key order), with every wake channel of each (the shared one and every
// Client's) and the leader channel of each that has one subscribed by
// pattern, and the subscriptions confirmed. One connection receives them
// all, in the order they were published: miniredis keeps that order
// among the messages of patterns, but not between a pattern's and a
// channel's, so a leader channel is a pattern too, one that matches that
// channel alone (the rig's keys hold no glob character).
func newRigOf(t testing.TB, addr string, receiptTTL int64, keys []queue.Keys) *rig {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = rdb.Close() })
	r := &rig{rdb: rdb, runner: lua.NewRunner(), receiptTTL: receiptTTL, locks: keys}
	var patterns []string
	for _, k := range keys {
		patterns = append(patterns, k.Wake+"*")
		if k.Leader != "" {
			patterns = append(patterns, k.Leader)
		}
	}
	require.True(t, slices.IsSortedFunc(r.locks, func(a, b queue.Keys) int { return strings.Compare(a.Lock, b.Lock) }), "locks in key order")
	r.keys = r.locks[0]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r.ps = rdb.PSubscribe(ctx, patterns...)
	t.Cleanup(func() { _ = r.ps.Close() })
	// The first replies on the subscription are the server's confirmations.
	for range patterns {
		msg, err := r.ps.Receive(ctx)
		require.NoError(t, err)
		require.IsType(t, &redis.Subscription{}, msg)
	}
	return r
}

// on returns the rig with its single-lock calls aimed at its i-th lock.
func (r *rig) on(i int) *rig {
	c := *r
	c.keys = r.locks[i]
	return &c
}

// advance moves miniredis's clock by d ms.
func (r *rig) advance(d int64) {
	r.clock = r.clock.Add(time.Duration(d) * time.Millisecond)
	r.mr.SetTime(r.clock)
}

func (r *rig) acquire(ctx context.Context, call, owner, entry string, lease, waiterTTL int64, mode string) (queue.Reply, error) {
	return lua.ReadAcquire(r.runner.Run(ctx, r.rdb, lua.Classic.Acquire(r.keys, call, owner, entry, lease, waiterTTL, mode, r.receiptTTL)))
}

// campaign is acquire with a candidate's value (lua.Scripts.Campaign).
func (r *rig) campaign(ctx context.Context, call, owner, entry string, lease, waiterTTL int64, mode, value string) (queue.Reply, error) {
	return lua.ReadAcquire(r.runner.Run(ctx, r.rdb, lua.Classic.Campaign(r.keys, call, owner, entry, lease, waiterTTL, mode, r.receiptTTL, value)))
}

func (r *rig) proclaim(ctx context.Context, owner, entry, value string) (bool, error) {
	return lua.ReadFlag(r.runner.Run(ctx, r.rdb, lua.Classic.Proclaim(r.keys, owner, entry, value)))
}

func (r *rig) release(ctx context.Context, call, owner, own string, lease int64) (queue.Released, error) {
	return lua.ReadRelease(r.runner.Run(ctx, r.rdb, lua.Classic.Release(r.keys, call, owner, own, lease, r.receiptTTL)))
}

// releaseAll releases a level of the hold of each of locks, by owners[i]
// for locks[i], under call id call (one receipt per lock), in one call.
func (r *rig) releaseAll(ctx context.Context, locks []queue.Keys, call string, owners []string, own string, lease int64) ([]queue.Released, error) {
	rs := make([]lua.Releasing, len(locks))
	for i, k := range locks {
		rs[i] = lua.Releasing{Keys: k, Call: call, Owner: owners[i], Lease: lease, ReceiptTTL: r.receiptTTL}
	}
	return lua.ReadReleaseAll(r.runner.Run(ctx, r.rdb, lua.Classic.ReleaseAll(rs, own)), len(locks))
}

func (r *rig) renew(ctx context.Context, owner string, lease int64) (bool, error) {
	return lua.ReadFlag(r.runner.Run(ctx, r.rdb, lua.Renew(r.keys, owner, lease)))
}

func (r *rig) cancel(ctx context.Context, owner, entry string) (bool, error) {
	return lua.ReadFlag(r.runner.Run(ctx, r.rdb, lua.Classic.Cancel(r.keys, owner, entry)))
}

func (r *rig) forceUnlock(ctx context.Context) (bool, error) {
	return lua.ReadFlag(r.runner.Run(ctx, r.rdb, lua.Classic.ForceUnlock(r.keys)))
}

func (r *rig) multiAcquire(ctx context.Context, locks []queue.Keys, owner, entry string, lease, waiterTTL int64, mode string) (queue.Reply, error) {
	return lua.ReadMultiAcquire(r.runner.Run(ctx, r.rdb, lua.Classic.MultiAcquire(locks, owner, entry, lease, waiterTTL, mode)), len(locks))
}

func (r *rig) cancelTicket(ctx context.Context, locks []queue.Keys, owner, entry string) (bool, error) {
	return lua.ReadFlag(r.runner.Run(ctx, r.rdb, lua.Classic.CancelTicket(locks, owner, entry)))
}

// now returns the server's clock in ms.
func (r *rig) now(ctx context.Context) (int64, error) {
	tm, err := r.rdb.Time(ctx).Result()
	return tm.UnixMilli(), err
}

// state reads the state of the rig's first lock, and the messages its
// wake channels carried since the last call (see states): what the tests
// of one lock compare.
func (r *rig) state(ctx context.Context) (queue.State, []string, error) {
	ss, wakes, err := r.states(ctx)
	if err != nil {
		return queue.State{}, nil, err
	}
	var msgs []string
	for _, w := range wakes {
		msgs = append(msgs, w.Message)
	}
	return ss[0], msgs, nil
}

// lockReads is what states reads of one lock: its keys, then the
// receipts and tickets' keys they name.
type lockReads struct {
	hold, values          *redis.MapStringStringCmd // values: nil for a lock without Values
	pttl, tokenTTL        *redis.DurationCmd
	line                  *redis.StringSliceCmd
	dls, joined           *redis.ZSliceCmd
	token                 *redis.StringCmd
	calls, ticketLists    *redis.StringSliceCmd
	receipts              []*redis.StringCmd      // of calls, in order
	lists                 []*redis.StringSliceCmd // of ticketLists, in order
	receiptTTLs, listTTLs []*redis.DurationCmd
}

// states reads the keys, receipts and tickets' keys of every lock, and
// the messages their wake and leader channels carried since the last
// call, in the order they were published: a barrier message published
// after the reads arrives after every message published before it.
func (r *rig) states(ctx context.Context) ([]queue.State, []queue.Wake, error) {
	r.barriers++
	barrier := "barrier " + strconv.Itoa(r.barriers)
	p := r.rdb.Pipeline()
	tm := p.Time(ctx)
	reads := make([]lockReads, len(r.locks))
	for i, k := range r.locks {
		reads[i] = lockReads{
			hold:        p.HGetAll(ctx, k.Lock),
			pttl:        p.PTTL(ctx, k.Lock),
			line:        p.LRange(ctx, k.Queue, 0, -1),
			dls:         p.ZRangeWithScores(ctx, k.Deadline, 0, -1),
			joined:      p.ZRangeWithScores(ctx, k.Joined, 0, -1),
			token:       p.Get(ctx, k.Token),
			tokenTTL:    p.PTTL(ctx, k.Token),
			calls:       p.Keys(ctx, k.Call("*")),
			ticketLists: p.Keys(ctx, k.TicketKey("*")),
		}
		if k.Values != "" {
			reads[i].values = p.HGetAll(ctx, k.Values)
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
		for _, key := range rd.ticketLists.Val() {
			rd.lists = append(rd.lists, p.LRange(ctx, key, 0, -1))
			rd.listTTLs = append(rd.listTTLs, p.PTTL(ctx, key))
		}
	}
	if _, err := p.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, nil, err
	}
	now := tm.Val().UnixMilli()
	ss := make([]queue.State, len(r.locks))
	for i, k := range r.locks {
		s, err := lockState(k, now, reads[i])
		if err != nil {
			return nil, nil, err
		}
		ss[i] = s
	}
	msgs, err := r.messagesUntil(ctx, barrier)
	return ss, msgs, err
}

// lockState makes the state of the lock k, at server time now, from what
// states read of it.
func lockState(k queue.Keys, now int64, rd lockReads) (queue.State, error) {
	s := queue.State{Now: now, Queue: rd.line.Val(), Deadlines: map[string]int64{}, Joined: map[string]int64{},
		Receipts: map[string]queue.Receipt{}, Tickets: map[string]queue.TicketList{}, Values: map[string]string{}}
	if rd.values != nil {
		s.Values = rd.values.Val()
	}
	expiry := func(d time.Duration) int64 {
		if d < 0 {
			return 0 // never, or gone
		}
		return now + d.Milliseconds()
	}
	if h := rd.hold.Val(); len(h) > 0 {
		hs, err := holdState(h)
		if err != nil {
			return queue.State{}, err
		}
		hs.ExpiresAt = expiry(rd.pttl.Val())
		s.Hold = &hs
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
			return queue.State{}, fmt.Errorf("token counter %q: %w", rd.token.Val(), err)
		}
		s.LastToken, s.TokenEnd = n, expiry(rd.tokenTTL.Val())
	}
	for i, key := range rd.calls.Val() {
		s.Receipts[strings.TrimPrefix(key, k.Call(""))] = queue.Receipt{Answer: rd.receipts[i].Val(), ExpiresAt: expiry(rd.receiptTTLs[i].Val())}
	}
	// The keys of every ticket of the server: those that name k.
	for i, key := range rd.ticketLists.Val() {
		list := rd.lists[i].Val()
		if len(list) == 0 || !slices.Contains(list[1:], k.Lock) {
			continue
		}
		joined, err := strconv.ParseInt(list[0], 10, 64)
		if err != nil {
			return queue.State{}, fmt.Errorf("ticket %s joined at %q: %w", key, list[0], err)
		}
		s.Tickets[strings.TrimPrefix(key, k.TicketKey(""))] = queue.TicketList{Joined: joined, Locks: list[1:],
			ExpiresAt: expiry(rd.listTTLs[i].Val())}
	}
	return s, nil
}

// holdState converts the fields of the hold's hash.
func holdState(h map[string]string) (queue.HoldState, error) {
	var hs queue.HoldState
	var err1, err2, err3 error
	for f, v := range h {
		switch f {
		case "owner":
			hs.Owner = v
		case "count":
			hs.Count, err1 = strconv.Atoi(v)
		case "token":
			hs.Token, err2 = strconv.ParseInt(v, 10, 64)
		case "entry":
			hs.Entry = v
		case "since":
			hs.Since, err3 = strconv.ParseInt(v, 10, 64)
		case "value":
			hs.Value, hs.HasValue = v, true
		default:
			return hs, fmt.Errorf("hold has an unknown field %q", f)
		}
	}
	if _, ok := h["owner"]; !ok {
		return hs, fmt.Errorf("hold without an owner: %v", h)
	}
	return hs, errors.Join(err1, err2, err3)
}

// messagesUntil returns the wake and leader messages that arrive before
// barrier, with the lock on whose channels each came.
func (r *rig) messagesUntil(ctx context.Context, barrier string) ([]queue.Wake, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var msgs []queue.Wake
	for {
		m, err := r.ps.ReceiveMessage(ctx)
		if err != nil {
			return msgs, fmt.Errorf("wake channel: %w", err)
		}
		if m.Payload == barrier {
			return msgs, nil
		}
		if i := slices.IndexFunc(r.locks, func(k queue.Keys) bool { return k.Leader != "" && k.Leader == m.Pattern }); i >= 0 {
			msgs = append(msgs, queue.Wake{Lock: r.locks[i].Lock, Message: m.Payload, Leader: true})
			continue
		}
		i := slices.IndexFunc(r.locks, func(k queue.Keys) bool { return k.Wake+"*" == m.Pattern })
		if i < 0 {
			return msgs, fmt.Errorf("wake message %q on %s, which matches none of the rig's patterns", m.Payload, m.Channel)
		}
		// A message names the entry the lock was handed to, and must go
		// out on that entry's channel.
		if want := r.locks[i].WakeOf(queue.EntryOf(m.Payload)); m.Channel != want {
			return msgs, fmt.Errorf("wake message %q published on %s, not %s", m.Payload, m.Channel, want)
		}
		msgs = append(msgs, queue.Wake{Lock: r.locks[i].Lock, Message: m.Payload})
	}
}
