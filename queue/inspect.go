package queue

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Reader is what Inspect needs of a go-redis client.
type Reader interface {
	TxPipeline() redis.Pipeliner
	Pipeline() redis.Pipeliner
}

var _ Reader = (redis.UniversalClient)(nil)

// KindMutex names a Mutex's keys in a Snapshot (a lock of one server, or
// a quorum lock's keys on one master), beside KindSemaphore and
// KindRWMutex.
const KindMutex = "mutex"

// KindElection names an Election's keys in a Snapshot (see Election): a
// Mutex's, whose hold is the leadership and whose waiters are
// candidates, each with its value.
const KindElection = "election"

// WaiterState is one entry of a lock's line.
type WaiterState struct {
	Entry     string        // the raw entry
	ID        string        // waiter id of the Lock call
	Tag       string        // tag of the waiting Client (TagOf); "" when the id has none
	Owner     string        // owner id it waits for
	Lease     time.Duration // lease its hold will have
	Weight    int64         // a weighted lock's waiter: the weight it asks for (a RWMutex's writer: RWCapacity); 1 otherwise
	Exclusive bool          // a RWMutex's writer
	// Ticket is set for a MultiLock's ticket: one entry in the lines of
	// several locks. Locks names them all, in key order, this one among
	// them; nil when the ticket's key was not found (it ended meanwhile).
	// A ticket's Joined is read from that key too (zero when not found).
	Ticket bool
	Locks  []string
	// Value is an Election's candidate's value, read beside the line
	// (Keys.Values); "" for other waiters, or when it was not found.
	Value     string
	Joined    time.Time     // server time at which it joined the line (a quorum lock's: its ticket's, the doorway's time); zero when not known
	Waited    time.Duration // the server's now minus Joined; 0 when not known
	Deadline  time.Time     // server time by which it must poll again; zero if it has none
	Remaining time.Duration // Deadline minus the server's now (negative: due to be pruned)
}

// HolderState is one hold of a lock: a Mutex's only holder, or one of a
// weighted lock's.
type HolderState struct {
	Owner  string // owner id
	Entry  string // the waiter entry the hold was granted to; "" when not known
	Tag    string // tag of the Client it was granted through (TagOf(Entry)); "" when not known
	Weight int64  // a Semaphore's permits, a RWMutex's RWCapacity for a writer and 1 for a reader; a Mutex's 1
	Shared int    // levels: a Mutex's count, a RWMutex's read levels, a Semaphore's 1
	Excl   int    // a RWMutex's write levels
	Token  int64  // fencing token
	// Since is the server time of the grant (kept through re-entries, a
	// RWMutex's downgrade); zero when not known. HeldFor is the server's
	// now minus Since.
	Since   time.Time
	HeldFor time.Duration
	TTL     time.Duration // remaining lease
	Value   string        // an Election's leadership's value; "" for other locks
}

// Snapshot is the state of one lock at one instant of the server's clock.
type Snapshot struct {
	Name     string
	Kind     string // KindMutex, KindSemaphore, KindRWMutex or KindElection
	Now      time.Time
	Capacity int64 // a weighted lock's stored capacity (a Semaphore's permits); 0 when none is stored
	Used     int64 // a weighted lock's weights held
	// Holders are the holds, in the order of their grants.
	Holders []HolderState
	// The Mutex's hold, Holders[0], field by field (all zero when free).
	Held      bool
	Owner     string
	Count     int
	Token     int64
	Entry     string
	Tag       string
	TTL       time.Duration
	Waiters   []WaiterState // the line, oldest first (a quorum lock's: by ticket)
	Orphans   []string      // deadline entries missing from the line (should never happen)
	LastToken int64         // the fencing counter: the token of the latest fresh grant; 0 once it expired
	TokenTTL  time.Duration // the counter's time left; 0 when there is none, negative when it never expires
}

// InUse reports whether anyone holds the lock or waits for it.
func (s Snapshot) InUse() bool { return len(s.Holders) > 0 || len(s.Waiters) > 0 }

// Inspect reads a snapshot of one Mutex (k from For or Quorum) in a
// single transaction, and the keys of the MultiLock tickets in its line
// (their locks' names and times of joining) in one more round trip. It is a debugging aid: it changes
// nothing, and what it shows may be stale the moment it returns.
func Inspect(ctx context.Context, rdb Reader, k Keys) (Snapshot, error) {
	ss, err := inspect(ctx, rdb, []lockOfKind{{k, KindMutex}})
	if err != nil {
		return Snapshot{}, err
	}
	return ss[0], nil
}

