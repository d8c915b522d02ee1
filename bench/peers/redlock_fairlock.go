package main

import (
	"context"

	"github.com/fairlock/fairlock"
	"github.com/redis/go-redis/v9"
)

// openFairQuorum returns the opener of fairlock's quorum lock: a Client of
// fairlock.NewQuorum over the masters, with the lease of cfg.
func openFairQuorum(cfg libConfig) func(masters []*redis.Client) (locker, func() error, error) {
	return func(masters []*redis.Client) (locker, func() error, error) {
		rdbs := make([]redis.UniversalClient, len(masters))
		for i, m := range masters {
			rdbs[i] = m
		}
		c, err := fairlock.NewQuorum(context.Background(), rdbs, fairlock.WithLease(cfg.ttl))
		if err != nil {
			return nil, nil, err
		}
		return fairLocker{c}, c.Close, nil
	}
}

var _ fencer = fairLocker{}

// lockFenced takes a Mutex of the Client, as lock does, and returns with
// the function that unlocks it the one that reads the hold's token.
func (f fairLocker) lockFenced(ctx context.Context, name string) (func(context.Context) error, func() (int64, error), error) {
	m := f.c.Mutex(name)
	held, err := m.Lock(ctx)
	if err != nil {
		return nil, nil, err
	}
	// Unlock is bounded by the Client's call timeout, not by a context.
	return func(context.Context) error { return m.Unlock(held) },
		func() (int64, error) { return m.Token(held) }, nil
}
