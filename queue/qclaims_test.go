package queue_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock/queue"
)

// The checkers of the quorum lock's promises over the history of a run on
// several masters (see qsim_test.go): mutual exclusion over the clients'
// belief intervals, committed tokens in commit order, bakery FIFO with
// its preconditions, and progress once calls stop coming.

// history is what a run recorded: every Lock call, and the majority.
type history struct {
	q       int
	calls   []*lockCall
	skipped int   // commits made without a round: a majority drew the token itself
	leads   leads // the masters' holds of candidates (see sim.lead)
}

// checkMutualExclusion reports two Lock calls whose clients believed
// they held the lock at once: from the grant until the release, or until
// the validity their evidence gave them ran out, or a crash.
func checkMutualExclusion(h history) error {
	var held []*lockCall
	for _, c := range h.calls {
		if c.granted >= 0 {
			held = append(held, c)
		}
	}
	slices.SortFunc(held, func(a, b *lockCall) int { return cmpInt(a.granted, b.granted) })
	var last *lockCall
	for _, c := range held {
		if last != nil && c.granted < last.ended {
			return fmt.Errorf("mutual exclusion: call %d believed it held from %d µs to %d µs, call %d from %d µs",
				last.id, last.granted, last.ended, c.id, c.granted)
		}
		if last == nil || c.ended > last.ended {
			last = c
		}
	}
	return nil
}

// checkTokens checks the order of committed tokens: a token committed by
// a majority before another call's commit round began is below that
// call's token, however the masters' clocks and the holders' leases
// behave, as long as the masters keep their counters. It returns how many
// commits it checked.
func checkTokens(h history) (int, error) {
	var commits []*lockCall
	for _, c := range h.calls {
		if c.token > 0 {
			commits = append(commits, c)
		}
	}
	byAck := slices.Clone(commits)
	slices.SortFunc(byAck, func(a, b *lockCall) int { return cmpInt(a.commitAck, b.commitAck) })
	slices.SortFunc(commits, func(a, b *lockCall) int { return cmpInt(a.commitStart, b.commitStart) })
	var top *lockCall // the largest token acknowledged so far
	k := 0
	for _, x := range commits {
		for ; k < len(byAck) && byAck[k].commitAck < x.commitStart; k++ {
			if top == nil || byAck[k].token > top.token {
				top = byAck[k]
			}
		}
		if top != nil && x.token <= top.token {
			return len(commits), fmt.Errorf("token order: call %d committed token %d by %d µs, call %d's round began at %d µs and committed %d",
				top.id, top.token, top.commitAck, x.id, x.commitStart, x.token)
		}
	}
	return len(commits), nil
}

// checkFIFO checks bakery FIFO: when W's join ran on a majority of masters
// before X's doorway began, W kept its place on a majority of those until
// X was granted (no prune, no passed deadline, no hold of it that ended
// but by its own release), and W neither gave up nor crashed before, W was
// granted before X. It returns how many such pairs it checked.
func checkFIFO(h history) (int, error) {
	pairs := 0
	for _, x := range h.calls {
		if x.granted < 0 {
			continue
		}
		for _, w := range h.calls {
			if w == x || before(w.granted, x.doorway) || before(w.gaveUp, x.granted) || before(w.crashed, x.granted) {
				continue // served before X came; or out of line before X was served
			}
			if kept(w, x.doorway, x.granted) < h.q {
				continue
			}
			pairs++
			if w.granted < 0 || w.granted >= x.granted {
				return pairs, fmt.Errorf("FIFO: call %d joined a majority before call %d's doorway at %d µs and kept its place, "+
					"but call %d was granted at %d µs, call %d at %d µs (-1: never); tickets %d and %d",
					w.id, x.id, x.doorway, x.id, x.granted, w.id, w.granted, w.ticket, x.ticket)
			}
		}
	}
	return pairs, nil
}

// before reports whether the event at t (-1: none) happened before u.
func before(t, u int64) bool { return t >= 0 && t < u }

// kept returns on how many masters w ran a join before from, and kept its
// place there from that join until to.
func kept(w *lockCall, from, to int64) int {
	n := 0
	for m, joins := range w.joins {
		var lost int64 = -1
		for _, t := range w.losses[m] {
			if t <= to {
				lost = max(lost, t)
			}
		}
		for _, j := range joins {
			if j < from && j >= lost {
				n++
				break
			}
		}
	}
	return n
}