// InspectElection is Inspect for an Election (k from Election): the
// leadership's value with its hold, and each candidate's value with its
// entry in line.
func InspectElection(ctx context.Context, rdb Reader, k Keys) (Snapshot, error) {
	ss, err := inspect(ctx, rdb, []lockOfKind{{k, KindElection}})
	if err != nil {
		return Snapshot{}, err
	}
	return ss[0], nil
}

// InspectWeighted is Inspect for a weighted lock of kind KindSemaphore or
// KindRWMutex (k from Weighted).
func InspectWeighted(ctx context.Context, rdb Reader, k Keys, kind string) (Snapshot, error) {
	ss, err := inspect(ctx, rdb, []lockOfKind{{k, kind}})
	if err != nil {
		return Snapshot{}, err
	}
	return ss[0], nil
}

// InspectAll reads the Mutex, the Semaphore, the RWMutex and the
// Election of the name under prefix in one transaction (their keys share
// a hash tag, so one server, one slot), and returns the snapshot of
// each, in that order (Snapshot.InUse tells those in use).
func InspectAll(ctx context.Context, rdb Reader, prefix, name string) ([]Snapshot, error) {
	m, err := For(prefix, name)
	if err != nil {
		return nil, err
	}
	sem, _ := Weighted(prefix, name, KindSemaphore)
	rw, _ := Weighted(prefix, name, KindRWMutex)
	el, _ := Election(prefix, name)
	return inspect(ctx, rdb, []lockOfKind{{m, KindMutex}, {sem, KindSemaphore}, {rw, KindRWMutex}, {el, KindElection}})
}

// lockOfKind is one lock for inspect to read.
type lockOfKind struct {
	k    Keys
	kind string
}

// reads are the commands inspect queues for one lock.
type reads struct {
	hold          *redis.MapStringStringCmd
	pttl          *redis.DurationCmd
	list          *redis.StringSliceCmd // a list line
	zline         *redis.ZSliceCmd      // an ordered line (a quorum lock's)
	leases        *redis.ZSliceCmd      // a weighted lock's holders set
	dls, joined   *redis.ZSliceCmd
	token         *redis.StringCmd
	tokenTTL      *redis.DurationCmd
	values        *redis.MapStringStringCmd // an Election's candidates' values
	ordered, wght bool
}

// inspect reads the locks in one transaction, then the keys of the
// tickets their lines hold.
func inspect(ctx context.Context, rdb Reader, locks []lockOfKind) ([]Snapshot, error) {
	p := rdb.TxPipeline()
	tm := p.Time(ctx)
	rs := make([]reads, len(locks))
	for i, l := range locks {
		r := &rs[i]
		r.ordered, r.wght = l.k.Ticket != "", l.kind == KindSemaphore || l.kind == KindRWMutex
		r.hold = p.HGetAll(ctx, l.k.Lock)
		r.pttl = p.PTTL(ctx, l.k.Lock)
		if r.ordered {
			r.zline = p.ZRangeWithScores(ctx, l.k.Queue, 0, -1)
		} else {
			r.list = p.LRange(ctx, l.k.Queue, 0, -1)
		}
		if r.wght {
			r.leases = p.ZRangeWithScores(ctx, l.k.Holders, 0, -1)
		}
		r.dls = p.ZRangeWithScores(ctx, l.k.Deadline, 0, -1)
		r.joined = p.ZRangeWithScores(ctx, l.k.Joined, 0, -1)
		r.token = p.Get(ctx, l.k.Token)
		r.tokenTTL = p.PTTL(ctx, l.k.Token)
		if l.k.Values != "" {
			r.values = p.HGetAll(ctx, l.k.Values)
		}
	}
	if cmds, err := p.Exec(ctx); firstErr(cmds, err) != nil {
		return nil, fmt.Errorf("fairlock: inspect %q: %w", locks[0].k.Name, firstErr(cmds, err))
	}
	ss := make([]Snapshot, len(locks))
	for i, l := range locks {
		s, err := build(l, tm.Val(), &rs[i])
		if err != nil {
			return nil, fmt.Errorf("fairlock: inspect %q: %w", l.k.Name, err)
		}
		ss[i] = s
	}
	if err := readTickets(ctx, rdb, locks, ss); err != nil {
		return nil, fmt.Errorf("fairlock: inspect %q: %w", locks[0].k.Name, err)
	}
	return ss, nil
}

