package fair

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"

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

// watchedLock is a lock with recent ended calls, oldest first.
type watchedLock struct {
	l      *Mutex // a handle of the lock: its keys
	calls  []*endedCall
	warned bool // the look logged that it clears traces of this lock
}

// byLock groups calls, oldest first, by their lock: each lock's calls
// oldest first.
func byLock(calls []*endedCall) []watchedLock {
	slices.SortStableFunc(calls, func(a, b *endedCall) int { return strings.Compare(a.l.keys.Lock, b.l.keys.Lock) })
	var locks []watchedLock
	for i := 0; i < len(calls); {
		j := i + 1
		for j < len(calls) && calls[j].l.keys.Lock == calls[i].l.keys.Lock {
			j++
		}
		locks = append(locks, watchedLock{l: calls[i].l, calls: calls[i:j:j]})
		i = j
	}
	return locks
}

// sighting is what one look reads of a watched lock, call by call: its
// slices are in the order of the lock's calls.
type sighting struct {
	held    []heldBy // what the call's owner holds; the zero heldBy: nothing
	waiting []bool   // the call's entry has a waiter deadline
}

// reading is the commands of one watched lock in a look's pipeline, its
// slices in the order of the lock's calls.
type reading struct {
	hold      *redis.SliceCmd    // a Mutex's hold; nil for a weighted lock
	records   []*redis.StringCmd // a weighted lock's record of the call's owner
	deadlines []*redis.FloatCmd  // the call's entry's deadline; nil for none
}

// readAll reads, in one pipeline, what each lock of locks keeps of its
// calls (see queue): a cluster client sends it as one pipeline per
// master. Each sighting comes with its own error. The slices of every
// reading and sighting are cut from a few arrays made once per look.
func readAll(ctx context.Context, rdb Redis, locks []watchedLock) ([]sighting, []error) {
	calls := 0
	for _, w := range locks {
		calls += len(w.calls)
	}
	var (
		records   = make([]*redis.StringCmd, calls)
		deadlines = make([]*redis.FloatCmd, calls)
		held      = make([]heldBy, calls)
		waiting   = make([]bool, calls)
	)
	pipe := rdb.Pipeline()
	rs := make([]reading, len(locks))
	sights, errs := make([]sighting, len(locks)), make([]error, len(locks))
	at := 0
	for i, w := range locks {
		n := len(w.calls)
		rs[i] = reading{records: records[at : at+n : at+n], deadlines: deadlines[at : at+n : at+n]}
		sights[i] = sighting{held: held[at : at+n : at+n], waiting: waiting[at : at+n : at+n]}
		w.queue(ctx, pipe, &rs[i])
		at += n
	}
	_, _ = pipe.Exec(ctx) // each command carries its own outcome
	for i, w := range locks {
		errs[i] = rs[i].read(w, sights[i])
	}
	return sights, errs
}

// queue adds to pipe, into r, the reads of what w's lock keeps of w's
// calls: a Mutex's hold (HMGET), or a weighted lock's record of each
// call's owner (HGET, which its scripts' users may run: HMGET is not
// among their commands), and whether each call's entry has a waiter
// deadline (ZSCORE). That is at most two reads per call.
func (w watchedLock) queue(ctx context.Context, pipe redis.Pipeliner, r *reading) {
	k := w.l.keys
	if w.l.w == nil {
		r.hold = pipe.HMGet(ctx, k.Lock, "owner", "count", "token", "entry")
	}
	for i, c := range w.calls {
		if w.l.w != nil {
			r.records[i] = pipe.HGet(ctx, k.Lock, "o:"+c.owner)
		}
		if c.entry != "" {
			r.deadlines[i] = pipe.ZScore(ctx, k.Deadline, c.entry)
		}
	}
}

// read fills s, of w, with what r read, once its pipeline ran.
func (r reading) read(w watchedLock, s sighting) error {
	if r.hold != nil {
		v, err := r.hold.Result()
		if err != nil {
			return err
		}
		if owner, _ := v[0].(string); owner != "" {
			h := heldBy{shared: 1} // a hold without a count has one level, as the scripts read it
			count, _ := v[1].(string)
			if n, err := strconv.Atoi(count); err == nil {
				h.shared = n
			}
			h.token, _ = v[2].(string)
			h.entry, _ = v[3].(string)
			for i, c := range w.calls {
				if c.owner == owner {
					s.held[i] = h
				}
			}
		}
	}
	for i, cmd := range r.records {
		if cmd == nil {
			continue
		}
		rec, err := cmd.Result()
		switch {
		case errors.Is(err, redis.Nil):
			continue
		case err != nil:
			return err
		}
		h, err := queue.ParseHolder(rec)
		if err != nil {
			continue // the scripts take a malformed record for none
		}
		s.held[i] = heldBy{token: strconv.FormatInt(h.Token, 10), entry: h.Entry, shared: h.Shared, excl: h.Excl}
	}
	for i, cmd := range r.deadlines {
		if cmd == nil {
			continue
		}
		switch _, err := cmd.Result(); {
		case err == nil:
			s.waiting[i] = true
		case !errors.Is(err, redis.Nil):
			return err
		}
	}
	return nil
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
func (w watchedLock) trace(s sighting) (*endedCall, clearing, bool) {
	for i := len(w.calls) - 1; i >= 0; i-- {
		if c := w.calls[i]; s.waiting[i] {
			return c, leaveLine, true
		}
	}
	for i := len(w.calls) - 1; i >= 0; i-- {
		c, h := w.calls[i], s.held[i]
		switch {
		case h.levels(c.l) == 0:
		case !c.shared:
			return c, releaseLevel, true
		case c.token != "" && c.token == h.token && c.call != "":
			return c, resendLast, true
		case c.entry != "" && c.entry == h.entry:
			return c, giveBackGrant, true
		}
	}
	return nil, 0, false
}

// look clears the traces of calls that their locks keep: it reads every
// lock of calls in one pipeline, clears one trace of each lock that shows
// one, and reads those locks again, for at most auditFixes rounds. A lock
// whose read or clearing fails is left for the next look.
func (a *audit) look(calls []*endedCall) {
	locks := byLock(calls)
	for range auditFixes {
		ctx, cancel := a.e.detached(context.Background())
		sights, errs := readAll(ctx, a.e.rdb, locks)
		cancel()
		again := locks[:0]
		for i := range locks {
			if errs[i] == nil && a.clear(&locks[i], sights[i]) {
				again = append(again, locks[i])
			}
		}
		if len(again) == 0 {
			return
		}
		locks = again
	}
}

// clear clears the trace of one of w's ended calls that s shows, the
// latest first, and reports whether it did: w's lock is to be read again.
func (a *audit) clear(w *watchedLock, s sighting) bool {
	c, how, ok := w.trace(s)
	if !ok {
		return false
	}
	if !w.warned {
		a.e.log.Warn("fairlock: a failover brought back a hold that had ended or a waiter that had left; releasing it",
			w.l.lockAttrs()...)
		w.warned = true
	}
	ctx, cancel := a.e.detached(context.Background())
	defer cancel()
	left, err := 0, error(nil) // levels left after a release
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
		return false
	}
	if how != releaseLevel || left < 0 {
		// It acts once; a release that found no level (a weighted
		// record whose lease is over, not yet dropped) is not made
		// again in this look.
		w.forget(c)
	}
	return true
}

// forget drops c from w's copy of the ended calls.
func (w *watchedLock) forget(c *endedCall) {
	for i := range w.calls {
		if w.calls[i] == c {
			w.calls = append(w.calls[:i:i], w.calls[i+1:]...)
			return
		}
	}
}
