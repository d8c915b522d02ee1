package main

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// ticketHold is a MultiLock attempt on one server that took names
// ("a,b", in key order) with one ticket: called at start, joined every
// line between sent and sent+0.5ms (sent < 0: granted without joining),
// granted every name at granted, returned from Lock 0.1ms later, unlocked
// at unlock. Its context carries tokens, one per name; the Observer gave
// the first name's.
func ticketHold(worker string, start, sent, granted, unlock float64, names string, tokens ...int64) attempt {
	a := attempt{Worker: worker, Kind: kindLock, Outcome: outGranted, Names: strings.Split(names, ","), Tokens: map[string]int64{},
		Start: at(start), Granted: at(granted + 0.1), UnlockStart: at(unlock), UnlockEnd: at(unlock + 0.5)}
	a.Lock = strings.Join(a.Names, "+")
	var joins []join
	if sent >= 0 {
		joins = []join{{Sent: at(sent), Answered: at(sent + 0.5)}}
	}
	for i, name := range a.Names {
		p := part{Name: name, Call: worker + "-ticket", Ticket: true, Start: at(start), Joins: joins,
			Granted: at(granted), Released: at(unlock + 0.2)}
		if i == 0 {
			p.Token = tokens[0]
		}
		a.Parts = append(a.Parts, p)
		a.Tokens[name] = tokens[i]
	}
	return a
}

// ticketGaveUp is a ticket of names that joined every line at sent and
// gave up at its deadline, holding none of them.
func ticketGaveUp(worker string, start, sent, deadline float64, names string) attempt {
	a := attempt{Worker: worker, Kind: kindLock, Outcome: outGaveUp, Names: strings.Split(names, ","),
		Start: at(start), Deadline: at(deadline), Ended: at(deadline + 0.2)}
	a.Lock = strings.Join(a.Names, "+")
	for _, name := range a.Names {
		a.Parts = append(a.Parts, part{Name: name, Call: worker + "-ticket", Ticket: true, Start: at(start),
			Joins: []join{{Sent: at(sent), Answered: at(sent + 0.5)}}, Ended: at(deadline + 0.05)})
	}
	return a
}

// cleanTicketHistory is a run of tickets and Mutexes over a, b and c on
// one server: fresh and queued tickets, Mutex waiters behind tickets, a
// ticket that gave up and a TryLock of a ticket that failed.
func cleanTicketHistory() []attempt {
	tried := ticketGaveUp("w6", 6.3, 0, 0, "a,b") // b held by w3
	tried.Kind, tried.Outcome, tried.Deadline, tried.Ended = kindTry, outTryFailed, time.Time{}, at(6.4)
	for i := range tried.Parts {
		tried.Parts[i].Joins, tried.Parts[i].Ended = nil, at(6.35)
	}
	return []attempt{
		ticketHold("w1", 0, -1, 0.5, 5, "a,b", 1, 1),
		on("c", hold("w2", 0, 1, 3, 1)),
		ticketHold("w3", 2, 2.2, 6, 9, "b,c", 2, 2),           // behind w1 on b, behind w2's hold on c
		on("a", queued("w4", 3, 3, 5.5, 7, 2)),                // behind w1 on a
		ticketGaveUp("w5", 6.2, 6.2, 8, "a,c"),                // a free from 7 but kept for it, c held by w3 past its deadline
		tried,                                                 // b held by w3
		ticketHold("w7", 8.5, 8.5, 9.6, 12, "a,b,c", 4, 3, 3), // joined once w5 had given up; a's token 4 (tokens rise, not by one)
		on("b", queued("w8", 9.2, 9.2, 12.5, 13, 4)),          // behind w7 on b
	}
}

func TestCheckerAcceptsCleanTicketHistory(t *testing.T) {
	assert.Empty(t, check(cleanTicketHistory(), 0, oneTicket))
	assert.Empty(t, check(cleanTicketHistory(), 3*time.Millisecond, oneTicket))
}