// build makes the snapshot of lock l at server time now from r.
func build(l lockOfKind, now time.Time, r *reads) (Snapshot, error) {
	s := Snapshot{Name: l.k.Name, Kind: l.kind, Now: now}
	at := func(ms float64) time.Time { return time.UnixMilli(int64(ms)) }
	if r.wght {
		if err := s.weightedHolders(r, at); err != nil {
			return s, err
		}
	} else if h := r.hold.Val(); h["owner"] != "" {
		hs := HolderState{Owner: h["owner"], Entry: h["entry"], Tag: TagOf(h["entry"]), Weight: 1, Value: h["value"]}
		hs.Shared, _ = strconv.Atoi(h["count"])
		hs.Token, _ = strconv.ParseInt(h["token"], 10, 64)
		if ms, err := strconv.ParseInt(h["since"], 10, 64); err == nil {
			hs.Since, hs.HeldFor = time.UnixMilli(ms), now.Sub(time.UnixMilli(ms))
		}
		if d := r.pttl.Val(); d > 0 {
			hs.TTL = d
		}
		s.Holders = []HolderState{hs}
		s.Held, s.Owner, s.Count, s.Token, s.Entry, s.Tag, s.TTL = true, hs.Owner, hs.Shared, hs.Token, hs.Entry, hs.Tag, hs.TTL
	}
	s.LastToken, _ = strconv.ParseInt(r.token.Val(), 10, 64)
	switch d := r.tokenTTL.Val(); {
	case s.LastToken == 0:
	case d == -1: // PTTL's answer for a key without an expiry
		s.TokenTTL = -1
	case d > 0:
		s.TokenTTL = d
	}
	deadline := make(map[string]float64, len(r.dls.Val()))
	for _, z := range r.dls.Val() {
		deadline[z.Member.(string)] = z.Score
	}
	joined := make(map[string]float64, len(r.joined.Val()))
	for _, z := range r.joined.Val() {
		joined[z.Member.(string)] = z.Score
	}
	var line []string
	if r.ordered {
		// A quorum lock keeps no times of joining: a waiter's ticket, drawn
		// from the masters' clocks (µs) at its doorway, is when it came.
		for _, z := range r.zline.Val() {
			e := z.Member.(string)
			line = append(line, e)
			if _, ok := joined[e]; !ok {
				joined[e] = float64(int64(z.Score) / 1000)
			}
		}
	} else {
		line = r.list.Val()
	}
	for _, e := range line {
		w := WaiterState{Entry: e, Tag: TagOf(e), Weight: 1}
		w.ID, w.Lease, w.Owner, _ = splitEntry(e)
		if r.wght {
			if owner, _, weight, excl, ok := parseWeighted(e); ok {
				w.Owner, w.Weight, w.Exclusive = owner, weight, excl
			}
		}
		w.Ticket = isTicket(e)
		if r.values != nil {
			w.Value = r.values.Val()[e]
		}
		if ms, ok := joined[e]; ok {
			w.Joined = at(ms)
			w.Waited = max(now.Sub(w.Joined), 0) // a ticket from a clock ahead of this one's
		}
		if ms, ok := deadline[e]; ok {
			w.Deadline = at(ms)
			w.Remaining = w.Deadline.Sub(now)
			delete(deadline, e)
		}
		s.Waiters = append(s.Waiters, w)
	}
	for e := range deadline {
		s.Orphans = append(s.Orphans, e)
	}
	slices.Sort(s.Orphans)
	return s, nil
}

