package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/fairlock/fairlock"
)

// order is one order and, once placed, what happened to it. Its items
// are distinct and in increasing order; qty[j] is the quantity of
// items[j], tokens[j] the fencing token of items[j]'s lock at the grant.
//
// The times are read on this process's clock, with its monotonic reading,
// so each brackets a real event in Redis from the caller's side:
//   - start is read just before Lock is called: the ticket joined the
//     lines after it;
//   - a join's sent and answered are those of the call that appended the
//     ticket to the lines (the Observer's EventQueued event): it joined in
//     between;
//   - granted is the At of the Observer's EventGranted event, read when the
//     Client reported the grant: it was granted before.
//
// The fields are written by the goroutine that places the order and by
// the Observer, which each Client calls from a goroutine of its own, and
// read once every order is done and the Clients are closed (Close
// delivers the events still queued, and the Observer is not called
// after it).
type order struct {
	id     int
	items  []int
	qty    []int64
	filled bool // reserved; false: rejected, it took nothing

	// Set only when placed under the lock.
	start   time.Time
	joins   int     // Queued events: 0 when granted by the call that joined, 2 or more when it lost its place and joined again
	joined  bracket // the last join's call
	kept    time.Time
	lapsed  bool // a poll came after the deadline the one before it had set: kept stopped growing there
	granted time.Time
	tokens  []int64
}

// bracket is an interval that holds an event: it happened after from and
// before to.
type bracket struct{ from, to time.Time }

// before reports whether b certainly ended before c began.
func (b bracket) before(c bracket) bool { return b.to.Before(c.from) }

// arrival returns when the order's ticket joined the lines of its items,
// and false for an order that joined more than once: it lost its place
// in between (it could not reach Redis for a waiter TTL), so it is not
// judged. A ticket granted by the call that joined (joins 0) joined and
// was granted in one script run, between the start of Lock and the
// grant.
func (o *order) arrival() (bracket, bool) {
	switch o.joins {
	case 0:
		return bracket{o.start, o.granted}, true
	case 1:
		return o.joined, true
	}
	return bracket{}, false
}

// inLineUntil returns until when the order certainly kept its place in
// line, when it had to wait: its ticket stays in line as long as its
// waiter polls, each poll moving its deadline a waiter TTL past the
// script run, and only a ticket whose deadline passed is dropped. So the
// place is certain until a TTL after the send of the last poll, as long
// as each poll was answered before the deadline the one before it set. A
// ticket granted by the call that joined never stood in line: zero.
func (o *order) inLineUntil() time.Time {
	if o.joins == 0 {
		return time.Time{}
	}
	return o.kept
}

// orderKey is the key of the order in the context of its Lock call.
type orderKey struct{}

// withOrder returns ctx carrying o, for the Observer.
func withOrder(ctx context.Context, o *order) context.Context {
	return context.WithValue(ctx, orderKey{}, o)
}

