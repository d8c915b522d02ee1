package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock/fairlock"
)

// outcome is what a run did.
type outcome struct {
	terms    []term  // the leaderships, in the order of their terms
	accepted []write // the writes the store took, in the order it took them
	refused  []write // the writes it refused
	// seen holds, by scheduler, the terms that its Observe sent, in
	// order; cut the term a scheduler led when its link was severed.
	seen map[string][]int64
	cut  map[string]int64
}

// term is one leadership.
type term struct {
	term   int64
	leader string
	end    string // how it ended
}

// jobsOf returns the jobs the store took under term t, in order.
func (o outcome) jobsOf(t int64) []string {
	var jobs []string
	for _, w := range o.accepted {
		if w.term == t {
			jobs = append(jobs, w.job)
		}
	}
	return jobs
}

// rising reports whether the store took the writes in the order of their
// terms: none after a write of a higher term.
func (o outcome) rising() bool {
	for i := 1; i < len(o.accepted); i++ {
		if o.accepted[i].term < o.accepted[i-1].term {
			return false
		}
	}
	return true
}

// unseen says, for each leadership a scheduler other than its leader
// should have seen and did not, who missed what. A scheduler cut off
// from Redis sees nothing after its own term.
func (o outcome) unseen() []string {
	var missed []string
	for _, t := range o.terms {
		for s, terms := range o.seen {
			if cut, ok := o.cut[s]; s == t.leader || ok && t.term > cut {
				continue
			}
			found := false
			for _, x := range terms {
				found = found || x == t.term
			}
			if !found {
				missed = append(missed, fmt.Sprintf("%s never saw %s lead (term %d)", s, t.leader, t.term))
			}
		}
	}
	return missed
}

// scheduler is one process of the scheduler: its link to Redis, the
// go-redis client over it, its fairlock Client and its handle on the
// Election. It reaches the store over the runner's client.
type scheduler struct {
	name  string
	link  *link
	rdb   *redis.Client
	locks *fairlock.Client
	el    *fairlock.Election
}

// runner is one run: the schedulers, the store, and what they did.
type runner struct {
	c     config
	store *store
	out   io.Writer
	start time.Time
	// base is the run's context, for the store's writes; campaigning is
	// cancelled when the last term is over, and ends every Campaign.
	base        context.Context
	campaigning context.Context
	stop        context.CancelFunc
	leaderships atomic.Int64 // leaderships so far

	mu sync.Mutex // guards o and the output
	o  outcome
}

