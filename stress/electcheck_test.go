package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock"
)

// testLag is the lag bound of the hand-made election histories.
const testLag = 50 * time.Millisecond

// leader is a candidate of election "a" that campaigned with value at
// start (its join sent then), was elected at granted with term, and
// resigned at unlock (returning 0.5ms later). Its Client is "c-" + its
// worker.
func leader(worker, value string, start, granted, unlock float64, term int64) attempt {
	a := queued(worker, start, start, granted, unlock, term)
	a.Type, a.Value, a.Client = runElection, value, "c-"+worker
	return a
}

// proclaiming is a with one more value proclaimed, called at start and
// returned 0.5ms later.
func proclaiming(a attempt, value string, start float64) attempt {
	a.Proclaims = append(slices.Clone(a.Proclaims), proclaim{Value: value, Start: at(start), End: at(start + 0.5)})
	return a
}

// vw is a view of term and value (of the Client of worker), received at
// ms; term 0 is no leader.
func vw(term int64, value, worker string, ms float64) view {
	v := view{Term: term, Value: value, At: at(ms)}
	if term > 0 {
		v.Client = "c-" + worker
	}
	return v
}

// observed is the record of an observer of election "a" that observed
// from -1ms, was told at 10ms that every candidate had ended, and
// stopped, settled, 60ms later.
func observed(id string, views ...view) watch {
	return watch{Observer: id, Lock: "a", Start: at(-1), Settle: at(10), End: at(70), Settled: true, Views: views}
}

// electionHistory is a clean history of election "a": w1 leads from 1 to
// 4 with term 1 and proclaims at 2; w2, in line since 2, is handed it at
// 5 (term 2) and resigns at 6, leaving no leader; w3's Campaign gives up
// at its deadline 7, as it is granted term 3, which it gives back; w4
// leads from 8.5 to 9 (term 4). Observer o1 sees every change, o2 only
// some, each in time.
func electionHistory() ([]attempt, []watch) {
	w1 := proclaiming(leader("w1", "w1#1", 0, 1, 4, 1), "w1#1.1", 2)
	w2 := leader("w2", "w2#1", 2, 5, 6, 2)
	w3 := gaveUp("w3", 6.2, 6.2, 7)
	w3.Type, w3.Value, w3.Client = runElection, "w3#1", "c-w3"
	w4 := leader("w4", "w4#1", 8, 8.5, 9, 4)
	o1 := observed("o1",
		vw(0, "", "", -0.9), vw(1, "w1#1", "w1", 0.8), vw(1, "w1#1.1", "w1", 2.4), vw(2, "w2#1", "w2", 5.2),
		vw(0, "", "", 6.6), vw(3, "w3#1", "w3", 7.2), vw(0, "", "", 7.5), vw(4, "w4#1", "w4", 8.6), vw(0, "", "", 9.6))
	o2 := observed("o2",
		vw(0, "", "", -0.5), vw(1, "w1#1.1", "w1", 2.6), vw(0, "", "", 6.8), vw(4, "w4#1", "w4", 8.7), vw(0, "", "", 9.7))
	return []attempt{w1, w2, w3, w4}, []watch{o1, o2}
}

// checkElection checks an election history as a run does: the
// candidates' line as a Mutex's, then the observers.
func checkElection(as []attempt, ws []watch) ([]violation, *electionCheck) {
	ec := &electionCheck{Bound: testLag, Lease: time.Second}
	vs := append(check(as, 0, oneTicket), ec.check(as, ws)...)
	return vs, ec
}

