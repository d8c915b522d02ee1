package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock/fairlock/queue"
)

// leftovers reads what lock name keeps in Redis after the run, once every
// client is closed and the keys have settled, and returns it for the
// report and the residue it amounts to: for the run's kind, the keys of
// the name's Mutex, Semaphore or RWMutex.
func leftovers(ctx context.Context, rdb redis.UniversalClient, cfg config, name string) (string, []violation, error) {
	if kind, ok := weightedKinds[cfg.Kind]; ok {
		s, err := inspectAfterRun(ctx, rdb, func(ctx context.Context) (weightedState, error) {
			return inspectWeighted(ctx, rdb, cfg.Prefix, name, kind)
		})
		return s.String(), s.residue(), err
	}
	if cfg.Kind == runElection {
		s, err := inspectAfterRun(ctx, rdb, func(ctx context.Context) (electionState, error) {
			return inspectElection(ctx, rdb, cfg.Prefix, name)
		})
		return s.String(), s.residue(), err
	}
	s, err := inspectAfterRun(ctx, rdb, func(ctx context.Context) (queue.Snapshot, error) {
		return inspect(ctx, rdb, cfg.Prefix, name)
	})
	return s.String(), residue(s), err
}

// electionState is what the keys of an Election keep: its Mutex's (the
// leadership is the hold, the candidates the line), and the values of
// the candidates in line.
type electionState struct {
	queue.Snapshot
	Values map[string]string // candidate entry -> value
}

// inspectElection reads the state of the election name under prefix.
func inspectElection(ctx context.Context, rdb redis.UniversalClient, prefix, name string) (electionState, error) {
	k, err := queue.Election(prefix, name)
	if err != nil {
		return electionState{}, err
	}
	s, err := queue.Inspect(ctx, rdb, k)
	if err != nil {
		return electionState{}, err
	}
	values, err := rdb.HGetAll(ctx, k.Values).Result()
	if err != nil {
		return electionState{}, fmt.Errorf("inspect %q: %w", name, err)
	}
	return electionState{s, values}, nil
}

// residue reports what the election keeps after every client is closed:
// a Mutex's residue (no leadership, no candidate in line), and no
// candidate's value beside the line.
func (s electionState) residue() []violation {
	out := residue(s.Snapshot)
	if n := len(s.Values); n > 0 {
		first := slices.Sorted(maps.Keys(s.Values))[0]
		out = append(out, violation{Kind: residual, Lock: s.Name, At: s.Now,
			Detail: fmt.Sprintf("%d candidate value(s) left beside the line after the run, first %s (%q)", n, first, s.Values[first])})
	}
	return out
}

// String renders the state for people.
func (s electionState) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "election %q, its leadership and candidates a Mutex's hold and line: %s", s.Name, s.Snapshot.String())
	for _, e := range slices.Sorted(maps.Keys(s.Values)) {
		fmt.Fprintf(&b, "  value of %s: %q\n", e, s.Values[e])
	}
	return b.String()
}

// weightedKinds maps the run kinds of weighted locks to their keys' kind.
var weightedKinds = map[string]string{runSemaphore: queue.KindSemaphore, runRWMutex: queue.KindRWMutex}

// weightedState is what the keys of a Semaphore or a RWMutex hold at one
// instant of the server's clock (see "Weighted locks" in lua/lib.lua).
type weightedState struct {
	Name      string
	Kind      string            // queue.KindSemaphore or queue.KindRWMutex
	Now       time.Time         // the server's clock
	Hold      map[string]string // the hash: 'permits', 'used' and a record per holder ('o:<owner id>')
	Holders   []redis.Z         // owner id -> when its lease ends (server ms)
	Queue     []string          // waiter entries, oldest first
	Deadlines []redis.Z         // waiter entry -> its deadline (server ms)
	LastToken int64             // the fencing counter; 0 when there is none
	TokenTTL  time.Duration     // the counter's time left; negative when it never expires
}