// recorder returns the Observer that records, in the order the context
// of a Lock call carries, when its ticket joined the lines, how long it
// kept its place, and when it was granted. ttl is the Clients' waiter
// TTL.
func recorder(ttl time.Duration) fairlock.Observer {
	return fairlock.ObserverFunc(func(ctx context.Context, e fairlock.Event) {
		o, ok := ctx.Value(orderKey{}).(*order)
		if !ok {
			return
		}
		switch e.Kind {
		case fairlock.EventQueued:
			o.joins++
			o.joined = bracket{e.Sent, e.Answered}
			o.kept, o.lapsed = e.Sent.Add(ttl), false
		case fairlock.EventPolled: // the join's call too, and each poll after it
			switch {
			case o.joins == 0 || o.lapsed:
			case e.Answered.Before(o.kept):
				o.kept = later(o.kept, e.Sent.Add(ttl))
			default:
				o.lapsed = true
			}
		case fairlock.EventGranted:
			if o.granted.IsZero() {
				o.granted = e.At
			}
		}
	})
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// verdict is what the check of arrival order found.
type verdict struct {
	shared     int         // pairs of orders judged that share an item
	pairs      int         // of those, the pairs one of which certainly arrived first
	unjudged   int         // orders that joined more than once
	violations []violation // pairs served out of arrival order
}

// violation is an order served after a later one on an item they share.
type violation struct {
	first, then *order // first certainly arrived before then
	item        int
	tokens      [2]int64 // first's token of the item, then's
}

// checkArrivals checks that orders that share an item were served in the
// order they arrived, as far as their brackets prove it. Order a
// certainly arrived before order b when a's arrival bracket ended before
// b's began: a's ticket joined the lines of its items (one script
// appends it to all of them) before b's joined, so a stood ahead of b in
// the line of each item they share. Each lock's fencing token grows with
// every grant, so on such an item the order served first has the lower
// token. The check flags a pair in which b has the lower token while a
// certainly kept its place: b's grant came before it was heard of, and
// that was before inLineUntil(a); or a was granted at its join, before b
// joined at all. What the brackets leave open (which of two orders
// arrived first, or whether a was still in line) is never flagged.
func checkArrivals(orders []*order) verdict {
	var v verdict
	byItem := map[int][]*order{}
	for _, o := range orders {
		if _, ok := o.arrival(); !ok {
			v.unjudged++
			continue
		}
		for _, i := range o.items {
			byItem[i] = append(byItem[i], o)
		}
	}
	for _, i := range slices.Sorted(maps.Keys(byItem)) {
		sharing := byItem[i]
		for x, a := range sharing {
			for _, b := range sharing[x+1:] {
				counted := firstShared(a, b) == i // each pair once, at the first item they share
				if counted {
					v.shared++
				}
				first, then := a, b
				aa, _ := a.arrival()
				ba, _ := b.arrival()
				switch {
				case aa.before(ba):
				case ba.before(aa):
					first, then = b, a
				default:
					continue // the brackets leave open which arrived first
				}
				if counted {
					v.pairs++
				}
				tf, tt := tokenOf(first, i), tokenOf(then, i)
				if tt < tf && (first.joins == 0 || then.granted.Before(first.inLineUntil())) {
					v.violations = append(v.violations, violation{first: first, then: then, item: i, tokens: [2]int64{tf, tt}})
				}
			}
		}
	}
	return v
}

// firstShared returns the lowest item orders a and b both take, -1 for
// none.
func firstShared(a, b *order) int {
	for _, i := range a.items {
		if slices.Contains(b.items, i) {
			return i
		}
	}
	return -1
}

// tokenOf returns o's fencing token of item i.
func tokenOf(o *order, i int) int64 {
	return o.tokens[slices.Index(o.items, i)]
}

// printHistory prints each order on a line: its items and quantities,
// and under the lock when it arrived and was served (ms since start) and
// its tokens.
func printHistory(w io.Writer, start time.Time, orders []*order) {
	for _, o := range orders {
		var items strings.Builder
		for j, i := range o.items {
			if j > 0 {
				items.WriteString(", ")
			}
			fmt.Fprintf(&items, "%d of item:%d", o.qty[j], i)
		}
		status := "rejected"
		if o.filled {
			status = "filled"
		}
		fmt.Fprintf(w, "order %d: %s; %s", o.id, items.String(), status)
		if arrived, ok := o.arrival(); ok && !o.start.IsZero() {
			fmt.Fprintf(w, "; arrived %.3f-%.3f ms, served by %.3f ms, tokens %v", ms(arrived.from, start), ms(arrived.to, start), ms(o.granted, start), o.tokens)
		} else if !o.start.IsZero() {
			fmt.Fprintf(w, "; joined %d times, served by %.3f ms, tokens %v", o.joins, ms(o.granted, start), o.tokens)
		}
		fmt.Fprintln(w)
	}
}
