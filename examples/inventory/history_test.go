package main

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock"
)

// epoch is the time the hand-made histories count from.
var epoch = time.Now()

func at(ms float64) time.Time { return epoch.Add(time.Duration(ms * float64(time.Millisecond))) }

// waited is an order that joined the lines between sent and answered (ms),
// kept its place for a waiter TTL from sent, and was heard granted at
// granted, with tokens, one per item.
func waited(id int, items []int, sent, answered, granted float64, tokens ...int64) *order {
	return &order{id: id, items: items, qty: make([]int64, len(items)), start: at(sent - 1),
		joins: 1, joined: bracket{at(sent), at(answered)}, kept: at(sent).Add(waiterTTL),
		granted: at(granted), tokens: tokens}
}

// atOnce is an order granted by the call that joined, started at start and
// heard granted at granted (ms).
func atOnce(id int, items []int, start, granted float64, tokens ...int64) *order {
	return &order{id: id, items: items, qty: make([]int64, len(items)), start: at(start), granted: at(granted), tokens: tokens}
}

func TestCheckerFlagsALaterOrderServedFirstOnASharedItem(t *testing.T) {
	first := waited(1, []int{2, 5}, 10, 11, 40, 7, 9) // item 5 at token 9
	then := waited(2, []int{5, 6}, 12, 13, 30, 8, 3)  // joined after, served before it on item 5
	v := checkArrivals([]*order{first, then})
	require.Len(t, v.violations, 1)
	x := v.violations[0]
	assert.Same(t, first, x.first)
	assert.Same(t, then, x.then)
	assert.Equal(t, 5, x.item)
	assert.Equal(t, [2]int64{9, 8}, x.tokens)
	assert.Equal(t, 1, v.pairs)
	assert.Contains(t, x.describe(epoch), "order 1 (arrived 10.000-11.000 ms) was served after order 2 (arrived 12.000-13.000 ms) on item:5")
}

func TestCheckerPassesOrdersServedInArrivalOrder(t *testing.T) {
	orders := []*order{
		waited(1, []int{2, 5}, 10, 11, 20, 7, 9),
		waited(2, []int{5, 6}, 12, 13, 30, 10, 3),
		atOnce(3, []int{0, 2}, 0, 2, 1, 2),       // granted before the others joined
		waited(4, []int{0, 1}, 14, 15, 50, 5, 1), // shares item 0 with order 3 only
	}
	v := checkArrivals(orders)
	assert.Empty(t, v.violations)
	assert.Equal(t, 3, v.pairs, "1-2 on item 5, 1-3 on item 2, 3-4 on item 0")
}

func TestCheckerFlagsOnlyWhatTheBracketsProve(t *testing.T) {
	for _, tc := range []struct {
		why    string
		orders []*order
		pairs  int
	}{{
		why: "the joins overlap: either may have arrived first",
		orders: []*order{
			waited(1, []int{5}, 10, 14, 40, 9),
			waited(2, []int{5}, 12, 16, 30, 8),
		},
		pairs: 0,
	}, {
		why: "the later order was granted only after the earlier one's place was no longer certain",
		orders: []*order{
			waited(1, []int{5}, 10, 11, 40+float64(waiterTTL/time.Millisecond), 9),
			waited(2, []int{5}, 12, 13, 20+float64(waiterTTL/time.Millisecond), 8),
		},
		pairs: 1,
	}, {
		why: "no item in common",
		orders: []*order{
			waited(1, []int{4, 5}, 10, 11, 40, 9, 9),
			waited(2, []int{6, 7}, 12, 13, 30, 8, 8),
		},
		pairs: 0,
	}, {
		why: "the earlier order lost its place and joined again",
		orders: []*order{
			func() *order { o := waited(1, []int{5}, 10, 11, 40, 9); o.joins = 2; return o }(),
			waited(2, []int{5}, 12, 13, 30, 8),
		},
		pairs: 0,
	}} {
		v := checkArrivals(tc.orders)
		assert.Empty(t, v.violations, tc.why)
		assert.Equal(t, tc.pairs, v.pairs, tc.why)
	}
}

