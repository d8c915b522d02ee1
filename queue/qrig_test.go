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

// qrig runs the quorum scripts on one master, a real redis-server,
// through the bindings of package lua, and reads the lock's state there
// back in the model's terms.
type qrig struct {
	rdb      *redis.Client
	k        queue.Keys
	ps       *redis.PubSub // subscribed to every wake channel of the lock, and to its leader channel
	barriers int
}

// newQRig returns a rig of the quorum lock "q" under prefix on the server
// at addr, with its wake channels and its leader channel subscribed and
// every script loaded, so that a call can go by its SHA1 alone between
// two readings of the clock. Its keys have an election's Values and
// Leader besides, made from its hash key as lib.lua makes them: the
// scripts know a candidate by its entry, on whatever keys they are
// called, and the runs mix candidates among the other waiters. One
// connection receives the messages of both channels, in the order they
// were published.
func newQRig(ctx context.Context, rdb *redis.Client, prefix string) (*qrig, error) {
	k, err := queue.Quorum(prefix, "q")
	if err != nil {
		return nil, err
	}
	k.Values, k.Leader = k.Lock+":values", k.Lock+":leader"
	r := &qrig{rdb: rdb, k: k, ps: rdb.PSubscribe(ctx, k.Wake+"*", k.Leader)}
	for range 2 {
		if msg, err := r.ps.Receive(ctx); err != nil {
			_ = r.ps.Close()
			return nil, err
		} else if _, ok := msg.(*redis.Subscription); !ok {
			_ = r.ps.Close()
			return nil, fmt.Errorf("subscription not confirmed: %v", msg)
		}
	}
	s := lua.Classic
	if err := lua.Load(ctx, rdb, s.Library); err != nil {
		_ = r.ps.Close()
		return nil, err
	}
	for _, c := range []lua.Call{
		s.QTry(k, "c", "o", "e", 1, 1, queue.ModeTry, 1, 0), s.QJoin(k, "o", "e", 1, 1, 1, 0, 0),
		s.QCancel(k, "e", 1, 1, 0), s.QRelease(k, "c", "o", "e", 0, 1, true, 1, 1, 1, 0),
		s.QForce(k, 1, 0), lua.QRenew(k, "o", 1), lua.Classic.QCommit(k, "o", 1, 1, 1, 0),
		s.QProclaim(k, "o", "e", "v", 1),
	} {
		if err := c.Script.Load(ctx, rdb).Err(); err != nil {
			_ = r.ps.Close()
			return nil, err
		}
	}
	return r, nil
}

func (r *qrig) close() { _ = r.ps.Close() }

// run sends c between two readings of the server's clock, in one
// pipeline, and returns its reply and the two readings (µs): the script
// read the clock between them.
func (r *qrig) run(ctx context.Context, c lua.Call) (cmd *redis.Cmd, from, to int64, err error) {
	p := r.rdb.Pipeline()
	t1 := p.Time(ctx)
	via := lua.BySHA // the library's function where the call has one
	if c.Function != "" {
		via = lua.ByFunction
	}
	cmd = c.Send(ctx, p, via)
	t2 := p.Time(ctx)
	if _, err := p.Exec(ctx); err != nil && t2.Err() != nil {
		return nil, 0, 0, err
	}
	return cmd, t1.Val().UnixMicro(), t2.Val().UnixMicro(), nil
}

// del deletes key: the end a key's expiry would make.
func (r *qrig) del(ctx context.Context, key string) error { return r.rdb.Del(ctx, key).Err() }

// qreads is what state reads of the lock: its keys, then the tombstones'
// and receipts' keys they name.
type qreads struct {
	hold, values            *redis.MapStringStringCmd
	holdTTL                 *redis.DurationCmd
	line, deadlines, joined *redis.ZSliceCmd
	counter, ticket         *redis.StringCmd
	counterTTL, ticketTTL   *redis.DurationCmd
	gone, calls             *redis.StringSliceCmd
	goneTTLs, receiptTTLs   []*redis.DurationCmd // of gone and calls, in order
	receipts                []*redis.StringCmd   // of calls, in order
	now, later              int64                // the server's clock (ms) as each of the two reads began
}

// state reads the lock's state, and the wake and leader messages its
// channels carried since the last call, in the order they were published
// (a barrier published after the reads arrives after all of them).
func (r *qrig) state(ctx context.Context) (queue.QuorumState, []queue.Wake, error) {
	r.barriers++
	barrier := "barrier " + strconv.Itoa(r.barriers)
	k := r.k
	p := r.rdb.Pipeline()
	tm := p.Time(ctx)
	rd := qreads{
		hold: p.HGetAll(ctx, k.Lock), holdTTL: p.PTTL(ctx, k.Lock), values: p.HGetAll(ctx, k.Values),
		line: p.ZRangeWithScores(ctx, k.Queue, 0, -1), deadlines: p.ZRangeWithScores(ctx, k.Deadline, 0, -1),
		joined:  p.ZRangeWithScores(ctx, k.Joined, 0, -1),
		counter: p.Get(ctx, k.Token), counterTTL: p.PTTL(ctx, k.Token),
		ticket: p.Get(ctx, k.Ticket), ticketTTL: p.PTTL(ctx, k.Ticket),
		gone: p.Keys(ctx, k.Gone("*")), calls: p.Keys(ctx, k.Call("*")),
	}
	p.Publish(ctx, k.Wake, barrier)
	if _, err := p.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return queue.QuorumState{}, nil, err
	}
	p = r.rdb.Pipeline()
	tm2 := p.Time(ctx)
	for _, key := range rd.gone.Val() {
		rd.goneTTLs = append(rd.goneTTLs, p.PTTL(ctx, key))
	}
	for _, key := range rd.calls.Val() {
		rd.receipts = append(rd.receipts, p.Get(ctx, key))
		rd.receiptTTLs = append(rd.receiptTTLs, p.PTTL(ctx, key))
	}
	if _, err := p.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return queue.QuorumState{}, nil, err
	}
	rd.now, rd.later = tm.Val().UnixMilli(), tm2.Val().UnixMilli()
	s, err := r.stateOf(rd)
	if err != nil {
		return s, nil, err
	}
	msgs, err := r.messagesUntil(ctx, barrier)
	return s, msgs, err
}