func TestElectionCheckAcceptsACleanHistory(t *testing.T) {
	as, ws := electionHistory()
	vs, ec := checkElection(as, ws)
	assert.Empty(t, vs)
	assert.Equal(t, 2, ec.observers)
	assert.Equal(t, 14, ec.views)
	assert.Equal(t, 1, ec.givenBack, "w3's term, given back")
	// w1: election, proclaim, resign; w2: election, resign; w4: the same.
	assert.Equal(t, 7, ec.changes)
	assert.Len(t, ec.lags, 14, "each change, for each observer")
	for _, l := range ec.lags {
		assert.LessOrEqual(t, l, 3*time.Millisecond)
	}
	vs, _ = checkElection(nil, nil)
	assert.Empty(t, vs)
}

// tamperViews checks the clean history with observer i's views changed
// by f.
func tamperViews(i int, f func(w *watch)) []violation {
	as, ws := electionHistory()
	f(&ws[i])
	vs, _ := checkElection(as, ws)
	return vs
}

// insertView puts v among w's views, in the order of receipt.
func insertView(w *watch, v view) {
	i, _ := slices.BinarySearchFunc(w.Views, v.At, func(x view, t time.Time) int { return x.At.Compare(t) })
	w.Views = slices.Insert(w.Views, i, v)
}

func TestElectionCheckReportsViewsGoingBackwards(t *testing.T) {
	for _, tc := range []struct {
		name, want string
		v          view
	}{
		{"a lower term", "received term 1 at +0.005300s, after term 2 at +0.005200s", vw(1, "w1#1.1", "w1", 5.3)},
		{"an older value", `received value "w1#1" of term 1 at +0.002450s, after its later value "w1#1.1"`, vw(1, "w1#1", "w1", 2.45)},
		{"a term after its end", "received term 2 again at +0.006650s", vw(2, "w2#1", "w2", 6.65)},
	} {
		vs := tamperViews(0, func(w *watch) { insertView(w, tc.v) })
		require.Equal(t, map[violationKind]int{viewBack: 1}, kinds(vs), "%s: %v", tc.name, vs)
		assert.Contains(t, vs[0].Detail, "observer o1 "+tc.want, tc.name)
	}
}

func TestElectionCheckReportsViewsOfNoLeadership(t *testing.T) {
	for _, tc := range []struct {
		name, want string
		change     func(w *watch)
	}{
		{"a value nobody had", `received term 4 with value "nobody" at +0.008600s: no candidate campaigned with that value or proclaimed it`,
			func(w *watch) { w.Views[7].Value = "nobody" }},
		{"another term's value", `received value "w2#1" with term 4 at +0.008600s, where it is the value of term 2 (w2)`,
			func(w *watch) { w.Views[7].Value, w.Views[7].Client = "w2#1", "c-w2" }},
		{"a view before its Campaign", `received term 4 with value "w4#1" at +0.007900s, before the election of w4, term 4 (value "w4#1") began at +0.008000s`,
			func(w *watch) { w.Views[7].At = at(7.9) }},
		{"another Client", `received term 4 with value "w4#1" at +0.008600s naming Client "c-w1", where w4's Client is "c-w4"`,
			func(w *watch) { w.Views[7].Client = "c-w1" }},
	} {
		vs := tamperViews(0, tc.change)
		require.Equal(t, map[violationKind]int{viewFalse: 1}, kinds(vs), "%s: %v", tc.name, vs)
		assert.Contains(t, vs[0].Detail, "observer o1 "+tc.want, tc.name)
	}
}

