package fairlock

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/fairlock/fairlock/fair"
	"github.com/fairlock/fairlock/queue"
)

// Kind is the kind of a lock: which primitive keeps it. A Mutex, a
// Semaphore, a RWMutex and an Election of one name are four locks, each
// under keys of its own; a MultiLock is made of Mutexes.
type Kind string

// The kinds of lock.
const (
	KindMutex     Kind = "mutex"
	KindSemaphore Kind = "semaphore"
	KindRWMutex   Kind = "rwmutex"
	// KindElection is an Election: its one holder is the leader (its
	// Token is the term), its waiters the candidates in line.
	KindElection Kind = "election"
)

// WaiterKind says what a Waiter waits for.
type WaiterKind string

// The kinds of Waiter.
const (
	WaitsLock    WaiterKind = "lock"    // a Mutex's Lock
	WaitsTicket  WaiterKind = "ticket"  // a MultiLock's Lock: the lock with every other of Waiter.Locks, at once
	WaitsPermits WaiterKind = "permits" // a Semaphore's Acquire of Waiter.Weight permits
	WaitsRead    WaiterKind = "read"    // a RWMutex's RLock
	WaitsWrite   WaiterKind = "write"   // a RWMutex's Lock
	// WaitsCampaign is an Election's Campaign: a candidate, with the
	// value it campaigns with (Waiter.Value).
	WaitsCampaign WaiterKind = "campaign"
)

// LockState is the state of one lock as Inspect read it, at one instant
// of the Redis server's clock. It may be stale the moment it is returned.
// A lock that nobody holds and nobody waits for (a free lock, or a name
// never used) has no Holders and no Waiters.
type LockState struct {
	Name string
	Kind Kind
	At   time.Time // the server's clock when the state was read

	// Capacity is a Semaphore's permits as stored with its holds (0
	// while nobody holds or waits: none is stored), Used the permits
	// held. Readers counts a RWMutex's read holders, Writer says whether
	// a writer holds it.
	Capacity int64
	Used     int64
	Readers  int
	Writer   bool

	// Holders are the holds, in the order they were granted: a Mutex's
	// one, an Election's one (its leadership), a Semaphore's or a
	// RWMutex's many.
	Holders []Holder

	// The fields of Holders[0], for a Mutex's or an Election's one hold
	// (all zero when it is free). An Election's Token is the leadership's
	// term, and Value the leader's value.
	Held      bool
	Owner     string        // the holder's owner id
	Count     int           // the levels of the hold (re-entries)
	Token     int64         // the hold's fencing token
	LeaseLeft time.Duration // the hold's remaining lease
	HeldFor   time.Duration // how long the hold has been held, by the server's clock
	// Client is the ID of the Client whose Lock or TryLock call was
	// granted the hold, "" when not known (a hold of a client that
	// predates Client IDs, or whose owner id is shared by calls that came
	// and went since).
	Client string
	// ClientName is the name of the holder's Client (WithName), "" when
	// it has none or it is not known.
	ClientName string
	// Value is an Election's leader's value (Holders[0].Value); "" when
	// it has no leader, and for the other kinds.
	Value string

	Waiters []Waiter // the calls in line, in the order they are served

	// Masters holds, for a lock of a quorum Client (NewQuorum), each
	// master's own view, in the order of NewQuorum's masters; the fields
	// above are then the majority's view: a holder that holds on a
	// majority, the waiters in line on a majority. Nil for other
	// Clients.
	Masters []MasterState
}

// MasterState is one master's view of a quorum lock: its state, or why
// it has none (Err: the master did not answer in time, or refused).
type MasterState struct {
	State LockState
	Err   error
}

// Holder is one hold of a lock.
type Holder struct {
	Owner      string // the owner id
	Client     string // the ID of the Client it was granted through; "" when not known
	ClientName string // that Client's name (WithName); "" when it has none or it is not known
	// Weight is a Semaphore's permits, a RWMutex's 1 for a reader (a
	// writer holds it all), a Mutex's 1. Write is set for a RWMutex's
	// writer (whose read levels taken meanwhile are counted in Count).
	Weight    int64
	Write     bool
	Count     int           // levels: re-entries, a RWMutex's read and write levels together
	Token     int64         // fencing token; an Election's term
	Since     time.Time     // the server's time of the grant (kept through re-entries and a downgrade)
	HeldFor   time.Duration // At minus Since
	LeaseLeft time.Duration // the remaining lease
	Value     string        // an Election's leader's value; "" for the other kinds
}