func TestCheckerFlagsAnOrderThatPassedOneGrantedAtItsJoin(t *testing.T) {
	first := atOnce(1, []int{3, 4}, 0, 2, 50, 50)
	then := waited(2, []int{4}, 5, 6, 20, 49)
	v := checkArrivals([]*order{first, then})
	require.Len(t, v.violations, 1)
	assert.Equal(t, 4, v.violations[0].item)
}

func TestCheckerSkipsOrdersThatJoinedTwice(t *testing.T) {
	o := waited(1, []int{1, 2}, 10, 11, 40, 9, 9)
	o.joins = 2
	v := checkArrivals([]*order{o, waited(2, []int{1}, 12, 13, 30, 8)})
	assert.Equal(t, verdict{unjudged: 1}, v)
}

func TestRecorderTakesTheJoinAndHowLongThePlaceWasKept(t *testing.T) {
	const ttl = time.Second
	obs := recorder(ttl)
	o := &order{}
	ctx := withOrder(context.Background(), o)
	obs.Observe(ctx, fairlock.Event{Kind: fairlock.EventQueued, Sent: at(10), Answered: at(11)})
	obs.Observe(ctx, fairlock.Event{Kind: fairlock.EventPolled, Sent: at(10), Answered: at(11)})
	obs.Observe(ctx, fairlock.Event{Kind: fairlock.EventPolled, Sent: at(500), Answered: at(501)})
	obs.Observe(context.Background(), fairlock.Event{Kind: fairlock.EventPolled, Sent: at(900), Answered: at(901)}) // another call's
	assert.Equal(t, 1, o.joins)
	assert.Equal(t, bracket{at(10), at(11)}, o.joined)
	assert.Equal(t, at(500).Add(ttl), o.inLineUntil())

	// A poll answered after the deadline the one before it set: the
	// ticket may have been dropped, so the certain window stops growing.
	obs.Observe(ctx, fairlock.Event{Kind: fairlock.EventPolled, Sent: at(1400), Answered: at(1600)})
	obs.Observe(ctx, fairlock.Event{Kind: fairlock.EventPolled, Sent: at(1700), Answered: at(1701)})
	assert.Equal(t, at(500).Add(ttl), o.inLineUntil())

	obs.Observe(ctx, fairlock.Event{Kind: fairlock.EventGranted, At: at(1800)})
	assert.Equal(t, at(1800), o.granted, "granted when the Client reported it")
	arrived, ok := o.arrival()
	assert.True(t, ok)
	assert.Equal(t, o.joined, arrived)
}

func TestOrderGrantedAtItsJoinArrivedBetweenLockAndGrant(t *testing.T) {
	o := atOnce(1, []int{1, 2}, 3, 4, 1, 1)
	arrived, ok := o.arrival()
	assert.True(t, ok)
	assert.Equal(t, bracket{at(3), at(4)}, arrived)
	assert.True(t, o.inLineUntil().IsZero(), "it never stood in line")
}

func TestReportNamesOrdersServedOutOfArrivalOrder(t *testing.T) {
	first := waited(1, []int{2, 5}, 10, 11, 40, 7, 9)
	then := waited(2, []int{5, 6}, 12, 13, 30, 8, 3)
	c := config{items: 8, stock: 10, maxItems: 4, maxQty: 3, orders: 2, workers: 1, clients: 1}
	zero := make([]int64, c.items)
	o := outcome{start: epoch, orders: []*order{first, then}, before: zero, after: zero, taken: zero, arrival: checkArrivals([]*order{first, then})}
	assert.False(t, o.ok(), "a run under the lock that served an order out of arrival order passed")
	var out bytes.Buffer
	report(&out, c, o)
	assert.Contains(t, out.String(), "arrival order:  NOT kept, 1 violation: 1 of the 1 pairs")
	assert.Contains(t, out.String(), "order 1 (arrived 10.000-11.000 ms) was served after order 2 (arrived 12.000-13.000 ms) on item:5: tokens 9 and 8")
}