func TestElectionCheckReportsAnObserverThatLagged(t *testing.T) {
	// o2 receives w4's election 51.5ms after Campaign returned, and its
	// end as late: one stretch of lag, two changes.
	vs := tamperViews(1, func(w *watch) {
		w.Views[3].At, w.Views[4].At = at(60), at(61)
	})
	require.Equal(t, map[violationKind]int{viewLag: 1}, kinds(vs), "%v", vs)
	assert.Contains(t, vs[0].Detail, `observer o2, due to see the election of w4, term 4 (value "w4#1") (certain by +0.008500s) within 50ms, `+
		"received one only at +0.060000s, 0.051s after (its latest view term 0, received +0.006800s); it lagged 1 more change(s) meanwhile")
	assert.Equal(t, at(8.5), vs[0].At)

	// One view in time is enough: o2 saw w4's election within the bound,
	// but not its end.
	vs = tamperViews(1, func(w *watch) { w.Views[4].At = at(61) })
	require.Equal(t, map[violationKind]int{viewLag: 1}, kinds(vs), "%v", vs)
	assert.Contains(t, vs[0].Detail, "due to see the end of term 4 (w4), resigned (certain by +0.009500s)")

	// Never: o2 misses w4's leadership altogether, and ends without a
	// leader all the same: a leadership that began and ended between two
	// reads of its watcher, whose view, no leader, was the state after it
	// all along (Observe sends a view only when it differs from the last).
	vs = tamperViews(1, func(w *watch) { w.Views = w.Views[:3] })
	assert.Empty(t, vs)
	// But a view with a leader kept past the end: o2 misses w4's end
	// (and ends with a view that is not the final state).
	vs = tamperViews(1, func(w *watch) { w.Views = w.Views[:4] })
	require.Equal(t, map[violationKind]int{viewLag: 1, viewFinal: 1}, kinds(vs), "%v", vs)
	assert.Contains(t, vs[0].Detail+vs[1].Detail, "had not received one by its end at +0.070000s")

	// A change the observer stopped too soon to judge counts only if it
	// saw it.
	vs = tamperViews(1, func(w *watch) { w.Views, w.End = w.Views[:3], at(20) })
	assert.Empty(t, vs)
}

func TestElectionCheckMeasuresLagFromTheEndOfALostLease(t *testing.T) {
	as, ws := electionHistory()
	// w4 lost its lease, seen at 9: its leadership ended in Redis by a
	// lease (1s) after that. An observer seeing no leader at 900ms is in
	// time; the bound counts from 1009ms.
	as[3].LeaseLost, as[3].Lost = true, at(9)
	for i := range ws {
		ws[i].End = at(2000)
	}
	vs, _ := checkElection(as, ws)
	require.Equal(t, map[violationKind]int{leaseLost: 1}, kinds(vs), "%v", vs)

	ws[1].Views[4].At = at(1100)
	vs, _ = checkElection(as, ws)
	require.Equal(t, map[violationKind]int{leaseLost: 1, viewLag: 1}, kinds(vs), "%v", vs)
	assert.Contains(t, vs[1].Detail, "the end of term 4 (w4), its lease lost (certain by +1.009000s)")
}

func TestElectionCheckReportsAStaleLastView(t *testing.T) {
	vs := tamperViews(0, func(w *watch) { w.Views = w.Views[:8] })
	assert.Equal(t, map[violationKind]int{viewLag: 1, viewFinal: 1}, kinds(vs), "%v", vs)
	var final violation
	for _, v := range vs {
		if v.Kind == viewFinal {
			final = v
		}
	}
	assert.Contains(t, final.Detail, `observer o1's last view, received +0.008600s (told the candidates had ended at +0.010000s, stopped at +0.070000s), `+
		`was term 4 (value "w4#1"), where the election ended with no leader (its last leadership: the end of term 4 (w4), resigned)`)

	vs = tamperViews(1, func(w *watch) { w.Views = nil })
	assert.Contains(t, kinds(vs), viewFinal)
	assert.Contains(t, vs[len(vs)-1].Detail, "observer o2 received no view at all")

	// An observer cut short (the run was) says nothing of the end.
	vs = tamperViews(0, func(w *watch) { w.Views, w.Cut, w.Settled = w.Views[:8], true, false })
	assert.NotContains(t, kinds(vs), viewFinal)

	// Nor does one whose Observe failed: that is an error.
	vs = tamperViews(1, func(w *watch) { w.Views, w.Err = nil, "Observe: fairlock: client closed" })
	assert.Equal(t, 1, kinds(vs)[errored], "%v", vs)
	assert.NotContains(t, kinds(vs), viewFinal)
}