// stateOf makes the lock's state from what state read.
func (r *qrig) stateOf(rd qreads) (queue.QuorumState, error) {
	now := rd.now
	s := queue.QuorumState{Now: now, Tickets: map[string]int64{}, Deadlines: map[string]int64{},
		Gone: map[string]int64{}, Receipts: map[string]queue.Receipt{}, Values: rd.values.Val()}
	expiry := func(d time.Duration) int64 { return expiryAt(now, d) }
	if h := rd.hold.Val(); len(h) > 0 {
		hs, err := quorumHold(h)
		if err != nil {
			return s, err
		}
		hs.ExpiresAt = expiry(rd.holdTTL.Val())
		s.Hold = &hs
	}
	for _, z := range rd.line.Val() {
		e := z.Member.(string)
		s.Queue = append(s.Queue, e)
		s.Tickets[e] = int64(z.Score)
	}
	for _, z := range rd.deadlines.Val() {
		s.Deadlines[z.Member.(string)] = int64(z.Score)
	}
	if n := len(rd.joined.Val()); n > 0 {
		// A waiter's ticket tells when it joined: a quorum lock keeps no
		// times of joining.
		return s, fmt.Errorf("the times of joining hold %d entries, want none", n)
	}
	var err1, err2 error
	if rd.counter.Err() == nil {
		s.Counter, err1 = strconv.ParseInt(rd.counter.Val(), 10, 64)
		s.CounterAt = expiry(rd.counterTTL.Val())
	}
	if rd.ticket.Err() == nil {
		s.Ticket, err2 = strconv.ParseInt(rd.ticket.Val(), 10, 64)
		s.TicketAt = expiry(rd.ticketTTL.Val())
	}
	if err := errors.Join(err1, err2); err != nil {
		return s, fmt.Errorf("counters %q, %q: %w", rd.counter.Val(), rd.ticket.Val(), err)
	}
	for i, key := range rd.gone.Val() {
		s.Gone[strings.TrimPrefix(key, r.k.Gone(""))] = expiryAt(rd.later, rd.goneTTLs[i].Val())
	}
	for i, key := range rd.calls.Val() {
		s.Receipts[strings.TrimPrefix(key, r.k.Call(""))] = queue.Receipt{Answer: rd.receipts[i].Val(), ExpiresAt: expiryAt(rd.later, rd.receiptTTLs[i].Val())}
	}
	return s, nil
}

// expiryAt is the time (ms) at which a key read at now with PTTL d
// expires; 0 when it never does, or is gone.
func expiryAt(now int64, d time.Duration) int64 {
	if d < 0 {
		return 0
	}
	return now + d.Milliseconds()
}

// quorumHold converts the fields of a quorum lock's hash; one without an
// owner is read as a hold whose Owner is "".
func quorumHold(h map[string]string) (queue.QuorumHold, error) {
	var hs queue.QuorumHold
	var errs []error
	num := func(v string) int64 {
		n, err := strconv.ParseInt(v, 10, 64)
		errs = append(errs, err)
		return n
	}
	for f, v := range h {
		switch f {
		case "owner":
			hs.Owner = v
		case "count":
			hs.Count = int(num(v))
		case "token":
			hs.Token = num(v)
		case "entry":
			hs.Entry = v
		case "since":
			hs.Since = num(v)
		case "ticket":
			hs.Ticket, hs.Ticketed = num(v), true
		case "inquired":
			hs.Inquired = v
		case "expires":
			hs.Expires = num(v)
		case "value":
			hs.Value, hs.HasValue = v, true
		case "vseq":
			hs.Vseq, hs.HasVseq = num(v), true
		case "term":
			hs.Term, hs.HasTerm = num(v), true
		default:
			return hs, fmt.Errorf("hold has an unknown field %q", f)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return hs, fmt.Errorf("hold %v: %w", h, err)
	}
	return hs, nil
}

// messagesUntil returns the wake and leader messages that arrive before
// barrier, each wake message checked to have gone out on the channel of
// the entry it names.
func (r *qrig) messagesUntil(ctx context.Context, barrier string) ([]queue.Wake, error) {
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
		if m.Channel == r.k.Leader {
			msgs = append(msgs, queue.Wake{Message: m.Payload, Leader: true})
			continue
		}
		if want := r.k.WakeOf(queue.EntryOf(m.Payload)); m.Channel != want {
			return msgs, fmt.Errorf("wake message %q published on %s, not %s", m.Payload, m.Channel, want)
		}
		msgs = append(msgs, queue.Wake{Message: m.Payload})
	}
}