// inspectWeighted reads the state of the weighted lock of kind name under
// prefix in one transaction.
func inspectWeighted(ctx context.Context, rdb redis.UniversalClient, prefix, name, kind string) (weightedState, error) {
	k, err := queue.Weighted(prefix, name, kind)
	if err != nil {
		return weightedState{}, err
	}
	p := rdb.TxPipeline()
	tm := p.Time(ctx)
	hold := p.HGetAll(ctx, k.Lock)
	holders := p.ZRangeWithScores(ctx, k.Holders, 0, -1)
	line := p.LRange(ctx, k.Queue, 0, -1)
	deadlines := p.ZRangeWithScores(ctx, k.Deadline, 0, -1)
	token := p.Get(ctx, k.Token)
	tttl := p.PTTL(ctx, k.Token)
	if _, err := p.Exec(ctx); err != nil && err != redis.Nil {
		return weightedState{}, fmt.Errorf("inspect %q: %w", name, err)
	}
	s := weightedState{Name: name, Kind: kind, Now: tm.Val(), Hold: hold.Val(), Holders: holders.Val(),
		Queue: line.Val(), Deadlines: deadlines.Val()}
	s.LastToken, _ = strconv.ParseInt(token.Val(), 10, 64)
	if d := tttl.Val(); s.LastToken > 0 && d == -1 { // PTTL's answer for a key without an expiry
		s.TokenTTL = -1
	} else if d > 0 {
		s.TokenTTL = d
	}
	return s, nil
}

// residue reports what the lock keeps after every client is closed: there
// must be no hold, no waiter and no deadline, and a token counter must
// expire.
func (s weightedState) residue() []violation {
	var out []violation
	add := func(format string, args ...any) {
		out = append(out, violation{Kind: residual, Lock: s.Name, At: s.Now, Detail: fmt.Sprintf(format, args...)})
	}
	if holders := s.holders(); len(holders) > 0 {
		add("still held after the run by %d holder(s), using %s of %s, first %s", len(holders), s.Hold["used"], s.Hold["permits"], holders[0])
	} else if len(s.Hold) > 0 {
		add("its hash is left after the run: %v", s.Hold)
	}
	if n := len(s.Holders); n > 0 {
		add("%d lease(s) left in the holders set after the run, first %v", n, s.Holders[0].Member)
	}
	if n := len(s.Queue); n > 0 {
		add("%d waiter(s) left in the queue after the run, first %s", n, s.Queue[0])
	}
	if n := len(s.Deadlines); n > 0 {
		add("%d waiter deadline(s) left after the run, first %v", n, s.Deadlines[0].Member)
	}
	if s.LastToken > 0 && s.TokenTTL < 0 {
		add("token counter %d never expires", s.LastToken)
	}
	return out
}

// holders returns the records of the hash's holders, sorted: "<owner id>
// <weight> <read levels> <write levels> <token> <entry>".
func (s weightedState) holders() []string {
	var out []string
	for f, rec := range s.Hold {
		if owner, ok := strings.CutPrefix(f, "o:"); ok {
			out = append(out, owner+" "+rec)
		}
	}
	slices.Sort(out)
	return out
}

// String renders the state for people.
func (s weightedState) String() string {
	var b strings.Builder
	what := map[string]string{queue.KindSemaphore: "semaphore", queue.KindRWMutex: "rwmutex"}[s.Kind]
	fmt.Fprintf(&b, "%s %q at %s (server clock)\n", what, s.Name, s.Now.UTC().Format(time.RFC3339Nano))
	if len(s.Hold) == 0 {
		b.WriteString("  free\n")
	} else {
		fmt.Fprintf(&b, "  permits %s, used %s\n", s.Hold["permits"], s.Hold["used"])
		for _, h := range s.holders() {
			fmt.Fprintf(&b, "  holder %s\n", h)
		}
	}
	for _, z := range s.Holders {
		fmt.Fprintf(&b, "  lease of %v ends in %v\n", z.Member, time.UnixMilli(int64(z.Score)).Sub(s.Now))
	}
	switch {
	case s.LastToken == 0:
		b.WriteString("  no token counter (expired, or never written)\n")
	case s.TokenTTL < 0:
		fmt.Fprintf(&b, "  last token %d, counter never expires\n", s.LastToken)
	default:
		fmt.Fprintf(&b, "  last token %d, counter expires in %v\n", s.LastToken, s.TokenTTL)
	}
	fmt.Fprintf(&b, "  %d waiter(s)\n", len(s.Queue))
	for i, e := range s.Queue {
		fmt.Fprintf(&b, "  %3d. %s\n", i+1, e)
	}
	for _, z := range s.Deadlines {
		fmt.Fprintf(&b, "  deadline of %v in %v\n", z.Member, time.UnixMilli(int64(z.Score)).Sub(s.Now))
	}
	return b.String()
}