// An election's line is a Mutex's: two leaders at once, a term that goes
// back and a candidate passed are the Mutex's verdicts.
func TestElectionCheckJudgesTheCandidatesAsAMutexsLine(t *testing.T) {
	as, ws := electionHistory()
	as[1].Granted = at(3.5) // w2 elected while w1 led
	vs, _ := checkElection(as, ws)
	assert.Contains(t, kinds(vs), overlapped)

	as, ws = electionHistory()
	as[3].Token = 1 // term 1 again, after w2's 2
	for i := range ws {
		for j := range ws[i].Views {
			if ws[i].Views[j].Term == 4 {
				ws[i].Views[j].Term = 1
			}
		}
	}
	vs, _ = checkElection(as, ws)
	assert.Contains(t, kinds(vs), tokenOrder)

	as, ws = electionHistory()
	as[1].Joins[0] = join{Sent: at(8.1), Answered: at(8.2)} // w2's join answered before w4's was sent
	as[1].Start, as[1].Granted, as[1].Token = at(8.1), at(9.2), 5
	as[1].UnlockStart, as[1].UnlockEnd = at(9.3), at(9.4)
	as[3].Joins[0] = join{Sent: at(8.3), Answered: at(8.4)}
	vs = check(as, 0, oneTicket)
	assert.Equal(t, map[violationKind]int{outOfOrder: 1}, kinds(vs), "%v", vs)
}

// A lag or a stale last view is excused by a fault that held Redis up
// while the observer was to see the change (or up to recoverWithin
// before); a view going back to an older value by one that may have
// undone the newer, and a candidate's value under another term by one
// that may have undone its election; a term lower than one seen, or a
// value nobody had, never.
func TestExcuseOfAnObserversVerdicts(t *testing.T) {
	earlier := func(injected, back float64) fault { // a pause before the run began
		f := flt(chaosPause, injected, 0, 0)
		f.Back, f.Ready = at(back), at(back)
		return f
	}
	lagged := tamperViews(1, func(w *watch) { w.Views[3].At, w.Views[4].At = at(60), at(61) })
	require.Len(t, lagged, 1)
	for _, tc := range []struct {
		f       fault
		excused bool
	}{
		{flt(chaosPause, 20, 0, 30), true},
		{earlier(-2030, -1985), true}, // ended 1993.5ms before: within recoverWithin
		{earlier(-2100, -2000), false},
		{flt(chaosPause, 59, 0, 80), false}, // after the bound
		{flt(chaosRestartAOF, 5, 0, 8), true},
	} {
		vs := slices.Clone(lagged)
		excuse(vs, []fault{tc.f}, t0)
		assert.Equal(t, tc.excused, vs[0].Excused != "", "%+v", tc.f)
	}
	vs := slices.Clone(lagged)
	excuse(vs, []fault{flt(chaosPause, 20, 0, 30)}, t0)
	assert.Contains(t, vs[0].Excused, "held Redis up while the observer was to see the change")

	stale := tamperViews(0, func(w *watch) { w.Views = w.Views[:8] })
	excuse(stale, []fault{flt(chaosPause, 30, 0, 40)}, t0)
	assert.Equal(t, len(stale), len(stale)-counted(stale), "%v", stale)

	// A candidate's value under another term: its election undone by a
	// failover, its entry elected again; never a value nobody had.
	again := tamperViews(0, func(w *watch) { w.Views[7].Value, w.Views[7].Client = "w2#1", "c-w2" })
	nobody := tamperViews(0, func(w *watch) { w.Views[7].Value = "nobody" })
	for _, tc := range []struct {
		f       fault
		excused bool
	}{
		{flt(chaosFailover, 3, 0, 4), true},
		{flt(chaosRestartEmpty, 8, 8.1, 9), true},
		{flt(chaosFailover, 1, 0, 1.9), false}, // before w2 campaigned
		{flt(chaosPause, 3, 0, 4), false},
	} {
		vs := slices.Clone(again)
		excuse(vs, []fault{tc.f}, t0)
		assert.Equal(t, tc.excused, vs[0].Excused != "", "%+v", tc.f)
		vs = slices.Clone(nobody)
		excuse(vs, []fault{tc.f}, t0)
		assert.Empty(t, vs[0].Excused, "a value nobody had: %+v", tc.f)
	}

	older := tamperViews(0, func(w *watch) { insertView(w, vw(1, "w1#1", "w1", 2.45)) })
	lower := tamperViews(0, func(w *watch) { insertView(w, vw(1, "w1#1.1", "w1", 5.3)) })
	for _, tc := range []struct {
		f       fault
		excused bool
	}{
		{flt(chaosFailover, 1, 0, 2.42), true},
		{flt(chaosKillPrimary, 2.41, 2.42, 3), true},
		{flt(chaosFailover, 2.5, 0, 3), false}, // after the older view was read
		{flt(chaosPause, 1, 0, 3), false},      // a pause undoes nothing
	} {
		vs := slices.Clone(older)
		excuse(vs, []fault{tc.f}, t0)
		assert.Equal(t, tc.excused, vs[0].Excused != "", "%+v", tc.f)
		vs = slices.Clone(lower)
		excuse(vs, []fault{tc.f, flt(chaosFailover, 0, 0, 100)}, t0)
		assert.Empty(t, vs[0].Excused, "a lower term: %+v", tc.f)
	}
}