// Waiter is one call in a lock's line.
type Waiter struct {
	Kind   WaiterKind
	Owner  string // the owner id it waits for
	Client string // the ID of the waiting Client; "" for a client that predates Client IDs
	// ClientName is the name of the waiting Client (WithName), "" when it
	// has none or it is not known.
	ClientName string
	Weight     int64 // the permits it asks for (WaitsPermits); 1 otherwise
	// Value is the value a candidate campaigns with (WaitsCampaign); ""
	// for other waiters.
	Value string
	// Locks names every lock of a ticket (WaitsTicket), this one among
	// them, in key order; nil for other waiters, or when the ticket ended
	// while the state was read.
	Locks []string
	// WaitedFor is how long it has been in line, by the server's clock (0
	// when not known).
	WaitedFor time.Duration
	// TimeLeft is how long it keeps its place without polling (a live
	// waiter polls well before); at or below 0, it is gone and will be
	// dropped from the line.
	TimeLeft time.Duration
}

// ID returns the Client's id: 8 hex characters, random per Client, that
// end the waiter id of each of its Lock calls in Redis. Inspect reports
// it for the holder and each waiter, so that an operator can tell which
// process holds a lock or waits for it (log ID at start-up).
func (c *Client) ID() string {
	if c == nil {
		return ""
	}
	return c.run.Tag()
}

// usable returns the error that stops a call of the Client.
func (c *Client) usable(ctx context.Context) error {
	switch {
	case c == nil:
		return errNilClientCall
	case ctx == nil:
		return errNilContext
	case c.closed():
		return ErrClosed
	}
	return nil
}

// Inspect reads the state of the lock called name, whatever its kind: the
// Mutex, the Semaphore, the RWMutex or the Election of that name that is
// in use (the first of them in that order when several are: see
// InspectAll), or a free Mutex's state when none is. It reads the holders and the line in
// one atomic round trip (a MULTI transaction that changes nothing), with
// times measured by the server's clock, then the other names of
// MultiLock tickets in line and the names of the Clients (WithName) in
// one more each. On a quorum Client it reads every master at once and
// gives each one's view besides the majority's (LockState.Masters). It
// returns when ctx ends, with ctx's error, even while Redis does not
// answer. A bad name fails with ErrInvalidName, a Redis user that may
// not run the commands with ErrNoPermission, a quorum that a majority
// did not answer with ErrNoQuorum. It is an operator's and a debugger's
// tool: the lock may change the moment it returns, so never decide to
// take or skip a lock by it.
func (c *Client) Inspect(ctx context.Context, name string) (LockState, error) {
	if err := c.usable(ctx); err != nil {
		return LockState{}, err
	}
	if c.engine == nil {
		states, err := c.quorumStates(ctx, name)
		if err != nil {
			return LockState{}, err
		}
		if i := slices.IndexFunc(states, quorumInUse); i >= 0 {
			return states[i], nil
		}
		return states[0], nil // the free Mutex's
	}
	ss, err := c.engine.InspectAll(ctx, c.cfg.prefix, name)
	if err != nil {
		return LockState{}, err
	}
	s := ss[0] // the Mutex's: free, when no lock of the name is in use
	if i := slices.IndexFunc(ss, queue.Snapshot.InUse); i >= 0 {
		s = ss[i]
	}
	return c.stateOf(ctx, s)
}

// InspectAll reads, as Inspect does, every lock called name that is in
// use: its Mutex, its Semaphore, its RWMutex and its Election, in that
// order, leaving out those that nobody holds or waits for. On a quorum
// Client it returns its quorum Mutex's state, in use or not, and its
// Election's when in use.
func (c *Client) InspectAll(ctx context.Context, name string) ([]LockState, error) {
	if err := c.usable(ctx); err != nil {
		return nil, err
	}
	if c.engine == nil {
		return c.quorumStates(ctx, name)
	}
	ss, err := c.engine.InspectAll(ctx, c.cfg.prefix, name)
	if err != nil {
		return nil, err
	}
	out := make([]LockState, 0, len(ss))
	for _, s := range ss {
		if !s.InUse() {
			continue
		}
		st, err := c.stateOf(ctx, s)
		if err != nil {
			return nil, err
		}
		out = append(out, st)
	}
	return out, nil
}