func TestCheckerReportsATicketThatDidNotHoldAllOrNone(t *testing.T) {
	tests := []struct {
		name   string
		tamper func(h []attempt)
		want   string
	}{
		{"granted only some names", func(h []attempt) { h[2].Parts[1].Granted = time.Time{} }, "without a grant of c"},
		{"no token of a name", func(h []attempt) { delete(h[6].Tokens, "b") }, "carrying no token of b"},
		{"another token than the grant's", func(h []attempt) { h[2].Parts[0].Token = 7 }, "token 2 of b where the grant's was 7"},
		{"names granted at different times", func(h []attempt) { h[6].Parts[2].Granted = at(9.8) }, "not granted every name at once"},
		{"a hold that ended early", func(h []attempt) { h[0].Parts[1].Released = at(3) }, "no longer held b"},
		{"a hold that ended after the failure", func(h []attempt) { h[4].Parts[0].Released = at(8.5) }, "its hold of a ended only at"},
		{"a grant kept after the failure", func(h []attempt) { h[4].Parts[0].Granted, h[4].Parts[0].Token = at(7.5), 3 }, "its hold of a (token 3"},
		{"a token after failing", func(h []attempt) { h[4].Tokens = map[string]int64{"a": 2} }, "yet has tokens a 2"},
		{"names taken in two calls", func(h []attempt) { h[6].Parts[2].Call = "w7-c" }, "as a ticket of a, b, then a ticket of c"},
		{"a name taken alone", func(h []attempt) { h[2].Parts[1].Ticket, h[2].Parts[1].Call = false, "w3-c" }, "as a ticket of b, then a call of c"},
		{"a ticket short of a name", func(h []attempt) { h[4].Parts = h[4].Parts[:1] }, "as a ticket of a, where"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := cleanTicketHistory()
			tt.tamper(h)
			vs := check(h, 0, oneTicket)
			require.Equal(t, map[violationKind]int{partial: 1}, kinds(vs), "%v", vs)
			assert.Contains(t, vs[0].Detail, tt.want)
		})
	}
}

func TestCheckerReportsNamesTakenOneByOneOnOneServer(t *testing.T) {
	h := []attempt{multiHold("w1", 0, 5, took{"a", 0.5, 1}, took{"b", 1, 1})}
	vs := check(h, 0, oneTicket)
	require.Equal(t, map[violationKind]int{partial: 1}, kinds(vs), "%v", vs)
	assert.Contains(t, vs[0].Detail, "took its names as a call of a, then a call of b, where one server takes them all with one ticket")
	assert.Empty(t, check(h, 0, oneByOne))
}

func TestCheckerReportsATicketOnACluster(t *testing.T) {
	h := []attempt{ticketHold("w1", 0, -1, 0.5, 5, "a,b", 1, 1)}
	vs := check(h, 0, oneByOne)
	require.Equal(t, map[violationKind]int{misordered: 1}, kinds(vs), "%v", vs)
	assert.Contains(t, vs[0].Detail, "took its names as a ticket of a, b, where a Cluster takes them one after another")
}

func TestCheckerDropsTheOrderOfNamesForTickets(t *testing.T) {
	// Two tickets that would name a and b in opposite orders if they
	// were taken one by one: a ticket takes none before another.
	h := []attempt{
		ticketHold("w1", 0, -1, 0.5, 2, "a,b", 1, 1),
		ticketHold("w2", 3, -1, 3.5, 5, "b,a", 2, 2),
	}
	assert.Empty(t, check(h, 0, oneTicket))
	assert.Contains(t, kinds(check(h, 0, oneByOne)), misordered)
}