// replyError is a Redis error reply.
type replyError string

func (e replyError) Error() string { return string(e) }
func (replyError) RedisError()     {}

// Leader and Proclaim send their call once: one that could not reach
// Redis, or that a failover or a moved slot refused, is counted, not
// judged.
func TestUnreachedTellsCallsAFaultExplains(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{&net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}, true},
		{fmt.Errorf("fairlock: %w", io.EOF), true},
		{errors.Join(context.DeadlineExceeded, fairlock.ErrUnavailable), true},
		{fmt.Errorf("%w: 1 of 3 masters answered, 2 needed", fairlock.ErrNoQuorum), true},
		{replyError("MOVED 2551 127.0.0.1:7001"), true},
		{fmt.Errorf("read: %w", replyError("CLUSTERDOWN The cluster is down")), true},
		{replyError("LOADING Redis is loading the dataset in memory"), true},
		{replyError("NOSCRIPT No matching script"), false},
		{fairlock.ErrNotHeld, false},
		{context.Canceled, false},
	} {
		assert.Equal(t, tc.want, unreached(tc.err), "%v", tc.err)
	}
}

// checkQuorumElection checks an election history of a quorum, as a run
// with -masters does.
func checkQuorumElection(as []attempt, ws []watch) ([]violation, *electionCheck) {
	ec := &electionCheck{Bound: testLag, Lease: time.Second, Quorum: true}
	vs := append(checkRun(as, 0, oneTicket, &quorumCheck{}), ec.check(as, ws)...)
	return vs, ec
}

// tamperQuorumViews checks the clean history, as a quorum's, with
// observer i's views changed by f.
func tamperQuorumViews(i int, f func(w *watch)) ([]violation, *electionCheck) {
	as, ws := electionHistory()
	f(&ws[i])
	return checkQuorumElection(as, ws)
}

