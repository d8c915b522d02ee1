package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"
)

// chaosPlan is what faults a run injects (-chaos, -restart-master), into
// which of the servers the command started, and how often.
type chaosPlan struct {
	kind  string
	every span // the quiet time before each fault
	// targets is how many servers a fault may hit: the masters of a
	// quorum (a fault hits one that is not under a fault already), or the
	// one server or set. limit is how many faults may be under way at
	// once: fewer than half the masters of a quorum, one otherwise.
	targets, limit int
	count          int    // faults in all; 0: as many as the run has time for
	desc           string // the plan in words, for the report
	// strike makes one fault on target i, recording its steps in log,
	// and returns when the fault is over: its server back, or the
	// failover done and the set ready for another. Once the server is
	// back (or the failover done), it stops waiting when ctx ends.
	strike func(ctx context.Context, i int, log faultLog)
}

// newChaosPlan returns the plan of c's faults into t, the deployment the
// command started for them; nil when the run injects none.
func newChaosPlan(c config, t *target) *chaosPlan {
	s := &striker{tgt: t, cfg: c, delay: restartDelay(c)}
	switch {
	case c.RestartMaster > 0: // one restart-empty, of master 1: the one target
		return &chaosPlan{kind: chaosRestartEmpty, every: span{c.RestartMaster, c.RestartMaster}, targets: 1, limit: 1, count: 1,
			desc:   fmt.Sprintf("%s of master 1 at +%v, down %v", chaosRestartEmpty, c.RestartMaster, s.delay),
			strike: s.restartEmpty}
	case c.Chaos == "":
		return nil
	}
	p := &chaosPlan{kind: c.Chaos, every: c.Every, targets: 1, limit: 1}
	if t.quorum() {
		p.targets, p.limit = len(t.masters), (len(t.masters)-1)/2
	}
	p.desc = fmt.Sprintf("%s, %v of quiet before each", c.Chaos, &c.Every)
	switch c.Chaos {
	case chaosRestartAOF:
		p.strike = s.restartAOF
	case chaosRestartEmpty:
		p.strike = s.restartEmpty
		p.desc += fmt.Sprintf(", down %v", s.delay)
	case chaosPause:
		p.strike = s.pause
		p.desc += fmt.Sprintf(", stopped %v", c.Down)
	case chaosFailover:
		p.strike = s.failover
	case chaosKillPrimary:
		p.strike = s.killPrimary
		if c.onCluster() {
			p.strike = s.killClusterMaster
			p.desc += ", the master of a random lock's slot"
		}
	}
	if t.quorum() {
		p.desc += fmt.Sprintf(", on a random master, at most %d down at once", p.limit)
	}
	return p
}

// faultLog is the record of one fault under way: the fault's goroutine
// writes its steps while the injector's readers may read it.
type faultLog struct {
	mu *sync.Mutex // the injector's
	f  *fault      // guarded by mu
}

// set changes the record.
func (l faultLog) set(change func(f *fault)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	change(l.f)
}

// now records the present as one step of the fault, with set, and
// returns it.
func (l faultLog) now(step func(f *fault, t time.Time)) time.Time {
	t := wall(time.Now())
	l.set(func(f *fault) { step(f, t) })
	return t
}

// fail records why the fault could not be made or waited out.
func (l faultLog) fail(err error) {
	l.set(func(f *fault) { f.Err = err.Error() })
}

// injector injects the faults of a plan from a goroutine of its own until
// finish, which waits for it and for every fault under way.
type injector struct {
	plan  *chaosPlan
	start time.Time  // the start of the run
	end   time.Time  // no fault is injected from then on; zero: until finish
	rng   *rand.Rand // used by the loop only
	quit  chan struct{}
	done  chan struct{} // closed when the loop and every fault have ended
	// ctx ends with the run: a fault whose server is back then waits no
	// longer for it to be ready for another.
	ctx    context.Context
	cancel context.CancelFunc

	mu     sync.Mutex
	faults []*fault // guarded by mu; in the order injected
}

// start starts injecting faults into a run that started at start, and
// whose workload ends at end (zero: when its -ops are made), with choices
// drawn from seed.
func (p *chaosPlan) start(start, end time.Time, seed uint64) *injector {
	in := &injector{plan: p, start: start, end: end, rng: rand.New(rand.NewPCG(seed, 0xfa017)),
		quit: make(chan struct{}), done: make(chan struct{})}
	in.ctx, in.cancel = context.WithCancel(context.Background())
	go in.loop() // owned by in: finish waits for it
	return in
}

// loop injects one fault after another: each after a quiet time drawn
// from the plan, counted from the start of the run, the last fault
// injected or the last one over, whichever came later, and only while
// fewer faults than the plan's limit are under way. It stops at quit, at
// the end of the workload, or once a fault failed (the deployment may no
// longer be what the plan assumes), and then waits for the faults under
// way.
func (in *injector) loop() {
	defer close(in.done)
	var wg sync.WaitGroup
	defer wg.Wait()
	type end struct {
		target int
		failed bool
	}
	ended := make(chan end, in.plan.limit) // never more under way
	busy := map[int]bool{}                 // targets under a fault
	last := in.start
	timer := time.NewTimer(time.Hour) // set before each wait
	defer timer.Stop()
	for n := 1; in.plan.count == 0 || n <= in.plan.count; n++ {
		quiet := in.plan.every.draw(in.rng)
		for due := false; !due; {
			var tick <-chan time.Time // nil, never ready, while the limit is reached
			if len(busy) < in.plan.limit {
				timer.Reset(time.Until(last.Add(quiet)))
				tick = timer.C
			}
			select {
			case <-in.quit:
				return
			case e := <-ended:
				if e.failed {
					return
				}
				delete(busy, e.target)
				last = time.Now()
			case <-tick:
				due = true
			}
		}
		if !in.end.IsZero() && !time.Now().Before(in.end) {
			return
		}
		i := in.pick(busy)
		busy[i] = true
		f := &fault{N: n, Kind: in.plan.kind}
		in.mu.Lock()
		in.faults = append(in.faults, f)
		in.mu.Unlock()
		last = time.Now()
		wg.Go(func() {
			log := faultLog{&in.mu, f}
			in.plan.strike(in.ctx, i, log)
			failed := false
			log.set(func(f *fault) { failed = f.Err != "" })
			ended <- end{i, failed}
		})
	}
}

// pick returns a target not under a fault, at random.
func (in *injector) pick(busy map[int]bool) int {
	free := make([]int, 0, in.plan.targets)
	for i := range in.plan.targets {
		if !busy[i] {
			free = append(free, i)
		}
	}
	return free[in.rng.IntN(len(free))]
}

// counts returns how many faults were injected so far, and how many of
// them are over.
func (in *injector) counts() (injected, over int) {
	if in == nil {
		return 0, 0
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	for _, f := range in.faults {
		if f.over() {
			over++
		}
	}
	return len(in.faults), over
}

// finish injects no more faults, waits for those under way, and returns
// every fault injected, with its times relative to the start of the run.
func (in *injector) finish() []fault {
	close(in.quit)
	in.cancel()
	<-in.done
	out := make([]fault, len(in.faults))
	for i, f := range in.faults {
		out[i] = *f
		out[i].settle(in.start)
	}
	return out
}
