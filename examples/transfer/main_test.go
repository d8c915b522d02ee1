package main

import (
	"bytes"
	"context"
	"strconv"
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

// bankRig is a redis-server of the test's own and the flags that point
// the command at it, under a key prefix of the test's.
type bankRig struct {
	t     *testing.T
	rdb   *redis.Client
	flags []string
}

// newBankRig starts a redis-server for t, or skips t when none can be
// started, saying why.
func newBankRig(t *testing.T) *bankRig {
	s, err := redistest.Start()
	if err != nil {
		t.Skipf("the transfers need a redis-server, and none could be started: %v", err)
	}
	t.Cleanup(s.Stop)
	return &bankRig{t: t, rdb: s.Client(t), flags: []string{"-redis", "redis://" + s.Addr + "/0", "-prefix", redistest.Prefix(t)}}
}

// run runs the command with the rig's flags and args, and returns its
// config, its outcome and what it printed.
func (r *bankRig) run(args ...string) (config, outcome, string) {
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

// balances reads every account's balance from Redis itself.
func (r *bankRig) balances(c config) []int64 {
	r.t.Helper()
	b := make([]int64, c.accounts)
	for i := range b {
		v, err := r.rdb.Get(context.Background(), c.prefix+":balance:"+strconv.Itoa(i)).Int64()
		require.NoError(r.t, err)
		b[i] = v
	}
	return b
}

func sum(balances []int64) int64 {
	var s int64
	for _, b := range balances {
		s += b
	}
	return s
}

func TestTransfersUnderMultiLockKeepTheTotalAndNoBalanceGoesNegative(t *testing.T) {
	r := newBankRig(t)
	c, o, out := r.run()

	balances := r.balances(c)
	opening := int64(c.accounts) * c.balance
	assert.Equal(t, opening, sum(balances), "money was lost or created under the lock: %v", balances)
	for i, b := range balances {
		assert.GreaterOrEqual(t, b, int64(0), "account %d went below zero", i)
	}
	assert.Equal(t, int64(c.transfers), o.done+o.skipped, "every transfer was either done or skipped")
	assert.Positive(t, o.done, "no transfer was done")
	assert.Equal(t, outcome{before: opening, after: opening, done: o.done, skipped: o.skipped, lowest: o.lowest}, o)
	assert.Contains(t, out, "(unchanged)")
}

// Without the lock, transfers that share an account overwrite each
// other's writes. One run almost always loses money; a few runs are
// allowed, so that a run whose races happened to cancel out does not fail
// the test.
func TestTransfersWithoutLockLoseMoney(t *testing.T) {
	r := newBankRig(t)
	const runs = 5
	var totals []int64
	for range runs {
		c, o, out := r.run("-nolock")
		got := sum(r.balances(c))
		require.Equal(t, got, o.after, "the outcome's total is not what Redis holds")
		totals = append(totals, got)
		if opening := int64(c.accounts) * c.balance; got < opening {
			assert.Contains(t, out, "lost)")
			return
		}
	}
	t.Fatalf("%d runs without the lock, none lost money: totals %v", runs, totals)
}

func TestParseFlagsRefusesWhatCannotRun(t *testing.T) {
	for _, args := range [][]string{
		{"-accounts", "1"},
		{"-max-amount", "0"},
		{"-transfers", "-1"},
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
