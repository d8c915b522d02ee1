package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/internal/pause"
)

// The attempts of the election kind: each is one candidate's Campaign of
// a name's Election, with the calls and the record of a Mutex's attempt
// (lockOne), the leadership held as a hold is and ended with Resign. An
// Election is a Mutex whose holds are leaderships, so the checks of a
// Mutex's line (one hold at a time, rising tokens, FIFO) are the
// election's (one leader at a time, rising terms, candidates served in
// the order they began). Observers (viewer) watch each election
// meanwhile; electcheck.go judges what they saw.

// candidate is a Campaign with one value, as an attempt makes it.
type candidate struct {
	e     *fairlock.Election
	value string
}

var _ single = candidate{}

func (c candidate) Lock(ctx context.Context) (context.Context, error) {
	return c.e.Campaign(ctx, c.value)
}

// TryLock is not made: an Election has none, and the election kind
// draws no TryLock (config.Try is 0).
func (c candidate) TryLock(context.Context) (context.Context, error) {
	return nil, errors.New("an Election has no TryLock")
}

func (c candidate) Unlock(ctx context.Context) error         { return c.e.Resign(ctx) }
func (c candidate) Token(ctx context.Context) (int64, error) { return c.e.Term(ctx) }
func (c candidate) Name() string                             { return c.e.Name() }

// maxProclaims is the most values a leadership proclaims (-proclaim).
const maxProclaims = 3

// electionAttempt makes one candidate campaign on a random name's
// Election with a value of its own ("<worker>#<n>": every value of the
// run is unique, so that a view names the leadership it stands for),
// maybe with a short deadline (-giveup), and, once elected, lead.
func (w *worker) electionAttempt(cfg *config, rec recorder) {
	e := w.elections[w.rng.IntN(len(w.elections))]
	p := w.draw(cfg)
	w.made++
	value := fmt.Sprintf("%s#%d", w.id, w.made)
	var changes []bool // the value changes while leading: true for Campaign with the leadership's context
	if w.rng.Float64() < cfg.Proclaim {
		changes = make([]bool, 1+w.rng.IntN(maxProclaims))
		for i := range changes {
			changes[i] = w.rng.IntN(2) == 0
		}
	}
	a := attempt{Type: runElection, Value: value, Client: w.client.ID()}
	w.lockOne(candidate{e, value}, a, p, cfg, rec, func(held context.Context, term int64) {
		w.lead(e, held, term, value, p.holdFor, changes)
	})
}

// lead keeps the leadership held (term term, campaigned with value) for
// d: it proclaims the values of changes along the way ("<value>.1", ...),
// each with Proclaim or with Campaign and the leadership's context, reads
// Leader once, which must name this leadership, its latest value and
// this worker's Client, and resigns.
func (w *worker) lead(e *fairlock.Election, held context.Context, term int64, value string, d time.Duration, changes []bool) {
	lost := func(err error) bool {
		if errors.Is(err, fairlock.ErrLeaseLost) {
			w.leaseLost()
			return true
		}
		return false
	}
	piece := d / time.Duration(len(changes)+1)
	cur := value
	for i, viaCampaign := range changes {
		if !pause.For(held, piece) {
			break
		}
		next := fmt.Sprintf("%s.%d", value, i+1)
		pc := proclaim{Value: next, Campaign: viaCampaign, Start: wall(time.Now())}
		var err error
		if viaCampaign {
			var ctx context.Context
			if ctx, err = e.Campaign(held, next); err == nil {
				if t, terr := e.Term(ctx); terr != nil && !lost(terr) || terr == nil && t != term {
					w.fail("a Campaign with the leadership's context returned term %d (%v), the leadership's %d", t, terr, term)
				}
			}
		} else {
			err = e.Proclaim(held, next)
		}
		pc.End = wall(time.Now())
		if err != nil {
			pc.Err = err.Error()
		}
		w.update(func(a *attempt) { a.Proclaims = append(a.Proclaims, pc) })
		if err != nil {
			switch {
			case lost(err) || lost(context.Cause(held)):
			case unreached(err):
				w.update(func(a *attempt) { a.Unreached++ })
			default:
				w.fail("proclaim: %v", err)
			}
			cur = "" // made or not: either value may be read
			break
		}
		cur = next
	}
	mismatch := w.readLeader(e, held, term, cur)
	w.hold(holding{held: held, release: func(ctx context.Context) error {
		err := e.Resign(ctx)
		if err != nil {
			w.update(func(a *attempt) { a.ResignFailed = true })
		}
		return err
	}}, piece, 0)
	if mismatch != "" {
		// A leadership lost may be read gone, or another's: only a
		// leadership kept to its Resign must be read as it is.
		var kept bool
		w.update(func(a *attempt) { kept = !a.LeaseLost })
		if kept {
			w.fail("%s", mismatch)
		}
	}
}

// unreached reports whether err is the error of a call that could not
// reach Redis, or that Redis could not serve then: a server down, a
// connection cut, a reply of a failover or a slot that moved (see
// failoverReplies), on a quorum fewer than a majority of the masters
// answering (ErrNoQuorum). Leader and Proclaim send their call once (within the
// call timeout), as IsLocked and ForceUnlock do, where Unlock, TryLock
// and a waiting call send theirs again; so a fault explains it, and it
// is counted (attempt.Unreached), not judged.
func unreached(err error) bool {
	var re redis.Error
	if errors.As(err, &re) {
		for _, p := range failoverReplies {
			if strings.HasPrefix(re.Error(), p) {
				return true
			}
		}
	}
	return connectionError(err) || errors.Is(err, fairlock.ErrUnavailable) || errors.Is(err, fairlock.ErrNoQuorum)
}

