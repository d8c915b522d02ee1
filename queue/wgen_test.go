package queue_test

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/fairlock/fairlock/lua"
	"github.com/fairlock/fairlock/queue"
)

// The generator of the runs of weighted locks: a RWMutex and a Semaphore
// of one name (weightedLocks: lock 0 and lock 1), each op on one of them.
// Waiting calls ask for random weights and kinds, poll, die or give up;
// tries are fast paths, sometimes of an owner that holds already (HELD);
// holders re-enter at either level (a RWMutex's writer takes read levels
// under its write hold; a reader asking to write is refused), release
// levels of either kind, renew; the Semaphore's capacity changes, and
// some callers believe in another one (PERMITS) or ask for more than it
// (TOOBIG); calls are re-sent under their call ids; and time passes by
// small steps or exactly to (and around) the next lease end, deadline or
// expiry. Every hold has an owner id of its own, as fairlock's holds do.

const (
	rwLock  = 0 // the RWMutex, first in key order
	semLock = 1 // the Semaphore
	permits = 3 // the Semaphore's capacity at the start of a run
)

var (
	readLevel  = lua.Level{Weight: 1}
	writeLevel = lua.Level{Weight: queue.RWCapacity, Excl: true}
)

// wwaiter is one waiting call of the pool.
type wwaiter struct {
	lock         int
	owner, entry string
	lease, ttl   int64
	level        lua.Level
	capacity     int64
	dead         bool // stopped polling; a new call takes its slot
}

// wcall is one concrete call on a weighted lock.
type wcall struct {
	kind         byte // opPoll, opTry, opReenter, opRelease, opRenew, opCancel, opForce, opResize, opAdvance
	lock         int
	id           string
	owner, entry string
	lease, ttl   int64
	mode         string
	level        lua.Level
	capacity     int64  // the caller's: the Semaphore's permits, 0 for the RWMutex
	own          string // opRelease: the releasing Client's tag, or ""
	permits      int64  // opResize
	d            int64  // opAdvance: ms
}

func (c wcall) String() string {
	on := [...]string{"rw", "sem"}[c.lock] + ": "
	switch c.kind {
	case opPoll, opTry, opReenter:
		return fmt.Sprintf("%swacquire(call=%s owner=%s entry=%s lease=%d waiterTTL=%d mode=%s weight=%d excl=%t capacity=%d)",
			on, c.id, c.owner, c.entry, c.lease, c.ttl, c.mode, c.level.Weight, c.level.Excl, c.capacity)
	case opRelease:
		return fmt.Sprintf("%swrelease(call=%s owner=%s own=%s lease=%d excl=%t)", on, c.id, c.owner, c.own, c.lease, c.level.Excl)
	case opRenew:
		return fmt.Sprintf("%swrenew(owner=%s lease=%d)", on, c.owner, c.lease)
	case opCancel:
		return fmt.Sprintf("%swcancel(owner=%s entry=%s)", on, c.owner, c.entry)
	case opForce:
		return fmt.Sprintf("%swforce(owner=%s)", on, c.owner)
	case opResize:
		return fmt.Sprintf("%swresize(permits=%d)", on, c.permits)
	case opAdvance:
		return fmt.Sprintf("advance(%d ms)", c.d)
	}
	return "none"
}

// wkinds are the kinds of ops of weighted runs, by weight.
var wkinds = []byte{
	opPoll, opPoll, opPoll, opPoll, opTry, opTry, opReenter, opReenter,
	opRelease, opRelease, opRelease, opRenew, opCancel, opDie, opForce, opResize,
	opAdvance, opAdvance, opAdvance, opResend,
}

// wworld is the generator's side of a weighted run, as world is of a run
// of Mutexes.
type wworld struct {
	scale      int64
	timeless   bool // time never advances: advance ops are skipped
	seq        int
	waiters    [slots]*wwaiter
	history    []wcall
	lastCancel wcall
	permits    int64 // the capacity of the Semaphore's handle: permits, or the last resize's
}

func newWWorld(scale int64, timeless bool) *wworld {
	return &wworld{scale: scale, timeless: timeless, permits: permits}
}

