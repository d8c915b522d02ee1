package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock/fairlock/internal/redistest"
)

// startMasters starts n redis-servers without persistence on free
// loopback ports, at once, and returns them as a quorum's masters. On an
// error it stops those it started.
func startMasters(n int) (*target, error) {
	servers := make([]*redistest.Server, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range servers {
		wg.Go(func() { servers[i], errs[i] = redistest.Start() })
	}
	wg.Wait()
	t := &target{}
	for _, s := range servers {
		if s != nil {
			t.local = append(t.local, s)
			t.masters = append(t.masters, s.Addr)
		}
	}
	if err := errors.Join(errs...); err != nil {
		t.close()
		return nil, fmt.Errorf("starting %d masters: %w", n, err)
	}
	return t, nil
}

// driftAllowance is the clock drift a master's stay down allows for: the
// quorum client's default drift factor.
const driftAllowance = 0.01

// restartDelay is how long a killed master stays down before it is
// restarted empty: longer than any hold or waiter's place it kept could
// have lasted (the lease and the waiter TTL, with the clients' clock
// drift), and a second more. A master that comes back sooner without its
// keys breaks the quorum lock's assumption of a delayed restart.
func restartDelay(c config) time.Duration {
	d := max(c.Lease, c.WaiterTTL)
	return d + time.Duration(float64(d)*driftAllowance) + time.Second
}

// masterRestart is what -restart-master did, for the report and the
// check. Times are wall clock; zero when the step was not reached.
type masterRestart struct {
	Master    int       `json:"master"` // 1 for the first of the masters
	Addr      string    `json:"addr"`
	Planned   float64   `json:"planned_s"` // when the kill was due, after the start of the run
	Delay     float64   `json:"delay_s"`   // how long it was to stay down
	Killed    time.Time `json:"killed,omitzero"`
	Dead      time.Time `json:"dead,omitzero"`      // the process had exited: its keys were gone
	Restarted time.Time `json:"restarted,omitzero"` // answering again, empty
	Err       string    `json:"err,omitempty"`      // the restart failed
}

// outage returns the stretch in which the master lost its keys, if it
// was killed.
func (r *masterRestart) outage() (outage, bool) {
	if r == nil || r.Killed.IsZero() {
		return outage{}, false
	}
	return outage{From: r.Killed, To: firstSet(r.Dead, r.Killed)}, true
}

// restarter kills one master of those the command started, at a planned
// time, and restarts it once it has been down for its delay.
type restarter struct {
	srv  *redistest.Server
	quit chan struct{} // closed by finish: the run is over
	done chan struct{} // closed when the goroutine has exited
	rec  masterRestart // written by the goroutine; read after done
}

// startRestarter plans the restart of master i (from 0) of t, the kill
// at start+after and the restart delay later.
func startRestarter(t *target, i int, start time.Time, after, delay time.Duration) *restarter {
	r := &restarter{
		srv: t.local[i], quit: make(chan struct{}), done: make(chan struct{}),
		rec: masterRestart{Master: i + 1, Addr: t.masters[i], Planned: after.Seconds(), Delay: delay.Seconds()},
	}
	go r.loop(time.Until(start.Add(after)), delay) // owned by r: finish waits for it
	return r
}

func (r *restarter) loop(wait, delay time.Duration) {
	defer close(r.done)
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-r.quit:
		return // the run ended first
	case <-t.C:
	}
	r.rec.Killed = wall(time.Now())
	r.srv.Kill()
	r.rec.Dead = wall(time.Now())
	// The restart is made even when the run ends meanwhile: the keys of
	// every master are read after the run.
	t.Reset(delay)
	<-t.C
	if err := r.srv.Restart(); err != nil {
		r.rec.Err = err.Error()
		return
	}
	r.rec.Restarted = wall(time.Now())
}

// finish cancels the restart if it is not due yet, waits for one under
// way, and returns what was done.
func (r *restarter) finish() *masterRestart {
	close(r.quit)
	<-r.done
	return &r.rec
}

