// Command inventory reserves stock for concurrent orders, each of several
// items: a case for taking several locks at once, and for serving the
// callers of a lock in the order they came.
//
// The stock of each item is a field of one Redis hash. An order picks 2
// to 4 items at random with a quantity of each, reads their stock with
// HMGET, checks that every item has enough, pauses, and writes the new
// levels with HSET: all or nothing, an order that cannot be filled whole
// is rejected and takes nothing. Reading, checking and writing are steps
// that Redis does not make atomic. Goroutines spread over several
// fairlock Clients, as workers of several processes would be, place the
// orders. Each order takes a MultiLock of its items first, so no other
// order touches them between its read and its write: no stock goes below
// zero, and the stock at the end is the stock at the start less what the
// filled orders took.
//
// The run records a history of the orders: when each arrived (its one
// ticket joined the lines of all its items), when it was served (granted
// every item, under a fencing token each) and whether it was filled. It
// then checks that orders that share an item were served in the order
// they arrived, as far as the times recorded prove that order (see
// history.go).
//
// With -nolock the same orders run without the lock. Two orders that
// share an item then overwrite each other's writes: the stock falls by
// less than the filled orders took, and an item is sold beyond its stock.
//
//	go run ./examples/inventory                  # Redis at redis://127.0.0.1:6379/0
//	go run ./examples/inventory -nolock
//	go run ./examples/inventory -history         # every order, one a line
//	go run ./examples/inventory -redis redis://127.0.0.1:6380/0
//
// It keeps the stock in the hash inventory:stock (-prefix), one field per
// item (item:0, item:1, ...), sets it afresh at the start, and leaves it
// in Redis for a look with redis-cli. The locks' keys are under the same
// prefix: no hold or line outlives the run, only each lock's
// fencing-token counter and, for a minute or so, the receipts of its last
// calls.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"time"
)

// config is what the flags set.
type config struct {
	redisURL string
	prefix   string        // of the stock hash, and the Clients' key prefix
	items    int           // how many items
	stock    int64         // each item's stock at the start
	maxItems int           // an order takes 2 to maxItems items
	maxQty   int64         // and 1 to maxQty of each
	orders   int           // orders in all
	workers  int           // goroutines placing them
	clients  int           // fairlock Clients the goroutines share, each over a go-redis client of its own
	pause    time.Duration // between reading the stock and writing it back
	nolock   bool          // run the orders without the lock
	history  bool          // print every order
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("inventory", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.redisURL, "redis", "redis://127.0.0.1:6379/0", "`URL` of the Redis to use")
	fs.StringVar(&c.prefix, "prefix", "inventory", "key `prefix` of the stock and the locks")
	fs.IntVar(&c.items, "items", 8, "number of items")
	fs.Int64Var(&c.stock, "stock", 150, "stock of each item at the start")
	fs.IntVar(&c.maxItems, "max-items", 4, "an order takes 2 to this many items")
	fs.Int64Var(&c.maxQty, "max-qty", 3, "and 1 to this many of each")
	fs.IntVar(&c.orders, "orders", 300, "orders in all")
	fs.IntVar(&c.workers, "workers", 16, "goroutines placing the orders")
	fs.IntVar(&c.clients, "clients", 4, "fairlock Clients the goroutines are spread over")
	fs.DurationVar(&c.pause, "pause", time.Millisecond, "pause between reading the stock and writing it back")
	fs.BoolVar(&c.nolock, "nolock", false, "run the orders without the lock")
	fs.BoolVar(&c.history, "history", false, "print every order: its items, when it arrived and was served")
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	switch {
	case c.maxItems < 2 || c.maxItems > c.items:
		return config{}, errors.New("-max-items: an order takes from 2 to at most -items items")
	case c.stock < 0 || c.orders < 0 || c.pause < 0:
		return config{}, errors.New("-stock, -orders and -pause must not be negative")
	case c.maxQty < 1 || c.workers < 1 || c.clients < 1:
		return config{}, errors.New("-max-qty, -workers and -clients must be positive")
	}
	return c, nil
}

func main() {
	c, err := parseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "inventory:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	o, err := run(ctx, c)
	if err != nil {
		fmt.Fprintln(os.Stderr, "inventory:", err)
		os.Exit(1)
	}
	if c.history {
		printHistory(os.Stdout, o.start, o.orders)
		fmt.Fprintln(os.Stdout)
	}
	report(os.Stdout, c, o)
	if !o.ok() {
		os.Exit(1)
	}
}
