package main

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The histories of this file are of MultiLocks on a Cluster, which take
// their names one after another (oneByOne); ticketcheck_test.go has
// those of one server, where one ticket takes them all.

// took is a name a MultiLock attempt was granted, at granted (ms), with
// token.
type took struct {
	name    string
	granted float64
	token   int64
}

// multiHold is a MultiLock attempt that took each name of ts in turn, the
// call of each beginning when the one before was granted, returned from
// Lock 0.1ms after the last grant, and unlocked at unlock.
func multiHold(worker string, start, unlock float64, ts ...took) attempt {
	a := attempt{Worker: worker, Kind: kindLock, Outcome: outGranted, Start: at(start), Tokens: map[string]int64{}}
	prev := start
	for _, t := range ts {
		a.Names = append(a.Names, t.name)
		a.Parts = append(a.Parts, part{Name: t.name, Call: worker + "-" + t.name, Start: at(prev),
			Granted: at(t.granted), Token: t.token, Released: at(unlock + 0.2)})
		a.Tokens[t.name] = t.token
		prev = t.granted
	}
	a.Lock = strings.Join(a.Names, "+")
	a.Granted, a.UnlockStart, a.UnlockEnd = at(prev+0.1), at(unlock), at(unlock+0.5)
	return a
}

// multiGaveUp is a MultiLock attempt that took the names of ts, then
// joined the line of name at sent and gave up at its deadline, giving
// back the names it took.
func multiGaveUp(worker string, start, deadline float64, name string, sent float64, ts ...took) attempt {
	a := multiHold(worker, start, 0, ts...)
	prev := start
	if n := len(ts); n > 0 {
		prev = ts[n-1].granted
	}
	a.Names = append(a.Names, name)
	a.Lock = strings.Join(a.Names, "+")
	for i := range a.Parts {
		a.Parts[i].Released = at(deadline + 0.1)
	}
	a.Parts = append(a.Parts, part{Name: name, Call: worker + "-" + name, Start: at(prev),
		Joins: []join{{Sent: at(sent), Answered: at(sent + 0.5)}}, Ended: at(deadline + 0.05)})
	a.Outcome, a.Tokens, a.Deadline, a.Ended = outGaveUp, nil, at(deadline), at(deadline+0.2)
	a.Granted, a.UnlockStart, a.UnlockEnd = time.Time{}, time.Time{}, time.Time{}
	return a
}

// on returns attempt a on lock name.
func on(name string, a attempt) attempt {
	a.Lock = name
	return a
}

// cleanMultiHistory is a run of MultiLocks over a, b and c on a Cluster,
// with a Mutex on c, a MultiLock that gave up and one whose TryLock
// failed.
func cleanMultiHistory() []attempt {
	waited := multiHold("w3", 2, 9, took{"b", 6, 2}, took{"c", 6.5, 2})
	waited.Parts[0].Joins = []join{{Sent: at(2.2), Answered: at(2.7)}} // behind w1 on b
	tried := attempt{Worker: "w5", Lock: "a+b", Kind: kindTry, Names: []string{"a", "b"}, Outcome: outTryFailed,
		Start: at(6.2), Ended: at(6.4), Parts: []part{{Name: "a", Call: "w5-a", Start: at(6.2), Ended: at(6.3)}}}
	return []attempt{
		multiHold("w1", 0, 5, took{"a", 0.5, 1}, took{"b", 1, 1}),
		on("c", hold("w2", 0, 1, 3, 1)),
		waited,
		multiGaveUp("w4", 5.5, 8, "c", 7, took{"a", 5.8, 2}), // held a, waited for c behind w3
		tried, // w4 held a
		multiHold("w6", 9.5, 12, took{"a", 10, 3}, took{"b", 10.5, 3}),
	}
}

func TestCheckerAcceptsCleanHistoryOfNamesTakenOneByOne(t *testing.T) {
	assert.Empty(t, check(cleanMultiHistory(), 0, oneByOne))
	assert.Empty(t, check(cleanMultiHistory(), 3*time.Millisecond, oneByOne))
}

func TestCheckerReportsOverlapOnANameOfTwoMultiLocks(t *testing.T) {
	h := []attempt{
		multiHold("w1", 0, 5, took{"a", 0.5, 1}, took{"b", 1, 1}),
		multiHold("w2", 0, 8, took{"b", 4, 2}, took{"c", 4.5, 1}), // b granted at 4, w1 unlocked it at 5
	}
	vs := check(h, 0, oneByOne)
	require.Equal(t, map[violationKind]int{overlapped: 1}, kinds(vs), "%v", vs)
	assert.Equal(t, "b", vs[0].Lock)
	assert.Contains(t, vs[0].Detail, "w2 (MultiLock b+c) was granted")
}

func TestCheckerReportsOverlapWithANameGivenBackLater(t *testing.T) {
	h := []attempt{
		// Held a from 1 while it waited for b, until its deadline at 10.
		multiGaveUp("w1", 0, 10, "b", 2, took{"a", 1, 1}),
		on("a", hold("w2", 3, 5, 6, 2)), // a granted at 5
	}
	vs := check(h, 0, oneByOne)
	require.Equal(t, map[violationKind]int{overlapped: 1}, kinds(vs), "%v", vs)
	assert.Equal(t, "a", vs[0].Lock)

	// EventGranted after the wait for b had ended: a may have been given back.
	h[1] = on("a", hold("w2", 3, 10.1, 11, 2))
	assert.Empty(t, check(h, 0, oneByOne))
}

