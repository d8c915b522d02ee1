package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock/fairlock"
)

// waiterTTL is the Clients' waiter TTL (fairlock's default, set here so
// that the check knows it): a ticket keeps its place in line for this
// long after each poll.
const waiterTTL = 10 * time.Second

// outcome is what a run did.
type outcome struct {
	nolock   bool
	start    time.Time
	orders   []*order // by id
	before   []int64  // each item's stock at the start
	after    []int64  // and at the end, read from Redis
	taken    []int64  // of each item, by the filled orders
	lowest   int64    // the lowest stock any order read or wrote
	filled   int
	rejected int
	waited   int     // orders whose ticket waited in line
	arrival  verdict // under the lock
}

// balanced reports whether each item's stock at the end is its stock at
// the start less what the filled orders took.
func (o outcome) balanced() bool {
	for i := range o.before {
		if o.after[i] != o.before[i]-o.taken[i] {
			return false
		}
	}
	return true
}

// ok reports whether a run under the lock kept every promise: the books
// balance, no stock went below zero, and no order was served out of
// arrival order. A run without the lock is not judged.
func (o outcome) ok() bool {
	return o.nolock || (o.balanced() && o.lowest >= 0 && len(o.arrival.violations) == 0)
}

// run opens the stock, places the orders and returns what they did.
func run(ctx context.Context, c config) (outcome, error) {
	opts, err := redis.ParseURL(c.redisURL)
	if err != nil {
		return outcome{}, fmt.Errorf("-redis: %w", err)
	}
	s := &shop{key: c.prefix + ":stock", items: c.items, pause: c.pause, nolock: c.nolock}
	for range c.clients {
		rdb := redis.NewClient(opts)
		defer rdb.Close()
		locks, err := fairlock.New(rdb, fairlock.WithPrefix(c.prefix),
			fairlock.WithWaiterTTL(waiterTTL), fairlock.WithObserver(recorder(waiterTTL)))
		if err != nil {
			return outcome{}, err
		}
		defer locks.Close()
		s.branches = append(s.branches, branch{rdb: rdb, locks: locks})
	}

	o := outcome{nolock: c.nolock, orders: make([]*order, c.orders)}
	for id := range o.orders {
		o.orders[id] = newOrder(id, c.items, c.maxItems, c.maxQty)
	}
	if err := s.open(ctx, c.stock); err != nil {
		return outcome{}, err
	}
	if o.before, err = s.stock(ctx); err != nil {
		return outcome{}, err
	}

	// The goroutines take orders until all are taken; the first error
	// stops them all.
	octx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	var next atomic.Int64
	var wg sync.WaitGroup
	o.start = time.Now()
	for w := range c.workers {
		br := s.branches[w%len(s.branches)]
		wg.Go(func() {
			for id := next.Add(1) - 1; id < int64(c.orders) && octx.Err() == nil; id = next.Add(1) - 1 {
				if err := s.reserve(octx, br, o.orders[id]); err != nil {
					stop(fmt.Errorf("order %d: %w", id, err))
					return
				}
			}
		})
	}
	wg.Wait()
	// The Observer hears of the calls after them, on a goroutine of each
	// Client: closing the Clients delivers what it has not yet heard, so
	// the orders are complete (and no longer written) from here.
	for _, br := range s.branches {
		if err := br.locks.Close(); err != nil {
			return outcome{}, err
		}
	}
	if err := context.Cause(octx); err != nil {
		return outcome{}, err
	}
	if o.after, err = s.stock(ctx); err != nil {
		return outcome{}, err
	}
	o.lowest = s.lowestSeen()
	o.taken = make([]int64, c.items)
	for _, ord := range o.orders {
		switch {
		case ord.filled:
			o.filled++
			for j, i := range ord.items {
				o.taken[i] += ord.qty[j]
			}
		default:
			o.rejected++
		}
		if ord.joins > 0 {
			o.waited++
		}
	}
	if !c.nolock {
		o.arrival = checkArrivals(o.orders)
	}
	return o, nil
}

