// Command transfer moves money between bank accounts kept in Redis, the
// classic case for taking two locks at once.
//
// Each transfer reads the balances of two accounts with GET, computes,
// and writes both back with SET: three steps that Redis does not make
// atomic. Goroutines spread over several fairlock Clients, as workers of
// several processes would be, run transfers between random pairs of
// accounts. Each transfer takes a MultiLock of both accounts first, so
// no other transfer touches them between its read and its write: the
// total of the balances stays what it was, and a transfer that would
// overdraw its account is skipped, so no balance goes below zero.
//
// With -nolock the same transfers run without the lock. Two transfers
// that share an account then overwrite each other's writes, and the total
// at the end differs from the total at the start. A transfer writes the
// credit before the debit, so in a race a debit mostly overwrites another
// transfer's credit, and money is lost.
//
//	go run ./examples/transfer                  # Redis at redis://127.0.0.1:6379/0
//	go run ./examples/transfer -nolock
//	go run ./examples/transfer -redis redis://127.0.0.1:6380/0
//
// It keeps each balance in a key of its own, transfer:balance:0,
// transfer:balance:1, ... (-prefix), sets them afresh at the start, and
// leaves them in Redis for a look with redis-cli. The locks' keys are
// under the same prefix: no hold or line outlives the run, only each
// lock's fencing-token counter and, for a minute or so, the receipts of
// its last calls.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock/fairlock"
)

// config is what the flags set.
type config struct {
	redisURL  string
	prefix    string        // of the balance keys, and the Clients' key prefix
	accounts  int           // how many accounts
	balance   int64         // each account's opening balance
	maxAmount int64         // a transfer moves 1 to maxAmount
	transfers int           // transfers in all
	workers   int           // goroutines running them
	clients   int           // fairlock Clients the goroutines share, each over a go-redis client of its own
	pause     time.Duration // between reading two balances and writing them back
	nolock    bool          // run the transfers without the lock
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("transfer", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.redisURL, "redis", "redis://127.0.0.1:6379/0", "`URL` of the Redis to use")
	fs.StringVar(&c.prefix, "prefix", "transfer", "key `prefix` of the balances and the locks")
	fs.IntVar(&c.accounts, "accounts", 10, "number of accounts")
	fs.Int64Var(&c.balance, "balance", 100, "opening balance of each account")
	fs.Int64Var(&c.maxAmount, "max-amount", 50, "a transfer moves a random amount from 1 to this")
	fs.IntVar(&c.transfers, "transfers", 500, "transfers in all")
	fs.IntVar(&c.workers, "workers", 16, "goroutines running the transfers")
	fs.IntVar(&c.clients, "clients", 4, "fairlock Clients the goroutines are spread over")
	fs.DurationVar(&c.pause, "pause", time.Millisecond, "pause between reading two balances and writing them back")
	fs.BoolVar(&c.nolock, "nolock", false, "run the transfers without the lock")
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	switch {
	case c.accounts < 2:
		return config{}, errors.New("-accounts: a transfer needs two accounts")
	case c.balance < 0 || c.maxAmount < 1 || c.transfers < 0 || c.pause < 0:
		return config{}, errors.New("-balance, -transfers and -pause must not be negative, -max-amount must be positive")
	case c.workers < 1 || c.clients < 1:
		return config{}, errors.New("-workers and -clients must be positive")
	}
	return c, nil
}

func main() {
	c, err := parseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "transfer:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	o, err := run(ctx, c)
	if err != nil {
		fmt.Fprintln(os.Stderr, "transfer:", err)
		os.Exit(1)
	}
	report(os.Stdout, c, o)
}

// outcome is what a run did.
type outcome struct {
	before, after int64 // the total of the balances at the start and at the end
	done, skipped int64 // transfers made, and skipped because they would overdraw
	lowest        int64 // the lowest balance at the end
}

// report prints what a run did.
func report(w io.Writer, c config, o outcome) {
	how := "each under a MultiLock of both accounts"
	if c.nolock {
		how = "without a lock (-nolock)"
	}
	fmt.Fprintf(w, "%d accounts of %d, %d transfers by %d goroutines over %d Clients, %s\n",
		c.accounts, c.balance, c.transfers, c.workers, c.clients, how)
	fmt.Fprintf(w, "total before:   %d\n", o.before)
	switch diff := o.after - o.before; {
	case diff == 0:
		fmt.Fprintf(w, "total after:    %d (unchanged)\n", o.after)
	case diff < 0:
		fmt.Fprintf(w, "total after:    %d (%d lost)\n", o.after, -diff)
	default:
		fmt.Fprintf(w, "total after:    %d (%d created)\n", o.after, diff)
	}
	fmt.Fprintf(w, "transfers:      %d done, %d skipped (would overdraw)\n", o.done, o.skipped)
	fmt.Fprintf(w, "lowest balance: %d\n", o.lowest)
}