func TestCheckerReportsPartialHolds(t *testing.T) {
	tests := []struct {
		name   string
		tamper func(h []attempt)
		want   string
	}{
		{"granted without a name", func(h []attempt) { h[0].Parts = h[0].Parts[:1] }, "without a grant of b"},
		{"no token of a name", func(h []attempt) { delete(h[0].Tokens, "b") }, "carrying no token of b"},
		{"a hold that ended early", func(h []attempt) { h[0].Parts[0].Released = at(3) }, "no longer held a"},
		{"a name kept after giving up", func(h []attempt) { h[3].Parts[0].Released = time.Time{} }, "its hold of a (token 2"},
		{"a name given back after Lock returned", func(h []attempt) { h[3].Parts[0].Released = at(9) }, "had not ended by then"},
		{"a token after failing", func(h []attempt) { h[3].Tokens = map[string]int64{"a": 2} }, "yet has tokens a 2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := cleanMultiHistory()
			tt.tamper(h)
			vs := check(h, 0, oneByOne)
			require.Equal(t, map[violationKind]int{partial: 1}, kinds(vs), "%v", vs)
			assert.Contains(t, vs[0].Detail, tt.want)
		})
	}
}

func TestCheckerReportsTokenGoingBackOnAName(t *testing.T) {
	h := cleanMultiHistory()
	h[3].Parts[0].Token = 5 // the name w4 gave back; w6's grant after it has 3
	vs := check(h, 0, oneByOne)
	require.Equal(t, map[violationKind]int{tokenOrder: 1}, kinds(vs), "%v", vs)
	assert.Equal(t, "a", vs[0].Lock)
	assert.Contains(t, vs[0].Detail, "went back from 5")

	h = cleanMultiHistory()
	h[5].Parts[0].Token, h[5].Tokens["a"] = 1, 1 // w1's token of a
	vs = check(h, 0, oneByOne)
	require.Equal(t, map[violationKind]int{tokenOrder: 1}, kinds(vs), "%v", vs)
	assert.Contains(t, vs[0].Detail, "token 1 granted twice")
}

func TestCheckerReportsFIFOBrokenOnTheLineOfAName(t *testing.T) {
	first := multiHold("w2", 1, 9, took{"a", 1.5, 1}, took{"b", 7, 3})
	first.Parts[1].Joins = []join{{Sent: at(2), Answered: at(2.5)}} // joined b while holding a
	later := multiHold("w3", 3, 7, took{"b", 6, 2}, took{"c", 6.5, 1})
	later.Parts[0].Joins = []join{{Sent: at(3), Answered: at(3.5)}} // joined b after w2, granted first
	h := []attempt{on("b", hold("w1", 0, 0.5, 5, 1)), first, later}
	vs := check(h, 0, oneByOne)
	require.Equal(t, map[violationKind]int{outOfOrder: 1}, kinds(vs), "%v", vs)
	assert.Equal(t, "b", vs[0].Lock)
	assert.Contains(t, vs[0].Detail, "w2 (MultiLock a+b) joined the queue before w3 (MultiLock b+c)")
}

func TestCheckerReportsNamesTakenInTwoOrders(t *testing.T) {
	h := []attempt{
		multiHold("w1", 0, 2, took{"a", 0.5, 1}, took{"b", 1, 1}),
		multiHold("w2", 3, 5, took{"b", 3.5, 2}, took{"a", 4, 2}),
	}
	vs := check(h, 0, oneByOne)
	require.Equal(t, map[violationKind]int{misordered: 1}, kinds(vs), "%v", vs)
	assert.Contains(t, vs[0].Detail, "takes b before a, w1's of a+b the other way round")

	// A call that is not to the name next in the MultiLock's order.
	h = h[:1]
	h[0].Parts[0].Name, h[0].Parts[1].Name = "b", "a"
	h[0].Tokens = map[string]int64{"a": 1, "b": 1}
	vs = check(h, 0, oneByOne)
	require.Equal(t, map[violationKind]int{misordered: 1}, kinds(vs), "%v", vs)
	assert.Contains(t, vs[0].Detail, "took b as its name number 1")
}

func TestCheckerSaysWhatAMultiLockLeftBehindHeld(t *testing.T) {
	a := multiGaveUp("w1", 0, 10, "b", 2, took{"a", 1, 1})
	a.Outcome, a.Deadline, a.Ended = outPending, time.Time{}, time.Time{}
	a.Parts[0].Released, a.Parts[1].Ended = time.Time{}, time.Time{}
	vs := check([]attempt{a}, 0, oneByOne)
	require.Equal(t, map[violationKind]int{leftBehind: 1}, kinds(vs), "%v", vs)
	assert.Contains(t, vs[0].Detail, "still waiting at the end (called +0.000000s); holding a, waiting for b")
}