// On a quorum a read shows what a majority of the masters holds: a
// candidate's election under the term the majority holds before its
// Campaign commits one, a value read while its Proclaim is on some
// masters only and then not, a candidate held by a majority and lost
// again (to a yield) before its Campaign counts it, and no leader while
// a hand-over moves from master to master. None of these is a verdict
// there; on one deployment each is.
func TestQuorumElectionCheckAcceptsWhatAMajorityMayShowMeanwhile(t *testing.T) {
	as, ws := electionHistory()
	vs, ec := checkQuorumElection(as, ws)
	assert.Empty(t, vs)
	assert.Zero(t, ec.provisional)

	for _, tc := range []struct {
		name        string
		views       []view
		single      violationKind
		provisional int
	}{
		{"a provisional term before the Campaign returned", []view{vw(3, "w4#1", "w4", 8.45)}, viewFalse, 1},
		{"a value read while its Proclaim was under way, then not", []view{vw(1, "w1#1", "w1", 2.45)}, viewBack, 0},
		{"an election held, lost and held again before its Campaign returned", []view{vw(4, "w4#1", "w4", 8.2), vw(0, "", "", 8.3)}, viewBack, 0},
		{"no leader between two leaders", []view{vw(0, "", "", 5.1)}, "", 0},
	} {
		change := func(w *watch) {
			for _, v := range tc.views {
				insertView(w, v)
			}
		}
		vs, ec := tamperQuorumViews(0, change)
		assert.Empty(t, vs, tc.name)
		assert.Equal(t, tc.provisional, ec.provisional, tc.name)
		if tc.single != "" {
			assert.Contains(t, kinds(tamperViews(0, change)), tc.single, "%s, on one deployment", tc.name)
		}
	}

	// A read begun before w2's Campaign committed its term may find a
	// value it proclaimed since on a master that answered later.
	as, ws = electionHistory()
	as[1] = proclaiming(as[1], "w2#1.1", 5.05)
	insertView(&ws[0], vw(1, "w2#1.1", "w2", 5.1))
	vs, ec = checkQuorumElection(as, ws)
	assert.Empty(t, vs)
	assert.Equal(t, 1, ec.provisional)

	// A candidate whose Campaign failed committed no term: any term of
	// its grant may be read.
	as, ws = electionHistory()
	as[3].Token = 6
	for i := range ws {
		for j := range ws[i].Views {
			if ws[i].Views[j].Term == 4 {
				ws[i].Views[j].Term = 6
			}
		}
	}
	insertView(&ws[1], vw(5, "w3#1", "w3", 7.3))
	vs, ec = checkQuorumElection(as, ws)
	assert.Empty(t, vs)
	assert.Equal(t, 1, ec.provisional)
}

// What the record proves is judged on a quorum too: a read made after a
// state's call began (an earlier view showed that state) must find every
// change certainly made before, and a view of a proclaimed value, or of
// an election read after its Campaign returned, must carry the committed
// term.
func TestQuorumElectionCheckReportsWhatTheRecordProves(t *testing.T) {
	as, ws := electionHistory()
	as[0] = proclaiming(as[0], "w1#1.2", 3) // w1#1.1 returned at 2.5, w1#1.2 called at 3
	insertView(&ws[0], vw(1, "w1#1.2", "w1", 3.2))
	insertView(&ws[0], vw(1, "w1#1", "w1", 3.3))
	vs, _ := checkQuorumElection(as, ws)
	require.Equal(t, map[violationKind]int{viewBack: 1}, kinds(vs), "%v", vs)
	assert.Contains(t, vs[0].Detail, `observer o1 received term 1 with value "w1#1" at +0.003300s, a state older than the value "w1#1.1" proclaimed by w1 under term 1, certain since +0.002500s; `+
		`its read came after its view of the value "w1#1.2" proclaimed by w1 under term 1 (received +0.003200s), which began at +0.003000s`)

	// No leader, read after a view of w1's proclaim, which began once
	// w1's election was certain.
	vs, _ = tamperQuorumViews(0, func(w *watch) { insertView(w, vw(0, "", "", 2.8)) })
	require.Equal(t, map[violationKind]int{viewBack: 1}, kinds(vs), "%v", vs)
	assert.Contains(t, vs[0].Detail, `observer o1 received no leader at +0.002800s, a state older than the election of w1, term 1 (value "w1#1"), certain since +0.001000s`)

	// A lower term than one seen is never sent.
	vs, _ = tamperQuorumViews(0, func(w *watch) { insertView(w, vw(1, "w1#1.1", "w1", 5.3)) })
	require.Equal(t, map[violationKind]int{viewBack: 1}, kinds(vs), "%v", vs)
	assert.Contains(t, vs[0].Detail, "observer o1 received term 1 at +0.005300s, after term 2 at +0.005200s")

	// w4 proclaims at 8.6, after its Campaign committed term 4 at 8.5: a
	// view of the value under term 3 may come of a read begun before the
	// commit (the value from a master that answered later), but the read
	// after it began after 8.6, and must find term 4.
	as, ws = electionHistory()
	as[3] = proclaiming(as[3], "w4#1.1", 8.6)
	ws[0].Views = slices.DeleteFunc(ws[0].Views, func(v view) bool { return v.Term == 4 })
	insertView(&ws[0], vw(3, "w4#1.1", "w4", 8.7))
	insertView(&ws[0], vw(3, "w4#1", "w4", 8.8))
	vs, ec := checkQuorumElection(as, ws)
	require.Equal(t, map[violationKind]int{viewFalse: 1}, kinds(vs), "%v", vs)
	assert.Contains(t, vs[0].Detail, `observer o1 received value "w4#1" with term 3 at +0.008800s, where it is the value of term 4 (w4)`)
	assert.Equal(t, 1, ec.provisional)

	// A term above the committed one is never read.
	vs, _ = tamperQuorumViews(0, func(w *watch) { insertView(w, vw(5, "w4#1", "w4", 8.45)) })
	assert.Contains(t, kinds(vs), viewFalse)
}

