package fair

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock/fairlock/internal/errs"
	"github.com/fairlock/fairlock/internal/shortly"
	"github.com/fairlock/fairlock/lua"
	"github.com/fairlock/fairlock/queue"
)

// Quorum runs the locks of one Client over N independent Redis masters
// (see "Quorum locks" in docs/algorithm.md): a lock is held while a
// majority of the masters hold it for one Lock call. Each master has an
// Engine of its own, for its client, its scripts and its notify hub; the
// Quorum adds the rounds over all of them, the waiting, and the holds
// with their one watchdog. Its methods are safe for concurrent use.
type Quorum struct {
	lifecycle[*QHold] // calls in flight, goroutines, live holds, Close's bound

	masters []*Engine
	q       int // the majority: len(masters)/2 + 1
	cfg     Config
	drift   float64
	log     *slog.Logger
	tag     string
	// skews are each master's clock skew in µs, added to the time its
	// scripts read: 0, but in tests that step a master's clock.
	skews []atomic.Int64

	dog *qdog
	ids *identities // which server each master is (see qcheck.go)
}

// QuorumConfig is what a Quorum needs besides each master's Config.
type QuorumConfig struct {
	// Drift is the clock drift factor: a hold is counted for (1-Drift) of
	// the time a master keeps it, less a margin. In [0, 0.1).
	Drift float64
}