// shown is how many violations a report describes.
const shown = 10

// report prints what a run did.
func report(w io.Writer, c config, o outcome) {
	how := "each under a MultiLock of its items"
	if c.nolock {
		how = "without a lock (-nolock)"
	}
	fmt.Fprintf(w, "%d items of %d, %d orders of 2 to %d items (1 to %d of each) by %d goroutines over %d Clients, %s\n",
		c.items, c.stock, c.orders, c.maxItems, c.maxQty, c.workers, c.clients, how)
	fmt.Fprintf(w, "orders:         %d filled, %d rejected (not enough stock)", o.filled, o.rejected)
	if !c.nolock {
		fmt.Fprintf(w, "; %d waited in line", o.waited)
	}
	fmt.Fprintln(w)
	before, after, taken := sum(o.before), sum(o.after), sum(o.taken)
	fmt.Fprintf(w, "stock before:   %d\n", before)
	fmt.Fprintf(w, "taken:          %d by the filled orders\n", taken)
	fmt.Fprintf(w, "stock after:    %d (by item: %s)\n", after, strings.Trim(fmt.Sprint(o.after), "[]"))
	if o.balanced() {
		fmt.Fprintf(w, "books:          balance: each item's stock fell by what the filled orders took\n")
	} else {
		off := 0
		for i := range o.before {
			if o.after[i] != o.before[i]-o.taken[i] {
				off++
			}
		}
		fmt.Fprintf(w, "books:          do not balance on %d of %d items: the stock fell by %d, the filled orders took %d\n",
			off, len(o.before), before-after, taken)
	}
	fmt.Fprintf(w, "lowest stock:   %d (the lowest level an order read or wrote)\n", o.lowest)
	over, worst := 0, int64(0)
	for i := range o.before {
		if left := o.before[i] - o.taken[i]; left < 0 {
			over, worst = over+1, min(worst, left)
		}
	}
	if over > 0 {
		fmt.Fprintf(w, "oversold:       %d items: the filled orders took more than the stock held, by up to %d\n", over, -worst)
	}
	switch v := o.arrival; {
	case c.nolock:
		fmt.Fprintf(w, "arrival order:  not checked (no lock, no lines)\n")
	case len(v.violations) == 0:
		fmt.Fprintf(w, "arrival order:  kept: %d of the %d pairs of orders that share an item arrived one certainly before the other, and each was served in that order%s\n",
			v.pairs, v.shared, unjudged(v))
	default:
		fmt.Fprintf(w, "arrival order:  NOT kept, %s: %d of the %d pairs of orders that share an item arrived one certainly before the other%s\n",
			plural(len(v.violations), "violation"), v.pairs, v.shared, unjudged(v))
		for n, x := range v.violations {
			if n == shown {
				fmt.Fprintf(w, "  and %d more\n", len(v.violations)-shown)
				break
			}
			fmt.Fprintf(w, "  %s\n", x.describe(o.start))
		}
	}
}

// plural returns n things.
func plural(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}

// unjudged says how many orders the check left out, if any.
func unjudged(v verdict) string {
	if v.unjudged == 0 {
		return ""
	}
	return fmt.Sprintf(" (%d orders lost their place in line and were not judged)", v.unjudged)
}

// describe says what went wrong, the times in ms since start.
func (x violation) describe(start time.Time) string {
	at := func(o *order) string {
		a, _ := o.arrival()
		return fmt.Sprintf("order %d (arrived %.3f-%.3f ms)", o.id, ms(a.from, start), ms(a.to, start))
	}
	return fmt.Sprintf("%s was served after %s on %s: tokens %d and %d", at(x.first), at(x.then), itemName(x.item), x.tokens[0], x.tokens[1])
}

// ms returns t in ms since start.
func ms(t, start time.Time) float64 { return float64(t.Sub(start).Microseconds()) / 1000 }

func sum(v []int64) int64 {
	var s int64
	for _, x := range v {
		s += x
	}
	return s
}
