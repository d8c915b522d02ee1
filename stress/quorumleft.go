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

// quorumState is what the keys of a quorum lock hold on one master at
// one instant of its clock (see "Quorum locks" in lua/lib.lua).
type quorumState struct {
	Name      string
	Master    string            // "master <i> (<address>)"
	Hold      map[string]string // the hold's hash: owner, count, token, entry, ticket, inquired
	HoldTTL   time.Duration     // the hold's time left
	Queue     []string          // waiter entries, in ticket order
	Values    map[string]string // an election's candidate entry -> value, for the candidates in line
	Deadlines int64             // entries of the deadline zset
	LastToken int64             // the token counter K; 0 when there is none
	TokenTTL  time.Duration     // its time left; negative when it never expires
	Ticket    int64             // the largest ticket written here, C; 0 when there is none
	TicketTTL time.Duration     // its time left; negative when it never expires
}

// inspectQuorum reads the keys of the quorum lock name under prefix on
// one master, in one transaction: a Mutex's, or with -kind election an
// Election's, with the values of its candidates.
func inspectQuorum(ctx context.Context, rdb redis.UniversalClient, prefix, name, kind, master string) (quorumState, error) {
	keysOf := queue.Quorum
	if kind == runElection {
		keysOf = queue.QuorumElection
	}
	k, err := keysOf(prefix, name)
	if err != nil {
		return quorumState{}, err
	}
	p := rdb.TxPipeline()
	var values *redis.MapStringStringCmd
	if k.Values != "" {
		values = p.HGetAll(ctx, k.Values)
	}
	hold, holdTTL := p.HGetAll(ctx, k.Lock), p.PTTL(ctx, k.Lock)
	line := p.ZRange(ctx, k.Queue, 0, -1)
	deadlines := p.ZCard(ctx, k.Deadline)
	token, tokenTTL := p.Get(ctx, k.Token), p.PTTL(ctx, k.Token)
	ticket, ticketTTL := p.Get(ctx, k.Ticket), p.PTTL(ctx, k.Ticket)
	if _, err := p.Exec(ctx); err != nil && err != redis.Nil {
		return quorumState{}, err
	}
	s := quorumState{Name: name, Master: master, Hold: hold.Val(), HoldTTL: holdTTL.Val(), Queue: line.Val(), Deadlines: deadlines.Val()}
	if values != nil {
		s.Values = values.Val()
	}
	s.LastToken, s.TokenTTL = counterOf(token, tokenTTL)
	s.Ticket, s.TicketTTL = counterOf(ticket, ticketTTL)
	return s, nil
}

// counterOf returns a counter's value and time left (negative: it never
// expires); 0 when there is none.
func counterOf(v *redis.StringCmd, ttl *redis.DurationCmd) (int64, time.Duration) {
	n, err := strconv.ParseInt(v.Val(), 10, 64)
	if err != nil {
		return 0, 0
	}
	return n, ttl.Val()
}

// residue reports what the lock keeps on the master after every client
// is closed: no hold, no waiter and no deadline may be left, and the
// counters, which may outlive the run by a while, must expire.
func (s quorumState) residue() []violation {
	var out []violation
	add := func(format string, args ...any) {
		out = append(out, violation{Kind: residual, Lock: s.Name, Detail: s.Master + ": " + fmt.Sprintf(format, args...)})
	}
	if len(s.Hold) > 0 {
		add("still held after the run by %s (entry %s, token %s, %s level(s), lease left %v)",
			s.Hold["owner"], s.Hold["entry"], s.Hold["token"], s.Hold["count"], s.HoldTTL)
	}
	if n := len(s.Queue); n > 0 {
		add("%d waiter(s) left in the line after the run, first %s", n, s.Queue[0])
	}
	if n := s.Deadlines; n > int64(len(s.Queue)) {
		add("%d deadline entr(ies) without a waiter after the run", n-int64(len(s.Queue)))
	}
	if n := len(s.Values); n > 0 {
		first := slices.Sorted(maps.Keys(s.Values))[0]
		add("%d candidate value(s) left beside the line after the run, first %s (%q)", n, first, s.Values[first])
	}
	if s.LastToken > 0 && s.TokenTTL < 0 {
		add("token counter %d never expires", s.LastToken)
	}
	if s.Ticket > 0 && s.TicketTTL < 0 {
		add("ticket counter %d never expires", s.Ticket)
	}
	return out
}

// String describes the state in one line.
func (s quorumState) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s on %s: ", s.Name, s.Master)
	if len(s.Hold) > 0 {
		fmt.Fprintf(&b, "held by %s (entry %s, token %s, %s level(s), lease left %v)",
			s.Hold["owner"], s.Hold["entry"], s.Hold["token"], s.Hold["count"], s.HoldTTL)
	} else {
		b.WriteString("free")
	}
	fmt.Fprintf(&b, ", %d waiter(s), %d deadline(s), token counter %d (ttl %v), ticket counter %d (ttl %v)\n",
		len(s.Queue), s.Deadlines, s.LastToken, s.TokenTTL, s.Ticket, s.TicketTTL)
	for _, e := range slices.Sorted(maps.Keys(s.Values)) {
		fmt.Fprintf(&b, "  value of %s: %q\n", e, s.Values[e])
	}
	return b.String()
}

// quorumFinalState inspects every lock on every master after the run
// (admins: one client per master, at addrs), adds what is left to
// violations, and returns the states of the locks involved in any
// violation, one line per master.
func quorumFinalState(ctx context.Context, admins []redis.UniversalClient, addrs []string, cfg config, violations *[]violation) map[string]string {
	all := map[string]string{}
	for _, name := range lockNames(cfg.Locks) {
		var text strings.Builder
		for i, rdb := range admins {
			master := fmt.Sprintf("master %d (%s)", i+1, addrs[i])
			s, err := inspectAfterRun(ctx, rdb, func(ctx context.Context) (quorumState, error) {
				return inspectQuorum(ctx, rdb, cfg.Prefix, name, cfg.Kind, master)
			})
			if err != nil {
				*violations = append(*violations, violation{Kind: errored, Lock: name, Detail: "inspecting " + master + " after the run: " + err.Error()})
				continue
			}
			*violations = append(*violations, s.residue()...)
			text.WriteString(s.String())
		}
		all[name] = text.String()
	}
	snaps := map[string]string{}
	for _, v := range *violations {
		if s, ok := all[v.Lock]; ok {
			snaps[v.Lock] = s
		}
	}
	return snaps
}
