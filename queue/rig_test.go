package queue_test

import (
	"context"
	"errors"
	"fmt"
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

// rig runs the scripts against one lock on a Redis server, through the
// bindings of package lua that the fair package runs them with, and reads
// the lock's state back in the model's terms.
type rig struct {
	rdb        *redis.Client
	keys       queue.Keys
	ps         *redis.PubSub        // subscribed to keys.Wake
	mr         *miniredis.Miniredis // nil on a real server
	clock      time.Time            // miniredis's clock
	receiptTTL int64
	barriers   int
}

// newMiniRig returns a rig on a fresh miniredis whose clock starts at
// rigStart and moves only with advance; TTLs run down with that clock.
func newMiniRig(t testing.TB, receiptTTL int64) *rig {
	mr := miniredis.RunT(t)
	mr.SetTime(time.UnixMilli(rigStart))
	mr.ClockTTL(true)
	r := newRig(t, mr.Addr(), "m", receiptTTL)
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

// newRig returns a rig on the server at addr, with the lock's wake
// channels (the shared one and every Client's) subscribed by pattern and
// the subscription confirmed.
func newRig(t testing.TB, addr, prefix string, receiptTTL int64) *rig {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = rdb.Close() })
	k, err := queue.For(prefix, "lock")
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ps := rdb.PSubscribe(ctx, k.Wake+"*")
	t.Cleanup(func() { _ = ps.Close() })
	// The first reply on the subscription is the server's confirmation.
	msg, err := ps.Receive(ctx)
	require.NoError(t, err)
	require.IsType(t, &redis.Subscription{}, msg)
	return &rig{rdb: rdb, keys: k, ps: ps, receiptTTL: receiptTTL}
}

// advance moves miniredis's clock by d ms.
func (r *rig) advance(d int64) {
	r.clock = r.clock.Add(time.Duration(d) * time.Millisecond)
	r.mr.SetTime(r.clock)
}

func (r *rig) acquire(ctx context.Context, call, owner, entry string, lease, waiterTTL int64, mode string) (queue.Reply, error) {
	return lua.ReadAcquire(lua.Classic.Acquire(r.keys, call, owner, entry, lease, waiterTTL, mode, r.receiptTTL).Run(ctx, r.rdb))
}

func (r *rig) release(ctx context.Context, call, owner, own string, lease int64) (queue.Released, error) {
	return lua.ReadRelease(lua.Classic.Release(r.keys, call, owner, own, lease, r.receiptTTL).Run(ctx, r.rdb))
}

func (r *rig) renew(ctx context.Context, owner string, lease int64) (bool, error) {
	return lua.ReadFlag(lua.Renew(r.keys, owner, lease).Run(ctx, r.rdb))
}

func (r *rig) cancel(ctx context.Context, owner, entry string) (bool, error) {
	return lua.ReadFlag(lua.Classic.Cancel(r.keys, owner, entry).Run(ctx, r.rdb))
}

func (r *rig) forceUnlock(ctx context.Context) (bool, error) {
	return lua.ReadFlag(lua.Classic.ForceUnlock(r.keys).Run(ctx, r.rdb))
}

// now returns the server's clock in ms.
func (r *rig) now(ctx context.Context) (int64, error) {
	tm, err := r.rdb.Time(ctx).Result()
	return tm.UnixMilli(), err
}

// state reads the lock's keys and receipts, and the messages the wake
// channel carried since the last call: a barrier message published after
// the reads arrives after every message published before it.
func (r *rig) state(ctx context.Context) (queue.State, []string, error) {
	r.barriers++
	barrier := "barrier " + strconv.Itoa(r.barriers)
	p := r.rdb.Pipeline()
	tm := p.Time(ctx)
	hold := p.HGetAll(ctx, r.keys.Lock)
	pttl := p.PTTL(ctx, r.keys.Lock)
	line := p.LRange(ctx, r.keys.Queue, 0, -1)
	dls := p.ZRangeWithScores(ctx, r.keys.Deadline, 0, -1)
	token := p.Get(ctx, r.keys.Token)
	tokenTTL := p.PTTL(ctx, r.keys.Token)
	calls := p.Keys(ctx, r.keys.Call("*"))
	p.Publish(ctx, r.keys.Wake, barrier)
	if _, err := p.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return queue.State{}, nil, err
	}
	s := queue.State{Now: tm.Val().UnixMilli(), Queue: line.Val(), Deadlines: map[string]int64{}, Receipts: map[string]queue.Receipt{}}
	if h := hold.Val(); len(h) > 0 {
		hs, err := holdState(h)
		if err != nil {
			return queue.State{}, nil, err
		}
		if d := pttl.Val(); d >= 0 {
			hs.ExpiresAt = s.Now + d.Milliseconds()
		}
		s.Hold = &hs
	}
	for _, z := range dls.Val() {
		s.Deadlines[z.Member.(string)] = int64(z.Score)
	}
	if token.Err() == nil {
		n, err := strconv.ParseInt(token.Val(), 10, 64)
		if err != nil {
			return queue.State{}, nil, fmt.Errorf("token counter %q: %w", token.Val(), err)
		}
		s.LastToken = n
		if d := tokenTTL.Val(); d >= 0 {
			s.TokenEnd = s.Now + d.Milliseconds()
		}
	}
	if err := r.receipts(ctx, s, calls.Val()); err != nil {
		return queue.State{}, nil, err
	}
	msgs, err := r.messagesUntil(ctx, barrier)
	return s, msgs, err
}

// holdState converts the fields of the hold's hash.
func holdState(h map[string]string) (queue.HoldState, error) {
	var hs queue.HoldState
	var err1, err2 error
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
		default:
			return hs, fmt.Errorf("hold has an unknown field %q", f)
		}
	}
	if _, ok := h["owner"]; !ok {
		return hs, fmt.Errorf("hold without an owner: %v", h)
	}
	return hs, errors.Join(err1, err2)
}

// receipts reads the receipts named by keys into s.
func (r *rig) receipts(ctx context.Context, s queue.State, keys []string) error {
	if len(keys) == 0 {
		return nil
	}
	p := r.rdb.Pipeline()
	vals := make([]*redis.StringCmd, len(keys))
	ttls := make([]*redis.DurationCmd, len(keys))
	for i, k := range keys {
		vals[i] = p.Get(ctx, k)
		ttls[i] = p.PTTL(ctx, k)
	}
	if _, err := p.Exec(ctx); err != nil {
		return err
	}
	for i, k := range keys {
		rc := queue.Receipt{Answer: vals[i].Val()}
		if d := ttls[i].Val(); d >= 0 {
			rc.ExpiresAt = s.Now + d.Milliseconds()
		}
		s.Receipts[strings.TrimPrefix(k, r.keys.Call(""))] = rc
	}
	return nil
}

// messagesUntil returns the wake messages that arrive before barrier.
func (r *rig) messagesUntil(ctx context.Context, barrier string) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var msgs []string
	for {
		m, err := r.ps.ReceiveMessage(ctx)
		if err != nil {
			return msgs, fmt.Errorf("wake channel: %w", err)
		}
		if m.Payload == barrier {
			return msgs, nil
		}
		// A message names the entry the lock was handed to, and must go
		// out on that entry's channel.
		entry, _, _ := strings.Cut(m.Payload, " ")
		if want := r.keys.WakeOf(entry); m.Channel != want {
			return msgs, fmt.Errorf("wake message %q published on %s, not %s", m.Payload, m.Channel, want)
		}
		msgs = append(msgs, m.Payload)
	}
}