// Inspect reads the state of the Mutex, as Client.Inspect does.
func (m *Mutex) Inspect(ctx context.Context) (LockState, error) {
	if err := m.usable(ctx); err != nil {
		return LockState{}, err
	}
	if m.c.engine == nil {
		return m.c.inspectQuorum(ctx, m.name)
	}
	s, err := m.c.engine.Mutex(m.keys).Inspect(ctx, queue.KindMutex)
	if err != nil {
		return LockState{}, err
	}
	return m.c.stateOf(ctx, s)
}

// Inspect reads the state of the Semaphore, as Client.Inspect does.
func (s *Semaphore) Inspect(ctx context.Context) (LockState, error) {
	return s.inspect(ctx, queue.KindSemaphore)
}

// Inspect reads the state of the RWMutex, as Client.Inspect does.
func (rw *RWMutex) Inspect(ctx context.Context) (LockState, error) {
	return rw.inspect(ctx, queue.KindRWMutex)
}

// Inspect reads the state of the Election, as Client.Inspect does: its
// leader is the one holder (Token is the term, Value the leader's
// value), its candidates in line the waiters, each with its value. On a
// quorum Client it reads every master, as a quorum Mutex's Inspect does.
func (e *Election) Inspect(ctx context.Context) (LockState, error) {
	if err := e.usable(ctx); err != nil {
		return LockState{}, err
	}
	if q, ok := e.lock.(*fair.QMutex); ok {
		return e.c.quorumState(ctx, e.keys, q, KindElection)
	}
	s, err := e.lock.(*fair.Mutex).Inspect(ctx, queue.KindElection)
	if err != nil {
		return LockState{}, err
	}
	return e.c.stateOf(ctx, s)
}

func (h *weighted) inspect(ctx context.Context, kind string) (LockState, error) {
	if err := h.usable(ctx); err != nil {
		return LockState{}, err
	}
	s, err := h.c.engine.Mutex(h.keys).Inspect(ctx, kind)
	if err != nil {
		return LockState{}, err
	}
	return h.c.stateOf(ctx, s)
}

// kinds maps the queue package's kinds to Kind.
var kinds = map[string]Kind{queue.KindMutex: KindMutex, queue.KindSemaphore: KindSemaphore, queue.KindRWMutex: KindRWMutex,
	queue.KindElection: KindElection}

// stateOf converts a snapshot and names its Clients (see nameClients).
func (c *Client) stateOf(ctx context.Context, s queue.Snapshot) (LockState, error) {
	st := convert(s)
	if err := c.nameClients(ctx, &st); err != nil {
		return LockState{}, err
	}
	return st, nil
}

// convert makes a LockState of a snapshot, without Client names.
func convert(s queue.Snapshot) LockState {
	st := LockState{Name: s.Name, Kind: kinds[s.Kind], At: s.Now, Capacity: s.Capacity, Used: s.Used}
	for _, h := range s.Holders {
		hd := Holder{Owner: h.Owner, Client: h.Tag, Weight: h.Weight, Count: h.Shared + h.Excl, Token: h.Token,
			Since: h.Since, HeldFor: h.HeldFor, LeaseLeft: h.TTL, Value: h.Value}
		switch {
		case st.Kind != KindRWMutex:
		case h.Excl > 0:
			hd.Write, st.Writer = true, true
		default:
			st.Readers++
		}
		st.Holders = append(st.Holders, hd)
	}
	if st.Kind == KindSemaphore && st.Capacity == 0 {
		st.Used = 0 // left over by an ended lease; nothing is stored in force
	}
	if len(st.Holders) > 0 && (st.Kind == KindMutex || st.Kind == KindElection) {
		st.mutexHolder()
	}
	for _, w := range s.Waiters {
		wt := Waiter{Owner: w.Owner, Client: w.Tag, Weight: 1, Locks: w.Locks, WaitedFor: w.Waited, TimeLeft: w.Remaining}
		switch {
		case w.Ticket:
			wt.Kind = WaitsTicket
		case st.Kind == KindElection:
			wt.Kind, wt.Value = WaitsCampaign, w.Value
		case st.Kind == KindSemaphore:
			wt.Kind, wt.Weight = WaitsPermits, w.Weight
		case st.Kind == KindRWMutex && w.Exclusive:
			wt.Kind = WaitsWrite
		case st.Kind == KindRWMutex:
			wt.Kind = WaitsRead
		default:
			wt.Kind = WaitsLock
		}
		st.Waiters = append(st.Waiters, wt)
	}
	return st
}