// next decodes one op of four bytes: the kind, two arguments and the lock.
func (w *wworld) next(src source) (o op, ok bool) {
	var b [4]byte
	for i := range b {
		if b[i], ok = src.next(); !ok {
			return op{}, false
		}
	}
	return op{kind: wkinds[int(b[0])%len(wkinds)], a: b[1], b: b[2], lock: b[3] % 2}, true
}

// id returns a fresh waiter or call id, with a Client's tag and the wake
// version every other time.
func (w *wworld) id() string {
	w.seq++
	if w.seq%2 == 0 {
		return fmt.Sprintf("%016x%08x%s", w.seq, w.seq%3, queue.WakeVersion)
	}
	return fmt.Sprintf("%016x", w.seq)
}

// owner returns a fresh owner id: one hold's, some with a ':' in them.
func (w *wworld) owner() string {
	w.seq++
	if w.seq%5 == 0 {
		return fmt.Sprintf("c:%d", w.seq)
	}
	return fmt.Sprintf("o%d", w.seq)
}

// level picks what a call on lock asks for: a reader or a writer of the
// RWMutex, or a weight of the Semaphore of 1 to its handle's capacity,
// now and then one more.
func (w *wworld) level(lock int, b byte) lua.Level {
	if lock == rwLock {
		if b%3 == 0 {
			return writeLevel
		}
		return readLevel
	}
	if b%16 == 15 {
		return lua.Level{Weight: w.permits + 1}
	}
	return lua.Level{Weight: 1 + int64(b/3)%w.permits}
}

// capacity returns the capacity a call on lock believes in: the
// RWMutex's 0; the Semaphore's stored one (s), or its handle's when none
// is stored; and now and then another one.
func (w *wworld) capacity(lock int, s queue.WeightedState, b byte) int64 {
	switch {
	case lock == rwLock:
		return 0
	case b%8 == 7:
		return 1 + int64(b/8)%5
	case s.Capacity > 0:
		return s.Capacity
	}
	return w.permits
}

// holder picks an owner that holds lock in s, by a; or, when none does
// or a%5 is 0, a fresh one.
func (w *wworld) holder(s queue.WeightedState, a byte) string {
	owners := slices.Sorted(maps.Keys(s.Holders))
	if len(owners) == 0 || a%5 == 0 {
		return w.owner()
	}
	return owners[int(a)%len(owners)]
}

// lease picks a hold's lease by b: never 0 on a real server, where a hold
// of 0 ms lasts 1 and expires during the run.
func (w *wworld) lease(b byte) int64 {
	if !w.timeless && b%5 == 0 {
		return 0
	}
	return leases[int(b)%len(leases)] * w.scale
}

// resolve turns an op into a call against the models' states; ok is false
// when the op does nothing here.
func (w *wworld) resolve(ss []queue.WeightedState, o op) (c wcall, ok bool) {
	c.kind, c.lock = o.kind, int(o.lock)
	s := ss[c.lock]
	switch o.kind {
	case opPoll:
		wt := w.waiters[int(o.a)%slots]
		if wt == nil || wt.dead {
			wt = w.waiter(c.lock, s, o.b)
			w.waiters[int(o.a)%slots] = wt
		}
		c.lock, c.owner, c.entry, c.lease, c.ttl = wt.lock, wt.owner, wt.entry, wt.lease, wt.ttl
		c.level, c.capacity, c.mode, c.id = wt.level, wt.capacity, queue.ModeWait, w.id()
	case opTry, opReenter:
		c.level, c.capacity = w.level(c.lock, o.b), w.capacity(c.lock, s, o.a)
		c.lease, c.ttl = w.lease(o.b/4), waiterTTLs[int(o.b/16)%len(waiterTTLs)]*w.scale
		c.owner, c.mode = w.owner(), queue.ModeTry
		if o.kind == opTry && o.a%4 == 0 || o.kind == opReenter {
			c.owner = w.holder(s, o.a)
		}
		if o.kind == opReenter && o.b%4 != 0 {
			c.mode = queue.ModeReenter
			if o.b%2 == 0 {
				c.lease = 0 // a fixed lease: the re-entry keeps the expiry
			}
		}
		c.id, c.entry = w.id(), queue.WeightedEntry(w.id(), time.Duration(c.lease)*time.Millisecond, c.level.Weight, c.level.Excl, c.owner)
	case opRelease, opRenew:
		c.id, c.owner, c.lease = w.id(), w.holder(s, o.a), leases[int(o.b)%len(leases)]*w.scale
		if o.kind == opRelease && o.b%2 == 0 {
			c.lease = 0
		}
		if o.kind == opRelease {
			// Released by one of the Clients whose tags the waiter ids
			// carry (see id), or by none: a grant to a waiter of the
			// releasing Client is answered, not published.
			c.own = releasers[int(o.b/2)%len(releasers)]
		}
		// The level of the kind the owner holds, mostly.
		h := s.Holders[c.owner]
		c.level = readLevel
		if c.lock == rwLock && (h.Excl > 0) != (o.b%7 == 0) {
			c.level = writeLevel
		}
	case opCancel:
		wt := w.waiters[int(o.a)%slots]
		if wt == nil || wt.dead {
			c = w.lastCancel // a re-sent cancel
			return c, c.kind == opCancel
		}
		w.waiters[int(o.a)%slots] = nil
		c.lock, c.owner, c.entry = wt.lock, wt.owner, wt.entry
		w.lastCancel = c
	case opDie:
		if wt := w.waiters[int(o.a)%slots]; wt != nil {
			wt.dead = true
		}
		return c, false
	case opForce:
		c.owner = w.holder(s, o.a)
	case opResize:
		c.lock, c.permits = semLock, 1+int64(o.b)%5
		w.permits = c.permits
	case opAdvance:
		c.d = w.advance(ss, o)
		return c, !w.timeless
	case opResend:
		if len(w.history) == 0 {
			return c, false
		}
		return w.history[len(w.history)-1-int(o.a)%len(w.history)], true
	}
	return c, true
}