// run starts the schedulers, lets them run c.terms leaderships, and
// returns what they did. It prints each event to out as it happens.
func run(ctx context.Context, c config, out io.Writer) (outcome, error) {
	opts, err := redis.ParseURL(c.redisURL)
	if err != nil {
		return outcome{}, fmt.Errorf("-redis: %w", err)
	}
	storeRdb := redis.NewClient(opts)
	defer storeRdb.Close()
	r := &runner{c: c, store: newStore(storeRdb, c.prefix), out: out, start: time.Now(), base: ctx,
		o: outcome{seen: map[string][]int64{}, cut: map[string]int64{}}}
	if err := r.store.reset(ctx); err != nil {
		return outcome{}, err
	}
	var scheds []*scheduler
	defer func() {
		for _, s := range scheds {
			s.locks.Close()
			s.rdb.Close()
		}
	}()
	for i := range c.schedulers {
		s := &scheduler{name: fmt.Sprintf("scheduler-%d", i+1), link: &link{tls: opts.TLSConfig}}
		o := *opts
		o.Dialer = s.link.dial
		s.rdb = redis.NewClient(&o)
		s.locks, err = fairlock.New(s.rdb, fairlock.WithPrefix(c.prefix), fairlock.WithName(s.name), fairlock.WithLease(c.lease))
		if err != nil {
			s.rdb.Close()
			return outcome{}, err
		}
		s.el = s.locks.Election(c.election)
		scheds = append(scheds, s)
	}
	r.printf("%d schedulers campaign for election %q; each leader runs %d jobs, then resigns; %d leaderships in all",
		c.schedulers, c.election, c.jobs, c.terms)
	if c.kill > 0 {
		r.printf("leader %d of %d will stall in the middle of its jobs, cut off from Redis", c.kill, c.terms)
	}

	// The followers: every scheduler observes the election, from before
	// the first campaign.
	observing, stopObserving := context.WithCancel(ctx)
	defer stopObserving()
	var observers sync.WaitGroup
	for _, s := range scheds {
		views, err := s.el.Observe(observing)
		if err != nil {
			return outcome{}, err
		}
		first := <-views // the election as it is: no leader yet
		if first.HasLeader() {
			return outcome{}, fmt.Errorf("election %q has a leader already: %s, term %d", c.election, first.Value, first.Term)
		}
		observers.Go(func() { r.follow(s, views) })
	}

	r.campaigning, r.stop = context.WithCancel(ctx)
	defer r.stop()
	errs := make([]error, len(scheds))
	var campaigns sync.WaitGroup
	for i, s := range scheds {
		campaigns.Go(func() { errs[i] = r.campaign(s) })
	}
	campaigns.Wait()
	if err := errors.Join(errs...); err != nil {
		return outcome{}, err
	}
	if err := ctx.Err(); err != nil {
		return outcome{}, err
	}
	// The followers are told that the last leader resigned; give them a
	// moment to hear it before they stop.
	r.awaitNoLeader(scheds, 5*time.Second)
	stopObserving()
	observers.Wait()

	accepted, err := r.store.accepted(ctx)
	if err != nil {
		return outcome{}, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.o.accepted = accepted
	return r.o, nil
}

// printf prints one line of the run, with the time since its start.
func (r *runner) printf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.printfLocked(format, args...)
}

func (r *runner) printfLocked(format string, args ...any) {
	fmt.Fprintf(r.out, "%7.3fs  %s\n", time.Since(r.start).Seconds(), fmt.Sprintf(format, args...))
}

// follow prints and records what s's Observe sends, until it closes.
func (r *runner) follow(s *scheduler, views <-chan fairlock.Leadership) {
	for l := range views {
		if !l.HasLeader() {
			r.mu.Lock()
			r.o.seen[s.name] = append(r.o.seen[s.name], 0)
			r.mu.Unlock()
			continue
		}
		r.mu.Lock()
		r.o.seen[s.name] = append(r.o.seen[s.name], l.Term)
		if l.Value != s.name {
			r.printfLocked("%s follows: %s leads, term %d", s.name, l.Value, l.Term)
		}
		r.mu.Unlock()
	}
}