// mutexHolder copies Holders[0], a Mutex's or an Election's one hold,
// into the fields that name it.
func (st *LockState) mutexHolder() {
	h := st.Holders[0]
	st.Held, st.Owner, st.Count, st.Token, st.LeaseLeft, st.HeldFor, st.Client = true, h.Owner, h.Count, h.Token, h.LeaseLeft, h.HeldFor, h.Client
	st.Value = h.Value
}

// nameClients fills in the names of the Clients st mentions, read in one
// more round trip (the names live in keys of their own, see WithName).
func (c *Client) nameClients(ctx context.Context, st *LockState) error {
	var tags []string
	seen := map[string]bool{}
	add := func(tag string) {
		if tag != "" && !seen[tag] {
			seen[tag] = true
			tags = append(tags, tag)
		}
	}
	for _, h := range st.Holders {
		add(h.Client)
	}
	for _, w := range st.Waiters {
		add(w.Client)
	}
	names, err := c.names(ctx, tags)
	if err != nil {
		return err
	}
	for i := range st.Holders {
		st.Holders[i].ClientName = names[st.Holders[i].Client]
	}
	if st.Held {
		st.ClientName = st.Holders[0].ClientName
	}
	for i := range st.Waiters {
		st.Waiters[i].ClientName = names[st.Waiters[i].Client]
	}
	return nil
}

// names reads the names of the Clients of tags from the deployment. A
// quorum Client writes no name, so it reads none: no round trip that a
// paused master could hold up.
func (c *Client) names(ctx context.Context, tags []string) (map[string]string, error) {
	if c.engine == nil {
		return map[string]string{}, nil
	}
	return c.engine.Names(ctx, c.cfg.prefix, tags)
}

// inspectQuorum reads the quorum lock name on every master, and makes
// the majority's view of it.
func (c *Client) inspectQuorum(ctx context.Context, name string) (LockState, error) {
	keys, l, err := c.run.Lock(c.cfg.prefix, name)
	if err != nil {
		return LockState{}, err
	}
	return c.quorumState(ctx, keys, l.(*fair.QMutex), KindMutex)
}

// quorumStates reads the quorum locks called name on every master: its
// Mutex, and its Election, whose state follows the Mutex's when it is in
// use on some master.
func (c *Client) quorumStates(ctx context.Context, name string) ([]LockState, error) {
	st, err := c.inspectQuorum(ctx, name)
	if err != nil {
		return nil, err
	}
	keys, l, err := c.run.Election(c.cfg.prefix, name)
	if err != nil {
		return nil, err
	}
	est, err := c.quorumState(ctx, keys, l.(*fair.QMutex), KindElection)
	if err != nil {
		return nil, err
	}
	if !quorumInUse(est) {
		return []LockState{st}, nil
	}
	return []LockState{st, est}, nil
}

// quorumInUse reports whether a quorum lock's state has a holder or a
// waiter on some master.
func quorumInUse(st LockState) bool {
	return slices.ContainsFunc(st.Masters, func(m MasterState) bool {
		return len(m.State.Holders) > 0 || len(m.State.Waiters) > 0
	})
}