// A view older than a change certainly made is excused on a quorum by a
// fault that may have undone writes between that change and the view.
func TestExcuseOfAQuorumObserversStepBack(t *testing.T) {
	back, _ := tamperQuorumViews(0, func(w *watch) { insertView(w, vw(0, "", "", 2.8)) })
	require.Len(t, back, 1)
	for _, tc := range []struct {
		f       fault
		excused bool
	}{
		{flt(chaosRestartEmpty, 1.5, 1.6, 2), true},
		{flt(chaosRestartEmpty, 0.5, 0.9, 2), false}, // over before w1's election was certain
		{flt(chaosPause, 1.5, 0, 2), false},
	} {
		vs := slices.Clone(back)
		excuse(vs, []fault{tc.f}, t0)
		assert.Equal(t, tc.excused, vs[0].Excused != "", "%+v", tc.f)
	}
}

// A quorum's Campaign that was elected but could not commit its term (a
// master down) fails with the lease lost: a lease-lost verdict, which a
// fault that held Redis up while the call went on explains.
func TestACampaignThatLostItsLeaseBeforeItsTerm(t *testing.T) {
	as, ws := electionHistory()
	w3 := &as[2]
	w3.Outcome, w3.LeaseLost, w3.Lost, w3.Deadline = outFailed, true, w3.Ended, time.Time{}
	vs, ec := checkQuorumElection(as, ws)
	require.Equal(t, map[violationKind]int{leaseLost: 1}, kinds(vs), "%v", vs)
	assert.Equal(t, "w3 lost the lease of the leadership it was elected to before its Campaign could commit the term (called +0.006200s, failed +0.007300s)", vs[0].Detail)
	assert.Equal(t, 1, ec.givenBack, "its grant, seen, was given back")
	for _, tc := range []struct {
		f       fault
		excused bool
	}{
		{flt(chaosRestartEmpty, 6.5, 6.6, 9), true},
		{flt(chaosRestartEmpty, 7.5, 7.6, 9), false}, // after the call returned
		{flt(chaosRestartEmpty, 1, 1.1, 2), false},
	} {
		v := slices.Clone(vs)
		excuse(v, []fault{tc.f}, t0)
		assert.Equal(t, tc.excused, v[0].Excused != "", "%+v", tc.f)
	}
}