// weightedHolders fills in a weighted lock's capacity, use and holders
// from its hash and holders set, the holders in the order of their
// grants (then by owner id).
func (s *Snapshot) weightedHolders(r *reads, at func(float64) time.Time) error {
	h := r.hold.Val()
	s.Capacity, _ = strconv.ParseInt(h["permits"], 10, 64)
	s.Used, _ = strconv.ParseInt(h["used"], 10, 64)
	ends := make(map[string]float64, len(r.leases.Val()))
	for _, z := range r.leases.Val() {
		ends[z.Member.(string)] = z.Score
	}
	for f, rec := range h {
		owner, ok := strings.CutPrefix(f, "o:")
		if !ok {
			continue
		}
		p, err := ParseHolder(rec)
		if err != nil {
			return err
		}
		hs := HolderState{Owner: owner, Entry: p.Entry, Tag: TagOf(p.Entry), Weight: p.Weight, Shared: p.Shared,
			Excl: p.Excl, Token: p.Token, Since: time.UnixMilli(p.Since), HeldFor: s.Now.Sub(time.UnixMilli(p.Since))}
		if end, ok := ends[owner]; ok {
			if hs.TTL = at(end).Sub(s.Now); hs.TTL <= 0 {
				continue // its lease is over: the next script drops it (prune_holders)
			}
		}
		s.Holders = append(s.Holders, hs)
	}
	slices.SortFunc(s.Holders, func(a, b HolderState) int {
		if c := a.Since.Compare(b.Since); c != 0 {
			return c
		}
		return strings.Compare(a.Owner, b.Owner)
	})
	return nil
}

// readTickets reads, in one round trip, the keys of the MultiLock tickets
// in the lines of ss (locks are their keys; see Keys.TicketKey), and
// gives each ticket its locks' names and its time of joining, which its
// key alone keeps. A ticket whose key is gone keeps Locks nil and
// Joined zero.
func readTickets(ctx context.Context, rdb Reader, locks []lockOfKind, ss []Snapshot) error {
	type want struct {
		s, w int
		cmd  *redis.StringSliceCmd
	}
	var ws []want
	p := rdb.Pipeline()
	for i := range ss {
		for j, w := range ss[i].Waiters {
			if w.Ticket {
				ws = append(ws, want{i, j, p.LRange(ctx, locks[i].k.TicketKey(w.ID), 0, -1)})
			}
		}
	}
	if len(ws) == 0 {
		return nil
	}
	if cmds, err := p.Exec(ctx); firstErr(cmds, err) != nil {
		return firstErr(cmds, err)
	}
	for _, w := range ws {
		list := w.cmd.Val()
		if len(list) == 0 {
			continue
		}
		wt := &ss[w.s].Waiters[w.w]
		if ms, err := strconv.ParseInt(list[0], 10, 64); err == nil && wt.Joined.IsZero() {
			wt.Joined = time.UnixMilli(ms)
			wt.Waited = ss[w.s].Now.Sub(wt.Joined)
		}
		var names []string
		for _, base := range list[1:] {
			if name, ok := nameOf(base); ok {
				names = append(names, name)
			}
		}
		wt.Locks = names
	}
	return nil
}

// nameOf returns the lock name in the hash key base ("<prefix>:{<name>}").
func nameOf(base string) (string, bool) {
	_, rest, ok := strings.Cut(base, ":{")
	if !ok {
		return "", false
	}
	name, _, ok := strings.Cut(rest, "}")
	return name, ok
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
	fmt.Fprintf(&b, "%s %q at %s (server clock)\n", s.Kind, s.Name, s.Now.UTC().Format(time.RFC3339Nano))
	if s.Kind == KindSemaphore || s.Kind == KindRWMutex {
		fmt.Fprintf(&b, "  capacity %d, used %d\n", s.Capacity, s.Used)
	}
	if len(s.Holders) == 0 {
		b.WriteString("  free\n")
	}
	for _, h := range s.Holders {
		if s.Kind == KindMutex || s.Kind == KindElection {
			fmt.Fprintf(&b, "  held by %s: %d level(s)", h.Owner, h.Shared)
		} else {
			fmt.Fprintf(&b, "  held by %s: weight %d, %d read and %d write level(s)", h.Owner, h.Weight, h.Shared, h.Excl)
		}
		fmt.Fprintf(&b, ", token %d, held for %v, lease left %v", h.Token, h.HeldFor, h.TTL)
		if h.Tag != "" {
			fmt.Fprintf(&b, ", granted through client %s", h.Tag)
		}
		if s.Kind == KindElection {
			fmt.Fprintf(&b, ", value %q", h.Value)
		}
		b.WriteString("\n")
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
		value := ""
		if s.Kind == KindElection {
			value = fmt.Sprintf(", value %q", w.Value)
		}
		fmt.Fprintf(&b, "  %3d. %s (waiter %s, weight %d, lease %v, waited %v, %s%s)\n", i+1, w.Owner, w.ID, w.Weight, w.Lease, w.Waited, due, value)
	}
	for _, e := range s.Orphans {
		fmt.Fprintf(&b, "  orphan deadline entry %s\n", e)
	}
	return b.String()
}