// NewQuorum returns a Quorum over masters, each run as New would with
// cfg. No master's answer counts before it is known to be a server of
// its own (see Quorum.Check).
func NewQuorum(masters []Redis, cfg Config, qc QuorumConfig) (*Quorum, error) {
	if len(masters) == 0 {
		return nil, fmt.Errorf("%w: no masters", errBadConfig)
	}
	if qc.Drift < 0 || qc.Drift >= 0.1 {
		return nil, fmt.Errorf("%w: drift factor %v, want [0, 0.1)", errBadConfig, qc.Drift)
	}
	if cfg.Replicas > 0 {
		return nil, fmt.Errorf("%w: a quorum waits for no replicas", errBadConfig)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	tag := cfg.Tag
	if tag == "" {
		tag = queue.NewTag()
	}
	qm := &Quorum{
		q:     len(masters)/2 + 1,
		cfg:   cfg,
		drift: qc.Drift,
		log:   cfg.Logger,
		tag:   tag,
		skews: make([]atomic.Int64, len(masters)),
	}
	qm.init(cfg.CallTimeout)
	for i, rdb := range masters {
		c := cfg
		c.Observe = nil // the Quorum reports its calls' events itself
		c.Name = ""     // a quorum Client writes no name
		c.Tag = tag     // one entry names the Client on every master
		c.Logger = cfg.Logger.With(slog.Int("master", i))
		e, err := NewEngine(rdb, c)
		if err != nil {
			for _, e := range qm.masters {
				_ = e.Close()
			}
			return nil, err
		}
		qm.masters = append(qm.masters, e)
	}
	qm.dog = newQdog(qm)
	qm.ids = newIdentities(len(masters))
	return qm, nil
}

// Tag returns the Client's tag, which ends the waiter id of its entries.
func (qm *Quorum) Tag() string { return qm.tag }

// SetSkew makes the scripts on master i read the clock skew later than
// the server's: for tests that step one master's clock.
func (qm *Quorum) SetSkew(i int, skew time.Duration) { qm.skews[i].Store(skew.Microseconds()) }

// Close stops the Quorum: waiting Lock calls return errs.ErrClosed (after
// leaving the line on every master), holds still live are released and
// their contexts cancelled with errs.ErrClosed (their releases in
// pipelines per master, the watchdog renewing each hold until its release
// is answered: see closing.go), and every master's engine is closed. As
// an Engine's Close, it runs all of that at once and gives up the calls
// still out one call timeout after it started, so it returns within about
// that even when masters do not answer. It is idempotent.
func (qm *Quorum) Close() error {
	qm.shut(qm.closeHolds)
	for _, e := range qm.masters {
		_ = e.Close()
	}
	return nil
}

// background runs f on a goroutine Close waits for, unless Close has
// started.
func (qm *Quorum) background(f func()) bool { return qm.goUnlessClosed(f) }

// observe reports ev when the Client has an observer.
func (qm *Quorum) observe(ctx context.Context, ev Event) {
	if qm.cfg.Observe != nil {
		qm.cfg.Observe(ctx, ev)
	}
}

// span returns how long, from the send time of a call, a hold that the
// master keeps for d is counted: d less the drift and a margin.
func (qm *Quorum) span(d time.Duration) time.Duration {
	return time.Duration(float64(d)*(1-qm.drift)) - qm.margin(d)
}

// margin is δ: 2 ms, plus a thousandth of d.
func (qm *Quorum) margin(d time.Duration) time.Duration { return 2*time.Millisecond + d/1000 }

// answer is one master's reply in a round.
type answer struct {
	i    int
	sent time.Time
	rep  lua.QReply
	err  error
}

// order runs the calls of one Lock call and its hold on each master one
// at a time, in the order they were started: a round reserves each
// master's turn before any of its calls goes out, and each call waits
// for the call before it on that master to be answered. A round waits
// for a majority, and its call to a slower master goes on after it;
// without the order, the next round's call could overtake it (a re-entry
// landing after the release of the level below it).
type order struct {
	mu   sync.Mutex
	tail []chan struct{} // per master: closed once the latest call started there is answered
}

func newOrder(n int) *order {
	o := &order{tail: make([]chan struct{}, n)}
	for i := range o.tail {
		o.tail[i] = make(chan struct{})
		close(o.tail[i])
	}
	return o
}

// turn reserves the next turn on master i: wait is closed when the turn
// comes, and done must be called once the call is answered.
func (o *order) turn(i int) (wait <-chan struct{}, done func()) {
	next := make(chan struct{})
	o.mu.Lock()
	prev := o.tail[i]
	o.tail[i] = next
	o.mu.Unlock()
	return prev, func() { close(next) }
}

// round sends call to every master at once, each on a context detached
// from ctx and bounded by the call timeout, and hands each answer to
// took as it arrives, until took says the round is decided, every master
// answered, the call timeout passed, or ctx ended: a round never keeps
// its caller past ctx, whatever the masters do. Answers that come after
// that still go to late (nil: dropped), on goroutines Close waits for.
// With an order, each master's call waits for its turn (see order). It
// returns how many masters answered without an error.
func (qm *Quorum) round(ctx context.Context, ord *order, call func(ctx context.Context, i int) (lua.QReply, error), took func(a answer) (decided bool), late func(a answer)) int {
	out := make(chan answer, len(qm.masters))
	var (
		mu   sync.Mutex
		done bool
	)
	for i := range qm.masters {
		var turn <-chan struct{}
		next := func() {}
		if ord != nil {
			turn, next = ord.turn(i)
		}
		qm.wg.Go(func() {
			if turn != nil {
				<-turn
			}
			defer next()
			cctx, cancel := qm.detached(ctx)
			sent := time.Now()
			rep, err := call(cctx, i)
			cancel()
			a := answer{i: i, sent: sent, rep: rep, err: err}
			// The answer goes to out (which has room for every master)
			// while the round waits, else to late: both under mu, so
			// that none is lost between the two.
			mu.Lock()
			over := done
			if !over {
				out <- a
			}
			mu.Unlock()
			if over && late != nil {
				late(a)
			}
		})
	}
	timer := time.NewTimer(qm.cfg.CallTimeout + 50*time.Millisecond)
	defer timer.Stop()
	ok := 0
	finish := func() {
		mu.Lock()
		done = true
		mu.Unlock()
		// Answers already sent to out are handed to late too.
		for {
			select {
			case a := <-out:
				if late != nil {
					late(a)
				}
			default:
				return
			}
		}
	}
	for n := 0; n < len(qm.masters); n++ {
		select {
		case a := <-out:
			if a.err == nil {
				ok++
			}
			if took(a) {
				finish()
				return ok
			}
		case <-timer.C:
			finish()
			return ok
		case <-ctx.Done():
			finish()
			return ok
		}
	}
	finish()
	return ok
}

// noQuorum is the error of a call that n of the masters answered, fewer
// than a majority: ctx's error when ctx ended first, else
// errs.ErrNoQuorum.
func (qm *Quorum) noQuorum(ctx context.Context, n int, what string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return fmt.Errorf("%w: %d of %d masters answered%s, %d needed", errs.ErrNoQuorum, n, len(qm.masters), what, qm.q)
}

// run runs one call of a script on master i, made from its set of
// scripts by build, and reads it with read.
func (qm *Quorum) run(ctx context.Context, i int, build func(*lua.Scripts) lua.Call, read func(*redis.Cmd) (lua.QReply, error)) (lua.QReply, error) {
	e := qm.masters[i]
	if err := qm.distinct(ctx, i); err != nil {
		return lua.QReply{}, err
	}
	s, err := e.scripts(ctx)
	if err != nil {
		return lua.QReply{}, err
	}
	sent := time.Now()
	rep, err := read(e.run(ctx, build(s)))
	e.called(sent, err) // as an Engine's call: a member that is a Cluster reloads its slot map
	if err != nil {
		return lua.QReply{}, refusal(err)
	}
	return rep, nil
}

// skew returns master i's clock skew in µs.
func (qm *Quorum) skew(i int) int64 { return qm.skews[i].Load() }

// receiptTTL is how long a call's receipt outlives it.
func (qm *Quorum) receiptTTL() int64 { return (2 * qm.cfg.CallTimeout).Milliseconds() }

// tombTTL is how long a gone Lock call's tombstone lasts: longer than a
// join of it sent before it went can arrive (each call is bounded by the
// call timeout, and go-redis re-sends only within it).
func (qm *Quorum) tombTTL() int64 { return (2 * qm.cfg.CallTimeout).Milliseconds() }

// QMutex is one named lock of a Quorum. It is a cheap handle, safe for
// concurrent use.
type QMutex struct {
	qm   *Quorum
	keys queue.Keys
	wake string // the Client's wake channel of the lock on every master
}

// Mutex returns the lock with the given keys (queue.Quorum's).
func (qm *Quorum) Mutex(keys queue.Keys) *QMutex {
	return &QMutex{qm: qm, keys: keys, wake: keys.ClientWake(qm.tag)}
}

// Took reports whether h is a hold of this very lock, taken through this
// Quorum.
func (l *QMutex) Took(held Held) bool {
	h, ok := held.(*QHold)
	return ok && h != nil && h.l.qm == l.qm && h.l.keys.Lock == l.keys.Lock
}

// Holds reports whether a majority of the masters have h as the hold of
// l: h's owner holds it there. It tells a hold of this lock taken through
// another Quorum over the same masters (another Client) from a hold of a
// lock that only has the same keys (on other masters).
func (l *QMutex) Holds(ctx context.Context, held Held) (bool, error) {
	h, ok := held.(*QHold)
	if !ok {
		return false, nil // a single deployment's hold: never one of this lock
	}
	reads, err := l.readAll(ctx, l.settled)
	if err != nil {
		return false, err
	}
	n := 0
	for _, r := range reads {
		if r.ok && r.owner == h.owner && r.count > 0 {
			n++
		}
	}
	return n >= l.qm.q, nil
}

// readAll reads the hold on every master: its owner, count, token and
// PTTL, for the majority views. It returns as soon as the majority view
// is settled (see settled), without waiting for the masters still out, so
// that a master that hangs holds up no read. It fails with
// errs.ErrNoQuorum when fewer than a majority answered.
func (l *QMutex) readAll(ctx context.Context, settled func([]holdRead) bool) ([]holdRead, error) {
	if err := l.qm.begin(); err != nil {
		return nil, err
	}
	defer l.qm.ops.Done()
	reads := make([]holdRead, len(l.qm.masters)) // guarded by mu: written by each master's call
	seen := make([]holdRead, len(l.qm.masters))
	var mu sync.Mutex
	n := l.qm.round(ctx, nil, func(ctx context.Context, i int) (lua.QReply, error) {
		if err := l.qm.distinct(ctx, i); err != nil {
			return lua.QReply{}, err
		}
		rdb := l.qm.masters[i].rdb
		var hm *redis.SliceCmd
		var pt *redis.DurationCmd
		sent := time.Now()
		err := shortly.Run(ctx, func() error {
			p := rdb.Pipeline()
			hm = p.HMGet(ctx, l.keys.Lock, l.readFields()...)
			pt = p.PTTL(ctx, l.keys.Lock)
			_, err := p.Exec(ctx)
			return err
		})
		if err != nil && !errors.Is(err, redis.Nil) {
			l.qm.masters[i].called(sent, err)
			return lua.QReply{}, err
		}
		l.qm.masters[i].called(sent, nil)
		r := holdRead{ok: true, ttl: pt.Val()}
		if v := hm.Val(); len(v) >= 2 {
			r.owner, _ = v[0].(string)
			r.count = int(fieldInt(v[1]))
		}
		if v := hm.Val(); len(v) == len(electionFields) {
			r.entry, _ = v[2].(string)
			r.token, r.since = fieldInt(v[3]), fieldInt(v[4])
			r.value, _ = v[5].(string)
			r.vseq, r.term = fieldInt(v[6]), fieldInt(v[7])
		}
		mu.Lock()
		reads[i] = r
		mu.Unlock()
		return lua.QReply{}, nil
	}, func(a answer) bool {
		// took runs on this goroutine, one answer at a time (see round):
		// seen holds the reads of the answers taken, which the round
		// counts, and no others.
		if a.err == nil {
			mu.Lock()
			seen[a.i] = reads[a.i]
			mu.Unlock()
		}
		return settled(seen)
	}, nil)
	if n < l.qm.q {
		return nil, l.qm.noQuorum(ctx, n, "")
	}
	return seen, nil
}

// settled reports whether the reads so far decide who holds on a
// majority: one owner holds on q of them, or no owner can reach q with
// the masters still to answer. Holds on different masters are held by
// one owner at a time each, so no later answer changes that verdict.
func (l *QMutex) settled(reads []holdRead) bool {
	answered, most := tally(reads)
	pending := len(reads) - answered
	return most >= l.qm.q || most+pending < l.qm.q && answered >= l.qm.q
}

// tally counts the reads that answered, and the most masters among them
// on which one owner holds.
func tally(reads []holdRead) (answered, most int) {
	by := map[string]int{}
	for _, r := range reads {
		if !r.ok {
			continue
		}
		answered++
		if r.owner != "" {
			by[r.owner]++
			most = max(most, by[r.owner])
		}
	}
	return answered, most
}

// The fields readAll reads of a hold: a quorum Mutex's reads need its
// owner and count; an election's its leadership besides (see
// qelection.go), which a Mutex's would read as absent every time.
var (
	mutexFields    = []string{"owner", "count"}
	electionFields = []string{"owner", "count", "entry", "token", "since", "value", "vseq", "term"}
)

// readFields returns the fields readAll reads of l's hold.
func (l *QMutex) readFields() []string {
	if l.keys.Values != "" {
		return electionFields
	}
	return mutexFields
}

// fieldInt is the integer of a field HMGET answered: 0 when the field is
// missing or not one.
func fieldInt(v any) int64 {
	s, _ := v.(string)
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}

// holdRead is what readAll read on one master.
type holdRead struct {
	ok    bool
	owner string
	count int
	ttl   time.Duration
	// An election's hold besides (see qelection.go): the entry it was
	// granted to, its token, since when (ms), its value, the sequence
	// number of the Proclaim that wrote it (0: Campaign's), and the term
	// committed here (0: none yet).
	entry        string
	token, since int64
	value        string
	vseq, term   int64
}

// majorityOwner returns the owner that holds on a majority of reads, and
// the q-th largest of its counts and TTLs there; "" when none does.
func (l *QMutex) majorityOwner(reads []holdRead) (owner string, count int, ttl time.Duration) {
	by := map[string][]holdRead{}
	for _, r := range reads {
		if r.ok && r.owner != "" {
			by[r.owner] = append(by[r.owner], r)
		}
	}
	for o, rs := range by {
		if len(rs) < l.qm.q {
			continue
		}
		counts := make([]int, len(rs))
		ttls := make([]time.Time, len(rs))
		now := time.Now()
		for i, r := range rs {
			counts[i] = r.count
			ttls[i] = now.Add(r.ttl)
		}
		return o, kthLargestInt(counts, l.qm.q), time.Until(kthLatest(ttls, l.qm.q))
	}
	return "", 0, 0
}

// IsLocked reports whether one owner holds the lock on a majority of the
// masters.
func (l *QMutex) IsLocked(ctx context.Context) (bool, error) {
	reads, err := l.readAll(ctx, l.settled)
	if err != nil {
		return false, err
	}
	owner, _, _ := l.majorityOwner(reads)
	return owner != "", nil
}

// TTL returns the validity left of held when it is this lock's live hold
// taken through this Quorum (measured here, no call); otherwise that of
// the hold of the owner that holds on a majority (its q-th longest
// expiry, less the drift), 0 when none does.
func (l *QMutex) TTL(ctx context.Context, held Held) (time.Duration, error) {
	if h, ok := held.(*QHold); ok && l.Took(h) && h.Context().Err() == nil {
		return max(time.Until(h.Validity()), 0), nil
	}
	reads, err := l.readAll(ctx, l.settled)
	if err != nil {
		return 0, err
	}
	owner, _, ttl := l.majorityOwner(reads)
	if owner == "" || ttl <= 0 {
		return 0, nil
	}
	return max(l.qm.span(ttl), 0), nil
}

// HoldCount returns the levels owner holds on a majority of the masters:
// the q-th largest of its counts (0 where it holds nothing). It returns
// once no master still out could change that (see countSettled), so that
// a re-entry counted on a majority is counted here even while it is on
// its way to the other masters.
func (l *QMutex) HoldCount(ctx context.Context, owner string) (int, error) {
	reads, err := l.readAll(ctx, func(reads []holdRead) bool { return l.countSettled(reads, owner) })
	if err != nil {
		return 0, err
	}
	return kthLargestInt(countsOf(reads, owner), l.qm.q), nil
}

// countsOf returns owner's count on each master read (0 where it holds
// nothing or the master did not answer).
func countsOf(reads []holdRead, owner string) []int {
	counts := make([]int, len(reads))
	for i, r := range reads {
		if r.ok && r.owner == owner {
			counts[i] = r.count
		}
	}
	return counts
}

// countSettled reports whether the reads so far fix the q-th largest of
// owner's counts: with u masters still out, it lies between the q-th and
// the (q-u)-th largest of the counts read, so it is fixed once those two
// are equal (and at least q masters answered).
func (l *QMutex) countSettled(reads []holdRead, owner string) bool {
	var counts []int
	for _, r := range reads {
		if r.ok {
			c := 0
			if r.owner == owner {
				c = r.count
			}
			counts = append(counts, c)
		}
	}
	q, u := l.qm.q, len(reads)-len(counts)
	if len(counts) < q {
		return false
	}
	return kthLargestInt(counts, q) == kthLargestInt(counts, max(q-u, 1))
}

// ForceUnlock removes the hold on every master, whoever owns it, and
// hands the lock on. It returns once a majority has answered, without
// waiting for a master that hangs (the removal goes on there in the
// background), and reports whether a hold was removed on a master that
// answered by then: a hold that counted was on a majority, so on one of
// those. It fails with errs.ErrNoQuorum when fewer than a majority
// answered.
//
// The entry whose hold it removed is then buried on every master, as a
// Lock call that gives up is (qcancel): a call of that hold still on its
// way to a master that did not hold it (the try a fast-path grant sends
// to the masters its doorway did not ask) would otherwise take that
// master afterwards, and with the master whose removal is still out make
// a majority for a hold that was forced. Buried, it is told so, and a
// hold it took first is given back.
func (l *QMutex) ForceUnlock(ctx context.Context) (bool, error) {
	if err := l.qm.begin(); err != nil {
		return false, err
	}
	defer l.qm.ops.Done()
	var (
		removed atomic.Bool
		mu      sync.Mutex
		entries = map[string]bool{} // guarded by mu: the entries of the holds found
	)
	answered := 0
	n := l.qm.round(ctx, nil, func(ctx context.Context, i int) (lua.QReply, error) {
		// The entry read first: a hand-over in between makes the removal
		// take the next holder's hold, which a force may, and buries an
		// entry that no longer holds, which changes nothing.
		var read []any
		if err := shortly.Run(ctx, func() error {
			var err error
			read, err = l.qm.masters[i].rdb.HMGet(ctx, l.keys.Lock, "entry").Result()
			return err
		}); err == nil && len(read) == 1 {
			if entry, _ := read[0].(string); entry != "" {
				mu.Lock()
				entries[entry] = true
				mu.Unlock()
			}
		}
		ok, err := l.flag(ctx, i, func(s *lua.Scripts) lua.Call {
			return s.QForce(l.keys, ms(l.qm.cfg.WaiterTTL), l.qm.skew(i))
		})
		if ok {
			removed.Store(true)
		}
		return lua.QReply{}, err
	}, func(a answer) bool {
		// took runs on this goroutine, one answer at a time (see round).
		if a.err == nil {
			answered++
		}
		return answered >= l.qm.q
	}, nil)
	if n < l.qm.q {
		return removed.Load(), l.qm.noQuorum(ctx, n, "")
	}
	mu.Lock()
	found := make([]string, 0, len(entries))
	for entry := range entries {
		found = append(found, entry)
	}
	mu.Unlock()
	slices.Sort(found)
	for _, entry := range found {
		if m := l.bury(ctx, nil, entry); m < l.qm.q {
			return removed.Load(), l.qm.noQuorum(ctx, m, "")
		}
	}
	return removed.Load(), nil
}

// bury takes entry out of the line of every master, buries it, and gives
// back a hold of it (qcancel), in a round of order ord that waits for a
// majority (the others are told in the background); it returns how many
// masters answered.
func (l *QMutex) bury(ctx context.Context, ord *order, entry string) int {
	n := 0
	l.qm.round(ctx, ord, func(cctx context.Context, i int) (lua.QReply, error) {
		_, err := l.flag(cctx, i, func(s *lua.Scripts) lua.Call {
			return s.QCancel(l.keys, entry, ms(l.qm.cfg.WaiterTTL), l.qm.tombTTL(), l.qm.skew(i))
		})
		return lua.QReply{}, err
	}, func(a answer) bool {
		// took runs on this goroutine, one answer at a time (see round).
		if a.err == nil {
			n++
		}
		return n >= l.qm.q
	}, nil)
	return n
}

// flag runs a script that answers a flag on master i.
func (l *QMutex) flag(ctx context.Context, i int, build func(*lua.Scripts) lua.Call) (bool, error) {
	e := l.qm.masters[i]
	if err := l.qm.distinct(ctx, i); err != nil {
		return false, err
	}
	s, err := e.scripts(ctx)
	if err != nil {
		return false, err
	}
	sent := time.Now()
	ok, err := lua.ReadFlag(e.run(ctx, build(s)))
	e.called(sent, err)
	if err != nil && !publishRefused(err) {
		return false, refusal(err)
	}
	return ok, nil
}

// kthLargestInt returns the k-th largest of v (0 when v has fewer).
func kthLargestInt[T int | int64](v []T, k int) T {
	if len(v) < k {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)-k]
}

// kthLatest returns the k-th latest of t (zero when t has fewer).
func kthLatest(t []time.Time, k int) time.Time {
	if len(t) < k {
		return time.Time{}
	}
	s := slices.Clone(t)
	slices.SortFunc(s, time.Time.Compare)
	return s[len(s)-k]
}