// checkProgress reports a Lock call left waiting at the end of a run,
// once calls stopped coming: its client neither gave up nor crashed.
func checkProgress(h history) error {
	for _, c := range h.calls {
		if c.phase == pDoorway || c.phase == pWaiting {
			return fmt.Errorf("progress: call %d (from %d µs, ticket %d) still waits", c.id, c.doorway, c.ticket)
		}
	}
	return nil
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// simConfigs are the shapes of the runs: 3 and 5 masters whose clocks
// are up to 20 ms apart, 3 to 5 clients, calls that give up, clients that
// crash, and holders that pause past their lease once they have their
// token.
var simConfigs = []simConfig{
	{masters: 3, clients: 3, calls: 1_500_000, offset: 20_000, giveUp: 0.1, crash: 0.02, pause: 0.05},
	{masters: 3, clients: 5, calls: 1_500_000, offset: 20_000, giveUp: 0.1, crash: 0.02, pause: 0.05},
	{masters: 5, clients: 4, calls: 1_500_000, offset: 20_000, giveUp: 0.1, crash: 0.02, pause: 0.05},
}

// checkValues reports a master's hold of a candidate whose value was not
// the one the candidate campaigned with (see sim.lead).
func checkValues(h history) error { return h.leads.wrong }

// checkRun runs every checker on h.
func checkRun(h history) (tokens, pairs int, err error) {
	if err := checkMutualExclusion(h); err != nil {
		return 0, 0, err
	}
	if err := checkValues(h); err != nil {
		return 0, 0, err
	}
	if tokens, err = checkTokens(h); err != nil {
		return tokens, 0, err
	}
	if pairs, err = checkFIFO(h); err != nil {
		return tokens, pairs, err
	}
	return tokens, pairs, checkProgress(h)
}

// The scripts' model on 3 and 5 masters, driven by clients that follow
// the protocol, half of them an election's candidates, keeps every claim:
// no two clients believe they hold the lock at once, committed tokens rise
// in commit order, a waiter whose join reached a majority before another's
// doorway is served first, nobody is left waiting, and every master's
// hold of a candidate has the candidate's value.
func TestQuorumRunsKeepTheClaims(t *testing.T) {
	for _, cfg := range simConfigs {
		name := fmt.Sprintf("N=%d,clients=%d", cfg.masters, cfg.clients)
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var tokens, pairs, skipped, held, told int
			for _, seed := range seeds(t, 3) {
				h := runSim(cfg, seed)
				k, p, err := checkRun(h)
				require.NoError(t, err, reproduce("TestQuorumRunsKeepTheClaims/"+name, seed))
				tokens, pairs, skipped = tokens+k, pairs+p, skipped+h.skipped
				held, told = held+h.leads.held, told+h.leads.told
			}
			require.Positive(t, held, "holds of candidates checked")
			require.Positive(t, told, "changes of leaderships told")
			require.Positive(t, tokens, "commits checked")
			require.Positive(t, skipped, "commits a majority's equal tokens made needless, checked with the rest")
			require.Less(t, skipped, tokens, "commits made by a round, checked with the rest")
			require.Positive(t, pairs, "FIFO pairs checked")
			t.Logf("%d commits checked, %d of them without a round; %d holds of candidates, %d changes told", tokens, skipped, held, told)
		})
	}
}

// catches runs the configurations with flaws from seed 0 on until check
// reports, for at most runs runs, and returns what it reported.
func catches(t *testing.T, flaws queue.QuorumFlaw, tweak func(*simConfig), runs int, check func(history) error) error {
	t.Helper()
	for seed := range uint64(runs) {
		cfg := simConfigs[seed%uint64(len(simConfigs))]
		cfg.flaws = flaws
		if tweak != nil {
			tweak(&cfg)
		}
		if err := check(runSim(cfg, seed)); err != nil {
			t.Logf("seed %d, %d masters: %v", seed, cfg.masters, err)
			return err
		}
	}
	return nil
}

func fifo(h history) error       { _, err := checkFIFO(h); return err }
func tokenOrder(h history) error { _, err := checkTokens(h); return err }

// Each checker catches the scripts without the step it relies on: a
// hand-over that does not look for the hold (mutual exclusion), joins
// that do not write their ticket back (FIFO: a later doorway draws a
// smaller ticket from a master whose clock is behind), commits and
// releases that do not raise the counter (the token order: the next
// holder's majority draws tokens from counters below a token committed
// from a master whose clock is ahead). Either raise alone goes uncaught
// in these runs: the other covers it when the holder releases (it
// commits on a majority and releases on the masters that hold for it,
// and every majority of the next holder meets both), and most holds are
// drawn the same token by a majority, whose counters are then at it
// already, so their commits make no round. When a master's clock jumps,
// the commit's raise is needed (see
// TestQuorumClockJumpsBreakMutualExclusionNotTheTokenOrder).
func TestQuorumCheckersCatchBrokenScripts(t *testing.T) {
	for _, tt := range []struct {
		name  string
		flaws queue.QuorumFlaw
		check func(history) error
	}{
		{"mutual exclusion", queue.FlawHandOverWhileHeld, checkMutualExclusion},
		{"FIFO", queue.FlawNoWriteBack, fifo},
		{"token order", queue.FlawNoCommitRaise | queue.FlawNoReleaseRaise, tokenOrder},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Error(t, catches(t, tt.flaws, nil, 30, tt.check), "no run broke the claim")
		})
	}
}

// A master's wall clock that jumps forward, which the quorum lock assumes
// never happens, breaks mutual exclusion: its holds expire early. The
// order of committed tokens holds all the same, as it rests on the
// counters alone: a counter raised to a token is kept until the master's
// own clock term has passed it. It holds by the commit's raise: without
// it, a holder that pauses past its lease (its holds expire, and it
// releases nothing) leaves counters below its token, drawn from a master
// whose clock jumped ahead, and the next holder's tokens are below it.
func TestQuorumClockJumpsBreakMutualExclusionNotTheTokenOrder(t *testing.T) {
	jumps := func(c *simConfig) { c.jumps, c.pause = 300_000, 0.5 }
	t.Run("mutual exclusion", func(t *testing.T) {
		t.Parallel()
		require.Error(t, catches(t, 0, jumps, 30, checkMutualExclusion), "no run broke mutual exclusion")
	})
	t.Run("token order", func(t *testing.T) {
		t.Parallel()
		for _, cfg := range simConfigs {
			jumps(&cfg)
			for _, seed := range seeds(t, 3) {
				_, err := checkTokens(runSim(cfg, seed))
				require.NoError(t, err, reproduce("TestQuorumClockJumpsBreakMutualExclusionNotTheTokenOrder/token_order", seed))
			}
		}
	})
	t.Run("token order without the commit's raise", func(t *testing.T) {
		t.Parallel()
		require.Error(t, catches(t, queue.FlawNoCommitRaise, jumps, 30, tokenOrder), "no run broke the token order")
	})
}