func TestCheckerReportsATicketPassedOnAName(t *testing.T) {
	// w2's ticket of a and b joined at 2 (answered 2.5), behind w1's hold
	// of b; w3's Mutex on b joined at 3, after it, and was granted b
	// first.
	h := []attempt{
		on("b", hold("w1", 0, 0.5, 5, 1)),
		ticketHold("w2", 2, 2, 8, 10, "a,b", 1, 3),
		on("b", queued("w3", 3, 3, 6, 7, 2)),
	}
	vs := check(h, 0, oneTicket)
	require.Equal(t, map[violationKind]int{outOfOrder: 1}, kinds(vs), "%v", vs)
	assert.Equal(t, "b", vs[0].Lock)
	assert.Contains(t, vs[0].Detail, "w2 (MultiLock a+b) joined the queue before w3 (join answered +0.002500s")
	assert.Contains(t, vs[0].Detail, "yet it was granted later (token 3 > 2)")

	// The joins' brackets overlap: either may have joined first.
	h[2] = on("b", queued("w3", 2.3, 2.3, 6, 7, 2))
	assert.Empty(t, check(h, 0, oneTicket))

	// A ticket that passed a Mutex waiter of one of its names.
	h = []attempt{
		on("a", hold("w1", 0, 0.5, 5, 1)),
		on("a", queued("w2", 1, 1, 8, 9, 3)),
		ticketHold("w3", 2, 2, 6, 7, "a,b", 2, 1),
	}
	vs = check(h, 0, oneTicket)
	require.Equal(t, map[violationKind]int{outOfOrder: 1}, kinds(vs), "%v", vs)
	assert.Contains(t, vs[0].Detail, "w2 joined the queue before w3 (MultiLock a+b)")

	// A ticket granted without joining while a waiter of one of its names
	// was in line: barging, by Lock or by TryLock.
	h = []attempt{
		on("b", hold("w1", 0, 0.5, 5, 1)),
		on("b", queued("w2", 1, 1, 8, 9, 3)),
		ticketHold("w3", 5.5, -1, 6, 7, "a,b", 1, 2),
	}
	vs = check(h, 0, oneTicket)
	require.Equal(t, map[violationKind]int{barged: 1}, kinds(vs), "%v", vs)
	assert.Contains(t, vs[0].Detail, "Lock (without queueing) by w3 (MultiLock a+b)")
	h[2].Kind = kindTry
	assert.Equal(t, map[violationKind]int{barged: 1}, kinds(check(h, 0, oneTicket)))
}

func TestCheckerReportsOverlapAndTokensOfATicket(t *testing.T) {
	h := []attempt{
		on("b", hold("w1", 0, 0.5, 5, 1)),
		ticketHold("w2", 1, 1, 4, 8, "a,b", 1, 2), // b granted at 4, w1 unlocked it at 5
	}
	vs := check(h, 0, oneTicket)
	require.Equal(t, map[violationKind]int{overlapped: 1}, kinds(vs), "%v", vs)
	assert.Equal(t, "b", vs[0].Lock)
	assert.Contains(t, vs[0].Detail, "w2 (MultiLock a+b) was granted at +0.004000s (token 2) while w1 held it")

	// Two tickets on a and b: the second's token of b, read from its
	// context, goes back.
	h = []attempt{
		ticketHold("w1", 0, -1, 0.5, 2, "a,b", 1, 5),
		ticketHold("w2", 1, 1, 3, 4, "a,b", 2, 4),
	}
	vs = check(h, 0, oneTicket)
	require.Equal(t, map[violationKind]int{tokenOrder: 1}, kinds(vs), "%v", vs)
	assert.Equal(t, "b", vs[0].Lock)
	assert.Contains(t, vs[0].Detail, "went back from 5")
}

func TestCheckerSaysATicketLeftBehindHeldNothing(t *testing.T) {
	a := ticketGaveUp("w1", 0, 1, 10, "a,b")
	a.Outcome, a.Deadline, a.Ended = outPending, time.Time{}, time.Time{}
	for i := range a.Parts {
		a.Parts[i].Ended = time.Time{}
	}
	vs := check([]attempt{a}, 0, oneTicket)
	require.Equal(t, map[violationKind]int{leftBehind: 1}, kinds(vs), "%v", vs)
	assert.Contains(t, vs[0].Detail, "holding none of its names, waiting for them with one ticket")
}
