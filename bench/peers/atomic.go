package main

import (
	"context"
	"crypto/rand"
	_ "embed"
	"time"

	"github.com/redis/go-redis/v9"
)

// The atomic try-all is a third way to take several names at once, and no
// library's: the kind of call that sets every name's key in one step or
// none and never waits in a line, as bsm/redislock's ObtainMulti does on
// its main branch (no release has it), Redisson's RedissonFasterMultiLock
// and node-redlock from v5. It is written here, over the same go-redis
// client as the others, so that the multi workload can measure that kind
// too. One script takes every key or none (MSETNX, then PEXPIRE on each);
// when one is taken it waits a random time up to -multi-wait and runs the
// script again, as ObtainMulti would with a retry strategy of random
// waits. Each run of the script is an attempt. It has no single-lock form
// of its own, so only the multi workload runs it (library.multiOnly).

var (
	//go:embed atomic_take.lua
	atomicTakeSrc string
	//go:embed atomic_give.lua
	atomicGiveSrc string

	atomicTake = redis.NewScript(atomicTakeSrc)
	atomicGive = redis.NewScript(atomicGiveSrc)
)

// atomicName is the atomic try-all's key in -libs and the JSON report;
// atomicLabel names its rows in the tables.
const (
	atomicName  = "atomic"
	atomicLabel = "atomic try-all (MSETNX-style, as redislock's unreleased ObtainMulti)"
)

// atomicLocker takes sets of names through one go-redis client, each name
// a key holding the value of its holder.
type atomicLocker struct {
	rdb       redis.Scripter
	ttl       time.Duration
	multiWait time.Duration // the longest random wait between two attempts
}

var _ locker = atomicLocker{}

// lock takes the set of the one name. The benchmark does not call it:
// only the multi workload runs this locker.
func (a atomicLocker) lock(ctx context.Context, name string) (func(context.Context) error, error) {
	unlock, _, err := a.lockAll(ctx, []string{name})
	return unlock, err
}

// lockAll runs the take script until it has set every name's key, waiting
// a random time from 0 to a.multiWait after each run that found one taken.
// It returns the function that gives them back and the runs of the script,
// or the first error of a run, or ctx's error when ctx ends first.
func (a atomicLocker) lockAll(ctx context.Context, names []string) (func(context.Context) error, int64, error) {
	value := rand.Text()
	ttl := a.ttl.Milliseconds()
	var attempts int64
	for {
		attempts++
		took, err := atomicTake.Run(ctx, a.rdb, names, value, ttl).Int()
		if err != nil {
			return nil, attempts, err
		}
		if took == 1 {
			return func(ctx context.Context) error { return a.give(ctx, names, value) }, attempts, nil
		}
		if err := sleep(ctx, randomWait(a.multiWait)); err != nil {
			return nil, attempts, err
		}
	}
}

// give deletes the keys of names that still hold value, in one script,
// and reports errNotReleased when any of them no longer did.
func (a atomicLocker) give(ctx context.Context, names []string, value string) error {
	n, err := atomicGive.Run(ctx, a.rdb, names, value).Int()
	if err != nil {
		return err
	}
	if n != len(names) {
		return errNotReleased
	}
	return nil
}