// run opens the accounts, runs the transfers and returns what they did.
func run(ctx context.Context, c config) (outcome, error) {
	opts, err := redis.ParseURL(c.redisURL)
	if err != nil {
		return outcome{}, fmt.Errorf("-redis: %w", err)
	}
	b := &bank{prefix: c.prefix, accounts: c.accounts, pause: c.pause, nolock: c.nolock}
	for range c.clients {
		rdb := redis.NewClient(opts)
		defer rdb.Close()
		locks, err := fairlock.New(rdb, fairlock.WithPrefix(c.prefix))
		if err != nil {
			return outcome{}, err
		}
		defer locks.Close()
		b.branches = append(b.branches, branch{rdb: rdb, locks: locks})
	}

	var o outcome
	if err := b.open(ctx, c.balance); err != nil {
		return outcome{}, err
	}
	if o.before, _, err = b.total(ctx); err != nil {
		return outcome{}, err
	}

	// The goroutines take transfers until all are taken; the first error
	// stops them all.
	tctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	var taken, done, skipped atomic.Int64
	var wg sync.WaitGroup
	for w := range c.workers {
		br := b.branches[w%len(b.branches)]
		wg.Go(func() {
			for taken.Add(1) <= int64(c.transfers) && tctx.Err() == nil {
				from := rand.IntN(c.accounts)
				to := (from + 1 + rand.IntN(c.accounts-1)) % c.accounts // any account but from
				moved, err := b.transfer(tctx, br, from, to, 1+rand.Int64N(c.maxAmount))
				switch {
				case err != nil:
					stop(fmt.Errorf("transfer from %d to %d: %w", from, to, err))
					return
				case moved:
					done.Add(1)
				default:
					skipped.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if err := context.Cause(tctx); err != nil {
		return outcome{}, err
	}
	o.done, o.skipped = done.Load(), skipped.Load()
	if o.after, o.lowest, err = b.total(ctx); err != nil {
		return outcome{}, err
	}
	return o, nil
}

// bank is the accounts, kept in Redis, and the Clients that lock them.
type bank struct {
	prefix   string
	accounts int
	pause    time.Duration
	nolock   bool
	branches []branch
}

// branch is what one process of the bank would have: a go-redis client
// and a fairlock Client over it.
type branch struct {
	rdb   *redis.Client
	locks *fairlock.Client
}

// balanceKey is the key of account i's balance.
func (b *bank) balanceKey(i int) string { return b.prefix + ":balance:" + strconv.Itoa(i) }

// lockName is the name of account i's lock.
func lockName(i int) string { return "account:" + strconv.Itoa(i) }

// open sets every account's balance to balance.
func (b *bank) open(ctx context.Context, balance int64) error {
	rdb := b.branches[0].rdb
	for i := range b.accounts {
		if err := rdb.Set(ctx, b.balanceKey(i), balance, 0).Err(); err != nil {
			return err
		}
	}
	return nil
}

// total returns the sum of the balances and the lowest of them.
func (b *bank) total(ctx context.Context) (sum, lowest int64, err error) {
	rdb := b.branches[0].rdb
	for i := range b.accounts {
		v, err := rdb.Get(ctx, b.balanceKey(i)).Int64()
		if err != nil {
			return 0, 0, err
		}
		if sum += v; i == 0 || v < lowest {
			lowest = v
		}
	}
	return sum, lowest, nil
}

// transfer moves amount from account from to account to through br, and
// returns false without moving anything when from holds less than
// amount. It reads both balances and writes both back with plain GET and
// SET, the credit first, which is right only while no other transfer
// touches the two accounts in between: unless -nolock, it holds a
// MultiLock of both throughout.
func (b *bank) transfer(ctx context.Context, br branch, from, to int, amount int64) (moved bool, err error) {
	if !b.nolock {
		both := br.locks.MultiLock([]string{lockName(from), lockName(to)})
		held, lerr := both.Lock(ctx)
		if lerr != nil {
			return false, lerr
		}
		defer func() {
			if uerr := both.Unlock(held); err == nil {
				err = uerr
			}
		}()
		// held ends if a lease is lost: the commands below then fail
		// instead of writing without the locks.
		ctx = held
	}
	src, err := br.rdb.Get(ctx, b.balanceKey(from)).Int64()
	if err != nil {
		return false, err
	}
	dst, err := br.rdb.Get(ctx, b.balanceKey(to)).Int64()
	if err != nil {
		return false, err
	}
	if src < amount {
		return false, nil
	}
	time.Sleep(b.pause) // the work a real transfer does between its read and its write
	if err := br.rdb.Set(ctx, b.balanceKey(to), dst+amount, 0).Err(); err != nil {
		return false, err
	}
	if err := br.rdb.Set(ctx, b.balanceKey(from), src-amount, 0).Err(); err != nil {
		return false, err
	}
	return true, nil
}
