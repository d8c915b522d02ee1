package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock/fairlock"
)

// shop is the stock, kept in one Redis hash, and the Clients that lock
// its items.
type shop struct {
	key      string // the hash: one field per item
	items    int
	pause    time.Duration
	nolock   bool
	branches []branch

	mu     sync.Mutex
	lowest int64 // guarded by mu: the lowest stock any order read or wrote
}

// branch is what one process of the shop would have: a go-redis client
// and a fairlock Client over it.
type branch struct {
	rdb   *redis.Client
	locks *fairlock.Client
}

// itemName is the name of item i: its field in the stock hash, and the
// name of its lock.
func itemName(i int) string { return "item:" + strconv.Itoa(i) }

// newOrder picks 2 to maxItems distinct items out of items, and 1 to
// maxQty of each.
func newOrder(id, items, maxItems int, maxQty int64) *order {
	n := 2 + rand.IntN(maxItems-1)
	o := &order{id: id, items: rand.Perm(items)[:n], qty: make([]int64, n)}
	slices.Sort(o.items)
	for j := range o.qty {
		o.qty[j] = 1 + rand.Int64N(maxQty)
	}
	return o
}

// open sets every item's stock to stock.
func (s *shop) open(ctx context.Context, stock int64) error {
	rdb := s.branches[0].rdb
	if err := rdb.Del(ctx, s.key).Err(); err != nil {
		return err
	}
	values := make([]any, 0, 2*s.items)
	for i := range s.items {
		values = append(values, itemName(i), stock)
	}
	s.mu.Lock()
	s.lowest = stock
	s.mu.Unlock()
	return rdb.HSet(ctx, s.key, values...).Err()
}

// levels reads the stock of items through rdb.
func (s *shop) levels(ctx context.Context, rdb *redis.Client, items []int) ([]int64, error) {
	fields := make([]string, len(items))
	for j, i := range items {
		fields[j] = itemName(i)
	}
	values, err := rdb.HMGet(ctx, s.key, fields...).Result()
	if err != nil {
		return nil, err
	}
	levels := make([]int64, len(values))
	for j, v := range values {
		str, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("no stock of %s in %s", fields[j], s.key)
		}
		if levels[j], err = strconv.ParseInt(str, 10, 64); err != nil {
			return nil, fmt.Errorf("stock of %s: %w", fields[j], err)
		}
	}
	return levels, nil
}

// stock reads every item's stock.
func (s *shop) stock(ctx context.Context) ([]int64, error) {
	all := make([]int, s.items)
	for i := range all {
		all[i] = i
	}
	return s.levels(ctx, s.branches[0].rdb, all)
}

// lowestSeen returns the lowest stock any order read or wrote.
func (s *shop) lowestSeen() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lowest
}

// saw notes stock levels an order read or wrote.
func (s *shop) saw(levels []int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lowest = min(s.lowest, slices.Min(levels))
}

// reserve fills order o through br, or rejects it when any of its items
// has less stock than it asks for. It reads the stock with HMGET and
// writes the new levels with HSET, which is right only while no other
// order touches the items in between: unless -nolock, it holds a
// MultiLock of them throughout, and records in o when it arrived and
// was served.
func (s *shop) reserve(ctx context.Context, br branch, o *order) (err error) {
	if !s.nolock {
		names := make([]string, len(o.items))
		for j, i := range o.items {
			names[j] = itemName(i)
		}
		items := br.locks.MultiLock(names)
		o.start = time.Now()
		held, lerr := items.Lock(withOrder(ctx, o))
		if lerr != nil {
			return lerr
		}
		defer func() { // an Unlock that fails fails the order, unless it failed already
			if uerr := items.Unlock(held); err == nil {
				err = uerr
			}
		}()
		o.tokens = make([]int64, len(o.items))
		for j, name := range names {
			if o.tokens[j], err = items.Token(held, name); err != nil {
				return err
			}
		}
		// held ends if a lease is lost: the commands below then fail
		// instead of writing without the locks.
		ctx = held
	}
	levels, err := s.levels(ctx, br.rdb, o.items)
	if err != nil {
		return err
	}
	s.saw(levels)
	for j := range levels {
		if levels[j] < o.qty[j] {
			return nil // rejected: all or nothing
		}
	}
	time.Sleep(s.pause) // the work a real order does between its read and its write
	values := make([]any, 0, 2*len(levels))
	for j, i := range o.items {
		levels[j] -= o.qty[j]
		values = append(values, itemName(i), levels[j])
	}
	if err := br.rdb.HSet(ctx, s.key, values...).Err(); err != nil {
		return err
	}
	s.saw(levels)
	o.filled = true
	return nil
}