// failoverReplies are the replies of a server that cannot serve a call
// now (loading its data, in a failover) or no longer serves its slot
// (MOVED, ASK, TRYAGAIN; a replica, READONLY): a Leader read during a
// Cluster's failover may fail with one.
var failoverReplies = []string{"LOADING", "BUSY", "CLUSTERDOWN", "MASTERDOWN", "MOVED", "ASK", "TRYAGAIN", "READONLY"}

// readLeader reads the election's leadership while leading it, and
// returns what is wrong with it: "" when it is this one (term, value,
// this worker's Client; any value when value is "", after a proclaim
// that failed). A read that could not reach Redis is counted, not judged
// (see unreached).
func (w *worker) readLeader(e *fairlock.Election, held context.Context, term int64, value string) string {
	l, err := e.Leader(context.Background())
	switch {
	case err != nil && unreached(err):
		w.update(func(a *attempt) { a.Unreached++ })
		return ""
	case errors.Is(err, fairlock.ErrNoLeader):
		return fmt.Sprintf("Leader, read while leading with term %d, found no leader", term)
	case err != nil:
		if held.Err() == nil {
			w.fail("Leader: %v", err)
		}
		return ""
	case l.Term != term || value != "" && l.Value != value || l.Client != w.client.ID():
		return fmt.Sprintf("Leader, read while leading with term %d and value %q (Client %s), read term %d and value %q (Client %s)",
			term, value, w.client.ID(), l.Term, l.Value, l.Client)
	}
	return ""
}

// viewer is one observer of an election: it receives every view its
// Observe channel gives, with the time it received it, until the run is
// over (see run).
type viewer struct {
	e      *fairlock.Election
	rec    watch // written by run's goroutine only, until done is closed
	ch     <-chan fairlock.Leadership
	cancel context.CancelFunc
	first  chan struct{} // closed at the first view, or when run returns
	done   chan struct{} // closed when run returns
}

// newViewer starts observing e, as the observer named id.
func newViewer(id string, e *fairlock.Election) *viewer {
	ctx, cancel := context.WithCancel(context.Background())
	v := &viewer{e: e, cancel: cancel, first: make(chan struct{}), done: make(chan struct{}),
		rec: watch{Observer: id, Lock: e.Name(), Start: wall(time.Now())}}
	ch, err := e.Observe(ctx)
	if err != nil {
		v.rec.Err = "Observe: " + err.Error()
	}
	v.ch = ch
	return v
}

// run receives views until the run is over, then stops observing:
//   - when told that every candidate of the run has ended (settle), it
//     goes on for lag, long enough to see the last changes, and then
//     until it sees the election without a leader (Settled), at most
//     settleFor in all;
//   - when cut is closed (the run was cut short), at once (Cut).
//
// A channel that closes before is an error of the record.
func (v *viewer) run(settle, cut <-chan struct{}, lag, settleFor time.Duration) {
	defer close(v.done)
	defer v.cancel()
	firstSeen := false
	seen := func() {
		if !firstSeen {
			firstSeen = true
			close(v.first)
		}
	}
	defer seen()
	end := func() { v.rec.End = wall(time.Now()) }
	if v.ch == nil {
		end()
		return
	}
	var quiet, limit <-chan time.Time
	lagged := false
	for {
		select {
		case l, ok := <-v.ch:
			now := wall(time.Now())
			if !ok {
				v.rec.Err = "the Observe channel closed before the run was over"
				end()
				return
			}
			v.rec.Views = append(v.rec.Views, view{Term: l.Term, Value: l.Value, Client: l.Client, At: now})
			seen()
			if lagged && !l.HasLeader() {
				v.rec.Settled = true
				end()
				return
			}
		case <-settle:
			settle = nil
			v.rec.Settle = wall(time.Now())
			quiet, limit = time.After(lag), time.After(settleFor)
		case <-quiet:
			lagged = true
			if n := len(v.rec.Views); n > 0 && v.rec.Views[n-1].Term == 0 {
				v.rec.Settled = true
				end()
				return
			}
		case <-limit:
			end()
			return
		case <-cut:
			v.rec.Cut = true
			end()
			return
		}
	}
}

// recoverWithin is how long after a fault an observer may take to hear
// of a change: while Redis does not answer, a Client's watcher of an
// election reads again with a backoff of up to 2 s (fairlock's
// watchRetryMax), so its first reading once Redis is back may come that
// much later.
const recoverWithin = 2 * time.Second

// settleFor is how long an observer waits, once every candidate has
// ended, for the election to have no leader: a leadership whose Resign
// failed, or whose holder gave its lease up, ends in Redis within the
// lease, and is read within -lag of that (or of a fault's end).
func settleFor(cfg *config) time.Duration { return cfg.Lag + cfg.Lease + recoverWithin }

// firstViewWithin bounds the wait for every observer's first view before
// the candidates start.
const firstViewWithin = 10 * time.Second