// quorumState reads the quorum lock l (of keys) on every master as kind
// (a Mutex, or an Election), and makes the majority's view of it.
func (c *Client) quorumState(ctx context.Context, keys queue.Keys, l *fair.QMutex, kind Kind) (LockState, error) {
	name := keys.Name
	qkind := queue.KindMutex
	if kind == KindElection {
		qkind = queue.KindElection
	}
	views, err := l.InspectAs(ctx, qkind)
	if err != nil {
		return LockState{}, err
	}
	var st LockState
	var answered []LockState
	for _, v := range views {
		ms := MasterState{Err: v.Err}
		if v.Err == nil {
			ms.State = convert(v.Snapshot)
			ms.State.Name = keys.Name
			answered = append(answered, ms.State)
		}
		st.Masters = append(st.Masters, ms)
	}
	majority(&st, answered, len(views)/2+1)
	st.Name, st.Kind = name, kind
	if err := c.nameClients(ctx, &st); err != nil {
		return LockState{}, err
	}
	for i := range st.Masters {
		if st.Masters[i].Err == nil {
			if err := c.nameClients(ctx, &st.Masters[i].State); err != nil {
				return LockState{}, err
			}
		}
	}
	return st, nil
}

// majority fills st with the view of q of the masters' views: the holder
// that holds on q of them (owner and entry alike), with the q-th largest
// count, token and lease left among its holds and the q-th longest held
// time; the waiters in line on q of them, in the order of the first
// master's line that has them, each with the q-th longest wait and time
// left. At is the latest of the views' clocks.
func majority(st *LockState, views []LockState, q int) {
	for _, v := range views {
		if v.At.After(st.At) {
			st.At = v.At
		}
	}
	holds := map[string][]Holder{}
	var order []string
	for _, v := range views {
		if len(v.Holders) == 0 {
			continue
		}
		h := v.Holders[0]
		key := h.Owner + "\x00" + h.Client
		if holds[key] == nil {
			order = append(order, key)
		}
		holds[key] = append(holds[key], h)
	}
	for _, key := range order {
		hs := holds[key]
		if len(hs) < q {
			continue
		}
		h := hs[0]
		h.Count = kth(hs, q, func(h Holder) int64 { return int64(h.Count) }).Count
		h.Token = kth(hs, q, func(h Holder) int64 { return h.Token }).Token
		h.LeaseLeft = kth(hs, q, func(h Holder) int64 { return int64(h.LeaseLeft) }).LeaseLeft
		h.HeldFor = kth(hs, q, func(h Holder) int64 { return int64(h.HeldFor) }).HeldFor
		st.Holders = []Holder{h}
		st.mutexHolder()
		break
	}
	waits := map[string][]Waiter{}
	var line []string
	for _, v := range views {
		for _, w := range v.Waiters {
			key := w.Owner + "\x00" + w.Client
			if waits[key] == nil {
				line = append(line, key)
			}
			waits[key] = append(waits[key], w)
		}
	}
	for _, key := range line {
		ws := waits[key]
		if len(ws) < q {
			continue
		}
		w := ws[0]
		w.WaitedFor = kth(ws, q, func(w Waiter) int64 { return int64(w.WaitedFor) }).WaitedFor
		w.TimeLeft = kth(ws, q, func(w Waiter) int64 { return int64(w.TimeLeft) }).TimeLeft
		st.Waiters = append(st.Waiters, w)
	}
}

// kth returns the element of xs whose by is the q-th largest (the value
// that q of them reach), or the smallest when fewer than q.
func kth[T any](xs []T, q int, by func(T) int64) T {
	s := slices.Clone(xs)
	slices.SortFunc(s, func(a, b T) int { return cmp.Compare(by(b), by(a)) })
	return s[min(q, len(s))-1]
}

// List returns the names of the locks under the Client's prefix that are
// held or waited on, of every kind (a Mutex, a Semaphore, a RWMutex, an
// Election, a quorum lock), and whose names match the glob pattern (Redis's MATCH
// syntax; "" or "*" for every lock), each once, sorted. It scans with
// SCAN, never KEYS: every master of a Redis Cluster, every live shard of
// a Ring, every master of a quorum Client. It returns when ctx ends, with
// ctx's error, even while Redis does not answer; the scan has no other
// bound. A pattern that contains '}' or ends in a lone '\' fails with
// ErrInvalidName, a Redis user that may not run SCAN with
// ErrNoPermission. Locks may be taken or freed while it scans.
func (c *Client) List(ctx context.Context, pattern string) ([]string, error) {
	if err := c.usable(ctx); err != nil {
		return nil, err
	}
	if c.engine == nil {
		return c.run.(*fair.Quorum).List(ctx, c.cfg.prefix, pattern)
	}
	return c.engine.List(ctx, c.cfg.prefix, pattern)
}
