package main

import (
	"bytes"
	"context"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/fairlock/fairlock/internal/redistest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// shopRig is a redis-server of the test's own and the flags that point
// the command at it, under a key prefix of the test's.
type shopRig struct {
	t     *testing.T
	rdb   *redis.Client
	flags []string
}

// newShopRig starts a redis-server for t, or skips t when none can be
// started, saying why.
func newShopRig(t *testing.T) *shopRig {
	s, err := redistest.Start()
	if err != nil {
		t.Skipf("the orders need a redis-server, and none could be started: %v", err)
	}
	t.Cleanup(s.Stop)
	return &shopRig{t: t, rdb: s.Client(t), flags: []string{"-redis", "redis://" + s.Addr + "/0", "-prefix", redistest.Prefix(t)}}
}

// run runs the command with the rig's flags and args, and returns its
// config, its outcome and what it printed.
func (r *shopRig) run(args ...string) (config, outcome, string) {
	r.t.Helper()
	var stderr bytes.Buffer
	c, err := parseFlags(append(append([]string{}, r.flags...), args...), &stderr)
	require.NoError(r.t, err, stderr.String())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	o, err := run(ctx, c)
	require.NoError(r.t, err)
	var out bytes.Buffer
	report(&out, c, o)
	return c, o, out.String()
}

// stock reads every item's stock from Redis itself.
func (r *shopRig) stock(c config) []int64 {
	r.t.Helper()
	stock := make([]int64, c.items)
	for i := range stock {
		v, err := r.rdb.HGet(context.Background(), c.prefix+":stock", itemName(i)).Int64()
		require.NoError(r.t, err)
		stock[i] = v
	}
	return stock
}

// taken adds up what the filled orders took of each item.
func taken(c config, orders []*order) []int64 {
	t := make([]int64, c.items)
	for _, o := range orders {
		if o.filled {
			for j, i := range o.items {
				t[i] += o.qty[j]
			}
		}
	}
	return t
}

func TestOrdersUnderMultiLockKeepTheBooksAndArrivalOrder(t *testing.T) {
	r := newShopRig(t)
	c, o, out := r.run()

	stock, took := r.stock(c), taken(c, o.orders)
	for i := range stock {
		assert.GreaterOrEqual(t, stock[i], int64(0), "item %d went below zero", i)
		assert.Equal(t, c.stock-took[i], stock[i], "item %d: its stock is not what it started with less what the filled orders took", i)
	}
	assert.GreaterOrEqual(t, o.lowest, int64(0), "an order saw a stock below zero")
	assert.Equal(t, stock, o.after)
	assert.Equal(t, c.orders, o.filled+o.rejected, "every order was either filled or rejected")
	assert.Positive(t, o.filled, "no order was filled")
	assert.Positive(t, o.rejected, "no order was rejected: the stock never ran short, and all-or-nothing was not tried")
	assert.True(t, o.ok())
	assert.Contains(t, out, "books:          balance")

	// The history is what the brackets say it is: each order started,
	// arrived and was served in that order, under a token of each item.
	for _, ord := range o.orders {
		arrived, ok := ord.arrival()
		require.True(t, ok, "order %d joined %d times", ord.id, ord.joins)
		assert.False(t, arrived.from.Before(ord.start), "order %d", ord.id)
		assert.False(t, arrived.to.Before(arrived.from), "order %d", ord.id)
		assert.False(t, ord.granted.Before(arrived.to), "order %d", ord.id)
		require.Len(t, ord.tokens, len(ord.items), "order %d", ord.id)
		for _, tok := range ord.tokens {
			assert.Positive(t, tok, "order %d", ord.id)
		}
	}
	assert.Positive(t, o.waited, "no order waited in line: the arrival check judged nothing but grants at once")
	assert.Positive(t, o.arrival.pairs, "no two orders that share an item arrived in a certain order")
	assert.Empty(t, o.arrival.violations, "%s", out)
	assert.Contains(t, out, "arrival order:  kept")

	// The check can fail on this very history: give one pair that
	// certainly arrived in turn each other's token of an item they share,
	// as if the later one had been served first.
	first, then, item := orderedPair(o.orders)
	require.NotNil(t, first, "no pair of orders that waited in line arrived in a certain order")
	a, b := &first.tokens[slices.Index(first.items, item)], &then.tokens[slices.Index(then.items, item)]
	*a, *b = *b, *a
	v := checkArrivals(o.orders)
	assert.Contains(t, v.violations, violation{first: first, then: then, item: item, tokens: [2]int64{*a, *b}})
}

// orderedPair returns two orders that both waited in line and share an
// item, the first of which certainly arrived before the other, and the
// first item they share; nil when there are none.
func orderedPair(orders []*order) (first, then *order, item int) {
	for _, a := range orders {
		for _, b := range orders {
			aa, _ := a.arrival()
			ba, _ := b.arrival()
			if a.joins == 1 && b.joins == 1 && aa.before(ba) && firstShared(a, b) >= 0 {
				return a, b, firstShared(a, b)
			}
		}
	}
	return nil, nil, 0
}

// Without the lock, orders that share an item overwrite each other's
// writes. One run almost always breaks the books; a few runs are allowed,
// so that a run whose races happened to do no harm does not fail the
// test.
func TestOrdersWithoutLockBreakTheBooks(t *testing.T) {
	r := newShopRig(t)
	const runs = 5
	var outs []string
	for range runs {
		c, o, out := r.run("-nolock")
		stock := r.stock(c)
		require.Equal(t, stock, o.after, "the outcome's stock is not what Redis holds")
		assert.Empty(t, o.arrival, "an unlocked run has no arrival order to check")
		outs = append(outs, out)
		took := taken(c, o.orders)
		for i := range stock {
			if stock[i] < 0 || stock[i] != c.stock-took[i] {
				assert.Contains(t, out, "books:          do not balance")
				return
			}
		}
	}
	t.Fatalf("%d runs without the lock, none broke the books:\n%s", runs, outs)
}

func TestParseFlagsRefusesWhatCannotRun(t *testing.T) {
	for _, args := range [][]string{
		{"-max-items", "1"},
		{"-items", "3", "-max-items", "4"},
		{"-stock", "-1"},
		{"-max-qty", "0"},
		{"-orders", "-1"},
		{"-workers", "0"},
		{"-clients", "0"},
		{"-pause", "-1ms"},
		{"-nope"},
	} {
		_, err := parseFlags(args, &bytes.Buffer{})
		assert.Error(t, err, "%v", args)
	}
	c, err := parseFlags(nil, &bytes.Buffer{})
	require.NoError(t, err)
	assert.Equal(t, "redis://127.0.0.1:6379/0", c.redisURL)
	assert.False(t, c.nolock)
}
