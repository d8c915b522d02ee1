package main

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// stepTimeout bounds every wait of a measure that is not a lease's: a
// campaign joining the line, a hand-over, observers catching up.
const stepTimeout = 20 * time.Second

// pause waits d, and reports false when ctx ends first.
func pause(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// elected is the end of one Campaign: when it returned, and its error.
type elected struct {
	at  time.Time
	err error
}

// campaign starts c's Campaign with value on a goroutine of its own, and
// returns the channel its end is sent on.
func campaign(ctx context.Context, c candidate, value string) <-chan elected {
	ch := make(chan elected, 1)
	c.begin()
	go func() {
		err := c.campaign(ctx, value)
		ch <- elected{at: time.Now(), err: err}
	}()
	return ch
}

// await waits for the Campaign whose end ch sends, at most d.
func await(ch <-chan elected, d time.Duration) (time.Time, error) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case e := <-ch:
		return e.at, e.err
	case <-t.C:
		return time.Time{}, fmt.Errorf("no new leader within %v", d)
	}
}

// queued waits, at most stepTimeout, until c's Campaign under way is in
// line.
func queued(ctx context.Context, c candidate) error {
	ctx, cancel := context.WithTimeout(ctx, stepTimeout)
	defer cancel()
	return c.queued(ctx)
}

// candidates makes n candidates of sys in election, and returns them with
// a function that closes them.
func candidates(ctx context.Context, sys system, election string, n int) ([]candidate, func(), error) {
	var cs []candidate
	closeAll := func() {
		for _, c := range cs {
			c.close()
		}
	}
	for range n {
		c, err := sys.candidate(ctx, election)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		cs = append(cs, c)
	}
	return cs, closeAll, nil
}

// pendingCampaigns are the Campaigns a measure started and has not
// awaited: at its end they are cancelled and awaited, so that no
// goroutine outlives it.
type pendingCampaigns struct {
	cancel context.CancelFunc
	chans  map[int]<-chan elected
}

func (p *pendingCampaigns) drain() {
	p.cancel()
	for _, ch := range p.chans {
		<-ch
	}
}

// measureHandOver measures Resign -> new leader: n candidates, each with a
// client of its own, stand in line; the leader resigns, the next one's
// Campaign returns, and the one that resigned campaigns again at the back
// (and is in line before the next round begins). A sample is the time
// from the Resign call to the next candidate's Campaign returning.
func measureHandOver(ctx context.Context, sys system, election string, rounds, n int, settle time.Duration) ([]time.Duration, error) {
	cs, closeAll, err := candidates(ctx, sys, election, n)
	if err != nil {
		return nil, err
	}
	defer closeAll()
	cctx, cancel := context.WithCancel(ctx)
	pending := &pendingCampaigns{cancel: cancel, chans: map[int]<-chan elected{}}
	defer pending.drain()

	value := func(i, r int) string { return fmt.Sprintf("candidate-%d-%d", i, r) }
	if _, err := await(campaign(cctx, cs[0], value(0, 0)), stepTimeout); err != nil {
		return nil, fmt.Errorf("first campaign: %w", err)
	}
	for i := 1; i < n; i++ {
		pending.chans[i] = campaign(cctx, cs[i], value(i, 0))
		if err := queued(ctx, cs[i]); err != nil {
			return nil, err
		}
	}
	samples := make([]time.Duration, 0, rounds)
	leader := 0
	for r := range rounds {
		if !pause(ctx, settle) {
			return nil, ctx.Err()
		}
		next := (leader + 1) % n
		start := time.Now()
		if err := cs[leader].resign(ctx); err != nil {
			return nil, fmt.Errorf("round %d: resign: %w", r, err)
		}
		at, err := await(pending.chans[next], stepTimeout)
		if err != nil {
			return nil, fmt.Errorf("round %d: %w", r, err)
		}
		delete(pending.chans, next)
		samples = append(samples, at.Sub(start))
		pending.chans[leader] = campaign(cctx, cs[leader], value(leader, r+1))
		if err := queued(ctx, cs[leader]); err != nil {
			return nil, fmt.Errorf("round %d: %w", r, err)
		}
		leader = next
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
	if err := cs[leader].resign(ctx); err != nil {
		return nil, fmt.Errorf("last resign: %w", err)
	}
	return samples, nil
}

// killSample is one round of SIGKILL -> new leader.
type killSample struct {
	// Elected is the time from the SIGKILL to the waiting candidate's
	// Campaign returning.
	Elected time.Duration `json:"elected_ns"`
	// LeaseLeft is what the killed leader's lease had left at the kill,
	// by its last grant or renewal as the worker reported it.
	LeaseLeft time.Duration `json:"lease_left_ns"`
}

// After is how long after the lease ran out the new leader was elected.
func (k killSample) After() time.Duration { return k.Elected - k.LeaseLeft }

// measureKill measures SIGKILL -> new leader: each round a worker process
// leads a new election, a candidate of this process campaigns behind it,
// and once the candidate is in line the worker is killed with SIGKILL.
func measureKill(ctx context.Context, sys system, election string, rounds int, lease time.Duration) ([]killSample, error) {
	var samples []killSample
	for r := range rounds {
		s, err := killRound(ctx, sys, fmt.Sprintf("%s-%d", election, r), lease)
		if err != nil {
			return nil, fmt.Errorf("round %d: %w", r, err)
		}
		samples = append(samples, s)
	}
	return samples, nil
}

func killRound(ctx context.Context, sys system, election string, lease time.Duration) (killSample, error) {
	spec := sys.worker(election)
	spec.Value = "worker"
	w, err := startWorker(ctx, spec)
	if err != nil {
		return killSample{}, err
	}
	defer w.kill()
	c, err := sys.candidate(ctx, election)
	if err != nil {
		return killSample{}, err
	}
	defer c.close()
	cctx, cancel := context.WithCancel(ctx)
	pending := &pendingCampaigns{cancel: cancel, chans: map[int]<-chan elected{0: campaign(cctx, c, "survivor")}}
	defer pending.drain()
	if err := queued(ctx, c); err != nil {
		return killSample{}, err
	}
	killed := time.Now()
	w.kill()
	at, err := await(pending.chans[0], 3*lease+stepTimeout)
	if err != nil {
		return killSample{}, err
	}
	delete(pending.chans, 0)
	s := killSample{Elected: at.Sub(killed), LeaseLeft: lease - killed.Sub(w.leadAt) - w.sinceRenewal}
	if err := c.resign(ctx); err != nil {
		return killSample{}, fmt.Errorf("resign: %w", err)
	}
	return s, nil
}

// sightings tracks which observers have seen the value expected.
type sightings struct {
	mu       sync.Mutex
	expected string        // guarded by mu
	seen     []bool        // guarded by mu; by observer
	count    int           // guarded by mu; observers that saw expected
	last     time.Time     // guarded by mu; when the last of them saw it
	all      chan struct{} // guarded by mu; closed when every observer saw it
}

func newSightings(n int) *sightings { return &sightings{seen: make([]bool, n)} }

// expect starts waiting for value, and returns the channel closed once
// every observer has seen it.
func (s *sightings) expect(value string) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expected, s.count, s.last = value, 0, time.Time{}
	clear(s.seen)
	s.all = make(chan struct{})
	return s.all
}