// waiter returns a new waiting call on lock, whose state is s, picked by
// b: a fresh owner and entry, a random level, lease and waiter TTL. A few
// entries are malformed: not a waiter entry at all (pruned at the head),
// or a Mutex's (which leaves the line at the head).
func (w *wworld) waiter(lock int, s queue.WeightedState, b byte) *wwaiter {
	wt := &wwaiter{lock: lock, owner: w.owner(), level: w.level(lock, b), capacity: w.capacity(lock, s, b/2),
		lease: max(w.lease(b/4), 1), ttl: waiterTTLs[int(b/16)%len(waiterTTLs)] * w.scale}
	lease := time.Duration(wt.lease) * time.Millisecond
	wt.entry = queue.WeightedEntry(w.id(), lease, wt.level.Weight, wt.level.Excl, wt.owner)
	switch {
	case b >= 252:
		wt.entry = "not-hex:" + wt.entry
	case b >= 248:
		wt.entry = queue.Entry(w.id(), lease, wt.owner)
	}
	return wt
}

// advance picks how long time passes: a small step, or exactly to one of
// the next instants at which something of either lock ends or expires, or
// 1 ms either side.
func (w *wworld) advance(ss []queue.WeightedState, o op) int64 {
	var at []int64
	for _, s := range ss {
		at = slices.AppendSeq(at, maps.Values(s.Leases))
		at = slices.AppendSeq(at, maps.Values(s.Deadlines))
		for _, r := range s.Receipts {
			at = append(at, r.ExpiresAt)
		}
		for _, t := range []int64{s.HashEnd, s.LeasesEnd, s.TokenEnd} {
			if t != 0 {
				at = append(at, t)
			}
		}
	}
	if o.a%2 == 0 || len(at) == 0 {
		return advances[int(o.b)%len(advances)]
	}
	slices.Sort(at)
	t := at[int(o.b)%len(at)] + int64(o.a/2%3) - 1
	return max(t-ss[0].Now, 0)
}

// done records what a call's answer means for the pool: a waiter that was
// granted or refused returns, and acquires and releases may be re-sent.
func (w *wworld) done(c wcall, granted, refused bool) {
	if c.kind == opPoll && (granted || refused) {
		for i, wt := range w.waiters {
			if wt != nil && wt.entry == c.entry {
				w.waiters[i] = nil
			}
		}
	}
	switch c.kind {
	case opPoll, opTry, opReenter, opRelease:
		w.history = append(w.history, c)
		if len(w.history) > historyLen {
			w.history = w.history[1:]
		}
	}
}
