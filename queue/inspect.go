package queue

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Reader is what Inspect needs of a go-redis client.
type Reader interface {
	TxPipeline() redis.Pipeliner
}

var _ Reader = (redis.UniversalClient)(nil)

// WaiterState is one entry of a lock's queue.
type WaiterState struct {
	Entry     string        // the raw entry
	ID        string        // waiter id of the Lock call
	Tag       string        // tag of the waiting Client (TagOf); "" when the id has none
	Owner     string        // owner id it waits for
	Lease     time.Duration // lease its hold will have
	Deadline  time.Time     // server time by which it must poll again; zero if it has none
	Remaining time.Duration // Deadline minus the server's now (negative: due to be pruned)
}

// Snapshot is the state of one lock at one instant of the server's clock.
type Snapshot struct {
	Name      string
	Now       time.Time     // the server's clock
	Held      bool          // someone holds the lock
	Owner     string        // holder's owner id
	Count     int           // holder's levels
	Token     int64         // holder's fencing token
	Entry     string        // waiter entry the hold was given to
	Tag       string        // tag of the Client the hold was given to (TagOf(Entry)); "" when not known
	TTL       time.Duration // remaining lease
	Waiters   []WaiterState // the queue, oldest first
	Orphans   []string      // deadline entries missing from the queue (should never happen)
	LastToken int64         // the fencing counter: the token of the latest fresh grant; 0 once it expired
	TokenTTL  time.Duration // the counter's time left; 0 when there is none, negative when it never expires
}

// Inspect reads a snapshot of one lock in a single transaction. It is a
// debugging aid: it changes nothing, and what it shows may be stale the
// moment it returns.
func Inspect(ctx context.Context, rdb Reader, k Keys) (Snapshot, error) {
	var (
		tm    *redis.TimeCmd
		hold  *redis.MapStringStringCmd
		pttl  *redis.DurationCmd
		queue *redis.StringSliceCmd
		dls   *redis.ZSliceCmd
		token *redis.StringCmd
		tttl  *redis.DurationCmd
	)
	p := rdb.TxPipeline()
	tm = p.Time(ctx)
	hold = p.HGetAll(ctx, k.Lock)
	pttl = p.PTTL(ctx, k.Lock)
	queue = p.LRange(ctx, k.Queue, 0, -1)
	dls = p.ZRangeWithScores(ctx, k.Deadline, 0, -1)
	token = p.Get(ctx, k.Token)
	tttl = p.PTTL(ctx, k.Token)
	if cmds, err := p.Exec(ctx); firstErr(cmds, err) != nil {
		return Snapshot{}, fmt.Errorf("fairlock: inspect %q: %w", k.Name, firstErr(cmds, err))
	}
	s := Snapshot{Name: k.Name, Now: tm.Val()}
	if h := hold.Val(); len(h) > 0 {
		s.Held = true
		s.Owner = h["owner"]
		s.Count, _ = strconv.Atoi(h["count"])
		s.Token, _ = strconv.ParseInt(h["token"], 10, 64)
		s.Entry = h["entry"]
		s.Tag = TagOf(s.Entry)
		if d := pttl.Val(); d > 0 {
			s.TTL = d
		}
	}
	s.LastToken, _ = strconv.ParseInt(token.Val(), 10, 64)
	switch d := tttl.Val(); {
	case s.LastToken == 0:
	case d == -1: // PTTL's answer for a key without an expiry
		s.TokenTTL = -1
	case d > 0:
		s.TokenTTL = d
	}
	deadline := make(map[string]float64, len(dls.Val()))
	for _, z := range dls.Val() {
		deadline[z.Member.(string)] = z.Score
	}
	for _, e := range queue.Val() {
		w := WaiterState{Entry: e}
		w.ID, w.Lease, w.Owner, _ = splitEntry(e)
		w.Tag = TagOf(e)
		if ms, ok := deadline[e]; ok {
			w.Deadline = time.UnixMilli(int64(ms))
			w.Remaining = w.Deadline.Sub(s.Now)
			delete(deadline, e)
		}
		s.Waiters = append(s.Waiters, w)
	}
	for e := range deadline {
		s.Orphans = append(s.Orphans, e)
	}
	return s, nil
}

// firstErr returns the error that explains a failed transaction: the
// reply that refused one of cmds when it was queued, such as a NOPERM,
// rather than the EXECABORT that the other commands got, else the first
// error of cmds, else err. redis.Nil (a missing token counter) is no
// error.
func firstErr(cmds []redis.Cmder, err error) error {
	var first error
	for _, c := range cmds {
		cerr := c.Err()
		switch {
		case cerr == nil || errors.Is(cerr, redis.Nil):
		case !strings.HasPrefix(cerr.Error(), "EXECABORT"):
			return cerr
		case first == nil:
			first = cerr
		}
	}
	if first != nil {
		return first
	}
	if errors.Is(err, redis.Nil) {
		return nil
	}
	return err
}

// String renders the snapshot for people.
func (s Snapshot) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "lock %q at %s (server clock)\n", s.Name, s.Now.UTC().Format(time.RFC3339Nano))
	if s.Held {
		fmt.Fprintf(&b, "  held by %s: %d level(s), token %d, lease left %v", s.Owner, s.Count, s.Token, s.TTL)
		if s.Tag != "" {
			fmt.Fprintf(&b, ", granted through client %s", s.Tag)
		}
		b.WriteString("\n")
	} else {
		b.WriteString("  free\n")
	}
	switch {
	case s.LastToken == 0:
		b.WriteString("  no token counter (expired, or never written)\n")
	case s.TokenTTL < 0:
		fmt.Fprintf(&b, "  last token %d, counter never expires\n", s.LastToken)
	default:
		fmt.Fprintf(&b, "  last token %d, counter expires in %v\n", s.LastToken, s.TokenTTL)
	}
	fmt.Fprintf(&b, "  %d waiter(s)\n", len(s.Waiters))
	for i, w := range s.Waiters {
		due := "no deadline"
		if !w.Deadline.IsZero() {
			due = "deadline in " + w.Remaining.String()
		}
		fmt.Fprintf(&b, "  %3d. %s (waiter %s, lease %v, %s)\n", i+1, w.Owner, w.ID, w.Lease, due)
	}
	for _, e := range s.Orphans {
		fmt.Fprintf(&b, "  orphan deadline entry %s\n", e)
	}
	return b.String()
}
