package fair

import (
	"context"
	"errors"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock/fairlock/queue"
)

// What one look of the audit finds of a watched lock, which of it is a
// trace of an ended call, and how each trace is cleared (see audit.go).
// The same rules serve every primitive: a Mutex's hold and a weighted
// lock's holder records are read alike (heldBy), every line is a line of
// entries, and the release and cancel scripts are the handle's own.

// heldBy is one owner's hold of a lock as the audit reads it: a Mutex's
// hold, or the owner's record in a weighted lock's hash.
type heldBy struct {
	token, entry string
	shared, excl int // the levels held; a Mutex's count is shared
}

// levels returns the levels of h of the kind that l's calls take: the
// write levels for a RWMutex's writer, else the others.
func (h heldBy) levels(l *Mutex) int {
	if l.level.Excl {
		return h.excl
	}
	return h.shared
}

// sighting is what one look reads of a watched lock: the holds of the
// owners of its ended calls, and which of their entries are in line.
type sighting struct {
	held    map[string]heldBy // by owner id
	waiting map[string]bool   // entries that have a waiter deadline
}

// look reads, in one round trip, what w's lock keeps of w's calls: a
// Mutex's hold (HMGET), or a weighted lock's records of their owners
// (HGET, which its scripts' users may run: HMGET is not among their
// commands), and whether their entries have a waiter deadline (ZSCORE).
func (w watchedLock) look(ctx context.Context, rdb Redis) (sighting, error) {
	k := w.l.keys
	pipe := rdb.Pipeline()
	var hold *redis.SliceCmd
	if w.l.w == nil {
		hold = pipe.HMGet(ctx, k.Lock, "owner", "count", "token", "entry")
	}
	records := map[string]*redis.StringCmd{}
	deadlines := map[string]*redis.FloatCmd{}
	for _, c := range w.calls {
		if w.l.w != nil && records[c.owner] == nil {
			records[c.owner] = pipe.HGet(ctx, k.Lock, "o:"+c.owner)
		}
		if c.entry != "" && deadlines[c.entry] == nil {
			deadlines[c.entry] = pipe.ZScore(ctx, k.Deadline, c.entry)
		}
	}
	_, _ = pipe.Exec(ctx) // each command carries its own outcome

	s := sighting{held: map[string]heldBy{}, waiting: map[string]bool{}}
	if hold != nil {
		v, err := hold.Result()
		if err != nil {
			return s, err
		}
		if owner, _ := v[0].(string); owner != "" {
			h := heldBy{shared: 1} // a hold without a count has one level, as the scripts read it
			count, _ := v[1].(string)
			if n, err := strconv.Atoi(count); err == nil {
				h.shared = n
			}
			h.token, _ = v[2].(string)
			h.entry, _ = v[3].(string)
			s.held[owner] = h
		}
	}
	for owner, cmd := range records {
		rec, err := cmd.Result()
		switch {
		case errors.Is(err, redis.Nil):
			continue
		case err != nil:
			return s, err
		}
		r, err := queue.ParseHolder(rec)
		if err != nil {
			continue // the scripts take a malformed record for none
		}
		s.held[owner] = heldBy{token: strconv.FormatInt(r.Token, 10), entry: r.Entry, shared: r.Shared, excl: r.Excl}
	}
	for entry, cmd := range deadlines {
		switch _, err := cmd.Result(); {
		case err == nil:
			s.waiting[entry] = true
		case !errors.Is(err, redis.Nil):
			return s, err
		}
	}
	return s, nil
}

// clearing is how the audit clears a trace.
type clearing int

const (
	leaveLine     clearing = iota // the call's entry leaves its line
	releaseLevel                  // one level of the owner's is released
	resendLast                    // the hold's last release is sent again
	giveBackGrant                 // the hand-over to the call's entry is given back
)

// trace returns the ended call of w that s shows a trace of, the latest
// first, and how to clear it; false when s shows none. Entries in line
// are cleared first: otherwise a release would hand them the lock.
func (w watchedLock) trace(s sighting) (endedCall, clearing, bool) {
	for i := len(w.calls) - 1; i >= 0; i-- {
		if c := w.calls[i]; c.entry != "" && s.waiting[c.entry] {
			return c, leaveLine, true
		}
	}
	for i := len(w.calls) - 1; i >= 0; i-- {
		c := w.calls[i]
		h, ok := s.held[c.owner]
		switch {
		case !ok || h.levels(c.l) == 0:
		case !c.shared:
			return c, releaseLevel, true
		case c.token != "" && c.token == h.token && c.call != "":
			return c, resendLast, true
		case c.entry != "" && c.entry == h.entry:
			return c, giveBackGrant, true
		}
	}
	return endedCall{}, 0, false
}

// check clears the traces of w's ended calls that w's lock keeps, one
// after another, and stops when it finds none.
func (a *audit) check(w watchedLock) {
	ctx, cancel := a.e.detached(context.Background())
	defer cancel()
	warned := false
	for range auditFixes {
		s, err := w.look(ctx, a.e.rdb)
		if err != nil {
			return // look again at the next tick
		}
		c, how, ok := w.trace(s)
		if !ok {
			return
		}
		if !warned {
			a.e.log.Warn("fairlock: a failover brought back a hold that had ended or a waiter that had left; releasing it",
				w.l.lockAttrs()...)
			warned = true
		}
		left := 0 // levels left after a release
		switch how {
		case leaveLine:
			_, err = c.waited.cancel(ctx, c.owner, c.entry)
		case releaseLevel:
			left, err = c.l.release(ctx, c.owner, 0)
		case resendLast:
			_, err = c.l.releaseCall(ctx, c.call, c.owner, 0, c.receiptTTL)
		case giveBackGrant:
			_, err = c.l.cancel(ctx, c.owner, c.entry)
		}
		if err != nil && !publishRefused(err) && !unacked(err) {
			return
		}
		if how != releaseLevel || left < 0 {
			// It acts once; a release that found no level (a weighted
			// record whose lease is over, not yet dropped) is not made
			// again in this look.
			w.forget(c)
		}
	}
}

// forget drops c from w's copy of the ended calls.
func (w *watchedLock) forget(c endedCall) {
	for i := range w.calls {
		if w.calls[i] == c {
			w.calls = append(w.calls[:i:i], w.calls[i+1:]...)
			return
		}
	}
}