// see records that observer i received value.
func (s *sightings) see(i int, value string) {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if value != s.expected || s.seen[i] {
		return
	}
	s.seen[i] = true
	s.count++
	s.last = now
	if s.count == len(s.seen) {
		close(s.all)
	}
}

// wait waits, at most stepTimeout, until every observer has seen the
// value expected, and returns when the last one saw it.
func (s *sightings) wait(all <-chan struct{}) (time.Time, error) {
	t := time.NewTimer(stepTimeout)
	defer t.Stop()
	select {
	case <-all:
	case <-t.C:
		s.mu.Lock()
		defer s.mu.Unlock()
		return time.Time{}, fmt.Errorf("%d of %d observers saw %q within %v", s.count, len(s.seen), s.expected, stepTimeout)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last, nil
}

// measureObservers measures change -> every observer: clients×perClient
// observers watch an election where two candidates take turns. Each round
// the leader proclaims a new value, then resigns to the other, which waits
// in line; the other campaigns again behind the new leader. A sample is
// the time from the Proclaim or Resign call to the last observer seeing
// the new value.
func measureObservers(ctx context.Context, sys system, election string, rounds, clients, perClient int, settle time.Duration) (proclaimed, newLeader []time.Duration, err error) {
	cs, closeAll, err := candidates(ctx, sys, election, 2)
	if err != nil {
		return nil, nil, err
	}
	defer closeAll()
	cctx, cancel := context.WithCancel(ctx)
	pending := &pendingCampaigns{cancel: cancel, chans: map[int]<-chan elected{}}
	defer pending.drain()

	seen := newSightings(clients * perClient)
	all := seen.expect("leader-0")
	if _, err := await(campaign(cctx, cs[0], "leader-0"), stepTimeout); err != nil {
		return nil, nil, fmt.Errorf("first campaign: %w", err)
	}
	stop, err := sys.observe(ctx, election, clients, perClient, seen.see)
	if err != nil {
		return nil, nil, err
	}
	defer stop()
	if _, err := seen.wait(all); err != nil {
		return nil, nil, fmt.Errorf("the first leader: %w", err)
	}
	next := "leader-1"
	pending.chans[1] = campaign(cctx, cs[1], next)
	if err := queued(ctx, cs[1]); err != nil {
		return nil, nil, err
	}
	leader := 0
	for r := range rounds {
		if !pause(ctx, settle) {
			return nil, nil, ctx.Err()
		}
		value := fmt.Sprintf("proclaimed-%d", r)
		all := seen.expect(value)
		start := time.Now()
		if err := cs[leader].proclaim(ctx, value); err != nil {
			return nil, nil, fmt.Errorf("round %d: proclaim: %w", r, err)
		}
		last, err := seen.wait(all)
		if err != nil {
			return nil, nil, fmt.Errorf("round %d: proclaim: %w", r, err)
		}
		proclaimed = append(proclaimed, last.Sub(start))

		if !pause(ctx, settle) {
			return nil, nil, ctx.Err()
		}
		all = seen.expect(next)
		start = time.Now()
		if err := cs[leader].resign(ctx); err != nil {
			return nil, nil, fmt.Errorf("round %d: resign: %w", r, err)
		}
		other := 1 - leader
		if _, err = await(pending.chans[other], stepTimeout); err != nil {
			return nil, nil, fmt.Errorf("round %d: %w", r, err)
		}
		delete(pending.chans, other)
		if last, err = seen.wait(all); err != nil {
			return nil, nil, fmt.Errorf("round %d: new leader: %w", r, err)
		}
		newLeader = append(newLeader, last.Sub(start))

		next = fmt.Sprintf("leader-%d", r+2)
		pending.chans[leader] = campaign(cctx, cs[leader], next)
		if err := queued(ctx, cs[leader]); err != nil {
			return nil, nil, fmt.Errorf("round %d: %w", r, err)
		}
		leader = other
	}
	if err := cs[leader].resign(ctx); err != nil {
		return nil, nil, fmt.Errorf("last resign: %w", err)
	}
	return proclaimed, newLeader, nil
}

// orderResult counts the inversions of the order in which candidates were
// elected against the order in which they began to campaign.
type orderResult struct {
	Rounds     int `json:"rounds"`
	Candidates int `json:"candidates"`
	Elected    int `json:"elected"`    // campaigns that were elected
	Inversions int `json:"inversions"` // pairs elected in the other order than they began
	Pairs      int `json:"pairs"`      // pairs compared
	// PerRound are the inversions of each round: in the first, every
	// candidate's client campaigns for the first time.
	PerRound []int `json:"per_round"`
}

// measureOrder measures the order of service: while a holder leads, n
// candidates, each with a client of its own, begin to campaign one after
// the other, gap apart (with gap 0, each once the one before is in line);
// once all are in line the holder resigns, and each candidate resigns as
// soon as it is elected. Every pair elected in the other order than it
// began counts as an inversion.
func measureOrder(ctx context.Context, sys system, election string, rounds, n int, gap time.Duration) (orderResult, error) {
	res := orderResult{Rounds: rounds, Candidates: n}
	cs, closeAll, err := candidates(ctx, sys, election, n+1)
	if err != nil {
		return res, err
	}
	defer closeAll()
	holder, line := cs[0], cs[1:]
	for r := range rounds {
		if _, err := await(campaign(ctx, holder, fmt.Sprintf("holder-%d", r)), stepTimeout); err != nil {
			return res, fmt.Errorf("round %d: holder: %w", r, err)
		}
		cctx, cancel := context.WithCancel(ctx)
		var (
			mu     sync.Mutex
			served []int
			errs   []error
			wg     sync.WaitGroup
		)
		for i, c := range line {
			ch := campaign(cctx, c, fmt.Sprintf("candidate-%d-%d", i, r))
			wg.Go(func() {
				err := (<-ch).err
				if err == nil {
					mu.Lock()
					served = append(served, i)
					mu.Unlock()
					err = c.resign(cctx)
				}
				if err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("candidate %d: %w", i, err))
					mu.Unlock()
				}
			})
			if gap == 0 {
				if err := queued(ctx, c); err != nil {
					cancel()
					wg.Wait()
					return res, fmt.Errorf("round %d: %w", r, err)
				}
			} else {
				time.Sleep(gap)
			}
		}
		var err error
		for _, c := range line {
			if err = queued(ctx, c); err != nil {
				break
			}
		}
		if err == nil {
			err = holder.resign(ctx)
		}
		if err != nil {
			cancel()
			wg.Wait()
			return res, fmt.Errorf("round %d: %w", r, err)
		}
		done := make(chan struct{})
		go func() {
			wg.Wait()
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(stepTimeout):
			cancel()
			<-done
			return res, fmt.Errorf("round %d: the line was not served within %v", r, stepTimeout)
		}
		cancel()
		if len(errs) > 0 {
			return res, fmt.Errorf("round %d: %w", r, errs[0])
		}
		res.Elected += len(served)
		inversions := 0
		for a := range served {
			for b := a + 1; b < len(served); b++ {
				res.Pairs++
				if served[a] > served[b] {
					inversions++
				}
			}
		}
		res.Inversions += inversions
		res.PerRound = append(res.PerRound, inversions)
	}
	return res, nil
}