// quorumSums describes a run on a quorum of masters.
type quorumSums struct {
	Masters []string     `json:"masters"`
	Started bool         `json:"started,omitempty"` // the command started them on loopback
	Restart *restartSums `json:"restart,omitempty"` // -restart-master
	Bakery  bakeryTally  `json:"bakery"`
}

// restartSums is what -restart-master did, its times also given in
// seconds after the start of the run (0: not reached).
type restartSums struct {
	masterRestart
	KilledAt    float64 `json:"killed_at_s,omitempty"`
	RestartedAt float64 `json:"restarted_at_s,omitempty"`
	Down        float64 `json:"down_s,omitempty"` // from the kill to the restart
	// LeasesLost counts the holds that lost their lease and may have
	// counted the master as it lost its keys: not violations (see
	// quorumCheck.lostWithMaster).
	LeasesLost int `json:"leases_lost"`
}

// quorumReport sums up a run on t's masters for the report: the restart
// (nil: none was asked for) and what the check counted. started is the
// start of the run.
func quorumReport(t *target, restart *masterRestart, qc *quorumCheck, started time.Time) *quorumSums {
	q := &quorumSums{Masters: t.masters, Started: len(t.local) > 0, Bakery: qc.Tally}
	if restart != nil {
		rs := &restartSums{masterRestart: *restart, LeasesLost: qc.LostWithMaster}
		if !restart.Killed.IsZero() {
			rs.KilledAt = restart.Killed.Sub(started).Seconds()
		}
		if !restart.Restarted.IsZero() {
			rs.RestartedAt = restart.Restarted.Sub(started).Seconds()
			rs.Down = restart.Restarted.Sub(restart.Killed).Seconds()
		}
		q.Restart = rs
	}
	return q
}

// write writes the quorum's lines of the text report.
func (q *quorumSums) write(b *strings.Builder) {
	how := ""
	if q.Started {
		how = ", started on loopback"
	}
	fmt.Fprintf(b, "quorum:      %d masters (%s%s)\n", len(q.Masters), strings.Join(q.Masters, ","), how)
	if r := q.Restart; r != nil {
		switch {
		case r.Killed.IsZero():
			fmt.Fprintf(b, "restart:     master %d (%s) was to be killed at +%.1fs: the run ended first\n", r.Master, r.Addr, r.Planned)
		case r.Restarted.IsZero():
			fmt.Fprintf(b, "restart:     master %d (%s) killed at +%.1fs (SIGKILL: its keys lost); restarting it failed: %s\n",
				r.Master, r.Addr, r.KilledAt, r.Err)
		default:
			fmt.Fprintf(b, "restart:     master %d (%s) killed at +%.1fs (SIGKILL: its keys lost), restarted empty at +%.1fs: down %.1fs\n",
				r.Master, r.Addr, r.KilledAt, r.RestartedAt, r.Down)
		}
		if r.LeasesLost > 0 {
			fmt.Fprintf(b, "             %d hold(s) that may have counted it lost their lease (not violations)\n", r.LeasesLost)
		}
	}
	t := q.Bakery
	fmt.Fprintf(b, "bakery:      %d pairs checked (a waiter whose join had reached a majority before another call began), %d passed", t.Pairs, t.Passed)
	if t.AcrossRestart > 0 {
		fmt.Fprintf(b, "; %d pairs left out across the restart", t.AcrossRestart)
	}
	if t.Rejoined > 0 {
		fmt.Fprintf(b, "; %d waiters joined again (their last join counted)", t.Rejoined)
	}
	b.WriteByte('\n')
}

// quietRedis keeps go-redis from logging every failed dial of a master
// that is down, as one is through -restart-master, in a run on a quorum:
// the report says when it was down. -v lets them through.
func quietRedis(c config) {
	if c.quorum() && !c.Verbose {
		redis.SetLogger(discardRedisLog{})
	}
}

// discardRedisLog is a go-redis logger that writes nothing.
type discardRedisLog struct{}

func (discardRedisLog) Printf(context.Context, string, ...any) {}
