package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// store is where the leaders write their jobs' results: a fencing
// store, which refuses a write whose term is lower than the highest it
// has seen, so that a leader that was replaced, and does not know it
// yet, cannot write after its successor has. It lives in Redis: the
// highest term in one key, the accepted writes in a list, the refused
// ones in another, each write made by one Lua script, atomic. It is a
// service of its own, reached by the schedulers over a client of its
// own, not through the election's Clients.
type store struct {
	rdb                   *redis.Client
	term, log, refusedLog string // keys
}

// write is one write of a job's result.
type write struct {
	term    int64
	job, by string // the job, and the scheduler that ran it
	highest int64  // the highest term the store had seen when it refused the write; 0 when accepted
}

func newStore(rdb *redis.Client, prefix string) *store {
	return &store{rdb: rdb, term: prefix + ":store:term", log: prefix + ":store:log", refusedLog: prefix + ":store:refused"}
}

// fenced is the store's write: KEYS the highest term, the accepted
// writes, the refused writes; ARGV the write's term, then the entry. It
// returns {1, term} when it took the write, {0, highest} when it refused
// it. Terms are compared as integers of up to 2^53, which fairlock's
// fencing tokens, about the server's clock in ms times 1000, are.
var fenced = redis.NewScript(`
local highest = redis.call('GET', KEYS[1]) or '0'
if tonumber(ARGV[1]) < tonumber(highest) then
  redis.call('RPUSH', KEYS[3], ARGV[2])
  return {0, highest}
end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('RPUSH', KEYS[2], ARGV[2])
return {1, ARGV[1]}
`)

// reset empties the store.
func (s *store) reset(ctx context.Context) error {
	return s.rdb.Del(ctx, s.term, s.log, s.refusedLog).Err()
}

// put writes the result of job, run by scheduler by under term, and
// reports whether the store took it; when it did not, it returns the
// highest term the store had seen.
func (s *store) put(ctx context.Context, term int64, job, by string) (ok bool, highest int64, err error) {
	w := write{term: term, job: job, by: by}
	res, err := fenced.Run(ctx, s.rdb, []string{s.term, s.log, s.refusedLog}, term, w.entry()).Slice()
	if err != nil {
		return false, 0, err
	}
	if len(res) != 2 {
		return false, 0, fmt.Errorf("store: unexpected reply %v", res)
	}
	took, _ := res[0].(int64)
	h, _ := res[1].(string)
	highest, err = strconv.ParseInt(h, 10, 64)
	if err != nil {
		return false, 0, fmt.Errorf("store: unexpected term %q", h)
	}
	return took == 1, highest, nil
}

// highest returns the highest term the store has seen, 0 for none.
func (s *store) highest(ctx context.Context) (int64, error) {
	n, err := s.rdb.Get(ctx, s.term).Int64()
	if err == redis.Nil {
		return 0, nil
	}
	return n, err
}

// accepted returns the writes the store took, in the order it took them.
func (s *store) accepted(ctx context.Context) ([]write, error) {
	return s.list(ctx, s.log)
}

// list reads the writes of a list.
func (s *store) list(ctx context.Context, key string) ([]write, error) {
	entries, err := s.rdb.LRange(ctx, key, 0, -1).Result()
	if err != nil {
		return nil, err
	}
	out := make([]write, 0, len(entries))
	for _, e := range entries {
		w, err := parseWrite(e)
		if err != nil {
			return nil, err
		}
		out = append(out, w)
	}
	return out, nil
}

// entry is the text of a write in the store: "<term> <job> <scheduler>".
func (w write) entry() string { return fmt.Sprintf("%d %s %s", w.term, w.job, w.by) }

func parseWrite(e string) (write, error) {
	f := strings.Fields(e)
	if len(f) != 3 {
		return write{}, fmt.Errorf("store: bad entry %q", e)
	}
	term, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil {
		return write{}, fmt.Errorf("store: bad entry %q", e)
	}
	return write{term: term, job: f[1], by: f[2]}, nil
}