// awaitNoLeader waits, up to within, until every scheduler still linked
// to Redis has seen that the election has no leader.
func (r *runner) awaitNoLeader(scheds []*scheduler, within time.Duration) {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		r.mu.Lock()
		all := true
		for _, s := range scheds {
			seen := r.o.seen[s.name]
			if _, cut := r.o.cut[s.name]; !cut && (len(seen) == 0 || seen[len(seen)-1] != 0) {
				all = false
			}
		}
		r.mu.Unlock()
		if all {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// campaign is one scheduler's life: campaign, lead for a term, resign,
// and campaign again, until the last term is over or its link is cut.
func (r *runner) campaign(s *scheduler) error {
	for {
		lead, err := s.el.Campaign(r.campaigning, s.name)
		if err != nil {
			if r.campaigning.Err() != nil {
				return nil // the last term is over
			}
			return fmt.Errorf("%s: campaign: %w", s.name, err)
		}
		n := r.leaderships.Add(1)
		if n > int64(r.c.terms) {
			// Elected as the last term ended: nothing to run.
			return s.el.Resign(lead)
		}
		t, err := s.el.Term(lead)
		if err != nil {
			return fmt.Errorf("%s: term: %w", s.name, err)
		}
		r.mu.Lock()
		r.o.terms = append(r.o.terms, term{term: t, leader: s.name})
		i := len(r.o.terms) - 1
		r.printfLocked("%s is elected (leader %d of %d): term %d", s.name, n, r.c.terms, t)
		r.mu.Unlock()

		stallAt := 0
		if n == int64(r.c.kill) {
			stallAt = r.c.jobs/2 + 1
		}
		end, err := r.lead(s, lead, t, stallAt)
		r.mu.Lock()
		r.o.terms[i].end = end
		r.mu.Unlock()
		if err != nil || stallAt > 0 {
			return err // a scheduler cut off from Redis is out of the run
		}
		if n == int64(r.c.terms) {
			r.stop() // the other candidates leave the line
		}
		if err := s.el.Resign(lead); err != nil && !errors.Is(err, fairlock.ErrNotHeld) {
			return fmt.Errorf("%s: resign: %w", s.name, err)
		}
		if n == int64(r.c.terms) {
			return nil
		}
	}
}

// lead runs the jobs of term t, as long as the leadership lasts; stallAt
// is the job (1 for the first) in the middle of which s stalls, 0 for
// none. It returns how the term ended.
func (r *runner) lead(s *scheduler, lead context.Context, t int64, stallAt int) (string, error) {
	for j := 1; j <= r.c.jobs; j++ {
		if lead.Err() != nil {
			// The leadership ended (its lease was lost): run no more.
			return fmt.Sprintf("lost its leadership (%v)", context.Cause(lead)), nil
		}
		job := fmt.Sprintf("job-%d", j)
		time.Sleep(r.c.jobTime) // the job's work
		if j == stallAt {
			return r.stall(s, t, job)
		}
		ok, highest, err := r.store.put(r.base, t, job, s.name)
		switch {
		case err != nil:
			return "failed", fmt.Errorf("%s: store: %w", s.name, err)
		case !ok:
			r.refused(write{term: t, job: job, by: s.name, highest: highest})
			return "refused by the store", nil
		}
		r.printf("%s runs %s under term %d: written", s.name, job, t)
	}
	return "resigned", nil
}

// stall is a leader stopped in the middle of job, as a long GC pause
// would stop it: its link to Redis drops, so nothing renews its lease,
// and it does nothing until the store has seen a later leader's term.
// Then it wakes and writes job's result under its own term, t, without
// a look at its leadership's context: the store refuses the write. It
// returns how the term ended.
func (r *runner) stall(s *scheduler, t int64, job string) (string, error) {
	r.mu.Lock()
	r.o.cut[s.name] = t
	r.printfLocked("%s stalls in the middle of %s (a long GC pause): its link to Redis drops, nothing renews its lease of %v", s.name, job, r.c.lease)
	r.mu.Unlock()
	s.link.sever()
	for {
		h, err := r.store.highest(r.base)
		if err != nil {
			return "failed", fmt.Errorf("%s: store: %w", s.name, err)
		}
		if h > t {
			break
		}
		select {
		case <-r.campaigning.Done():
			return "stalled until the run ended", nil
		case <-time.After(5 * time.Millisecond):
		}
	}
	ok, highest, err := r.store.put(r.base, t, job, s.name)
	switch {
	case err != nil:
		return "failed", fmt.Errorf("%s: store: %w", s.name, err)
	case ok:
		return "stalled", fmt.Errorf("%s: the store took a write of term %d after one of a later term", s.name, t)
	}
	r.refused(write{term: t, job: job, by: s.name, highest: highest})
	return "stalled mid-term, cut off from Redis; its late write refused", nil
}

// refused records and prints a write the store refused.
func (r *runner) refused(w write) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.o.refused = append(r.o.refused, w)
	r.printfLocked("%s wakes and writes %s under term %d: REFUSED, the store has seen term %d", w.by, w.job, w.term, w.highest)
}
