package queue

import (
	"errors"
	"fmt"
	"maps"
	"regexp"
	"strconv"
	"strings"
)

// WeightedModel is the reference model of a weighted lock's scripts (a
// Semaphore's or a RWMutex's; see "Weighted locks" in lua/lib.lua), as
// Model is of a Mutex's: the same keys, the same steps and the same
// answers, on its Server's clock. Its line, fencing counter and receipts
// are a Mutex's; what differs is the hold: many holders at a time, each
// with a weight, a record in the lock's hash and a lease in its holders
// set, as long as their weights fit in the capacity stored in the hash.
//
// The hash and the holders set expire as keys do in Model: gone once the
// clock reaches their expiry, which the hash keeps in its field 'expires'
// (see keepAlive). A holder whose lease ends stays in both until the next
// script that prunes holders drops it and gives its weight back; a lease
// that ends tells nobody.
//
// A WeightedModel is not safe for concurrent use.
type WeightedModel struct {
	srv *Server
	key string // the hash key P:{N}:<kind>, which wake messages name

	hash      *weightedHash    // the hash P:{N}:<kind>; nil when the key is gone
	leases    map[string]int64 // the zset P:{N}:<kind>:holders: owner -> server time (ms) its lease ends
	leasesEnd int64            // when leases is not empty: server time (ms) at which the zset expires; 0: never
	line                       // P:{N}:<kind>:queue and :deadline, as a Mutex's
	counter                    // P:{N}:<kind>:token, as a Mutex's
	receipts  receipts         // P:{N}:<kind>:call:<id>, by call id

	// What the script that runs has done, for keepAlive (reset by begin).
	need  int64 // the latest lease end or waiter deadline it set; 0: none
	fresh bool  // it added a lease to an empty holders set
}

// weightedHash is the hash of a weighted lock.
type weightedHash struct {
	capacity  int64             // the field 'permits'; 0 when absent
	used      int64             // the field 'used'; 0 when absent (the scripts read it so)
	expires   int64             // the field 'expires': when the hash and the holders set expire; 0 when absent
	holders   map[string]Holder // the fields 'o:<owner id>', by owner id
	expiresAt int64             // server time (ms) at which the key expires; 0: never
}

// Holder is one holder's record in a weighted lock's hash: "<weight>
// <shared levels> <exclusive levels> <token> <since> <entry>".
type Holder struct {
	Weight int64  // RWCapacity while a RWMutex's owner has a write level, else 1; a Semaphore's permits
	Shared int    // read levels (a Semaphore's hold is one)
	Excl   int    // write levels
	Token  int64  // fencing token of the grant
	Since  int64  // server time (ms) of the grant
	Entry  string // waiter entry the hold was granted to
}

// ParseHolder reads a holder's record as the scripts write it.
func ParseHolder(rec string) (Holder, error) {
	var h Holder
	f := strings.SplitN(rec, " ", 6)
	if len(f) != 6 {
		return h, fmt.Errorf("%q is not a holder's record", rec)
	}
	var errs [5]error
	h.Weight, errs[0] = strconv.ParseInt(f[0], 10, 64)
	h.Shared, errs[1] = strconv.Atoi(f[1])
	h.Excl, errs[2] = strconv.Atoi(f[2])
	h.Token, errs[3] = strconv.ParseInt(f[3], 10, 64)
	h.Since, errs[4] = strconv.ParseInt(f[4], 10, 64)
	h.Entry = f[5]
	if err := errors.Join(errs[:]...); err != nil {
		return Holder{}, fmt.Errorf("holder's record %q: %w", rec, err)
	}
	return h, nil
}

// WeightedState is everything the model holds of one weighted lock at one
// instant.
type WeightedState struct {
	Now       int64
	Capacity  int64             // the stored capacity; 0 when none is
	Used      int64             // the weights held, as the hash counts them
	Expires   int64             // the hash's field 'expires'; 0 when absent
	Holders   map[string]Holder // the records of the hash, by owner id
	HashEnd   int64             // server time (ms) at which the hash expires; 0: never, or no hash
	Leases    map[string]int64  // the holders set: owner id -> server time (ms) its lease ends
	LeasesEnd int64             // server time (ms) at which the holders set expires; 0: never, or no set
	Queue     []string          // oldest first
	Deadlines map[string]int64  // entry -> server time (ms)
	Joined    map[string]int64  // entry -> server time (ms) it joined the line
	LastToken int64             // the fencing counter; 0 when there is none
	TokenEnd  int64             // when LastToken > 0: server time (ms) at which the counter expires
	Receipts  map[string]Receipt
}

// NewWeightedModel returns the model of a weighted lock that has never
// been used, alone on a server whose clock reads now (ms); its hash key is
// "". Receipts live for receiptTTL ms, which must be positive.
func NewWeightedModel(now, receiptTTL int64) *WeightedModel {
	return NewServer(now, receiptTTL).Weighted("")
}

// Now returns the model's clock (ms): its server's.
func (w *WeightedModel) Now() int64 { return w.srv.now }

// Advance lets d ms pass on the clock of the lock's server (see
// Server.Advance).
func (w *WeightedModel) Advance(d int64) { w.srv.Advance(d) }

// Drain returns the messages published on the lock's wake channels since
// they were last drained, oldest first, and forgets them.
func (w *WeightedModel) Drain() []string {
	var msgs []string
	for _, m := range w.srv.drain(w.key) {
		msgs = append(msgs, m.Message)
	}
	return msgs
}

// State returns a copy of the model's state.
func (w *WeightedModel) State() WeightedState {
	s := WeightedState{
		Now:       w.srv.now,
		Holders:   map[string]Holder{},
		Leases:    maps.Clone(w.leases),
		LeasesEnd: w.leasesEnd,
		Queue:     append([]string(nil), w.queue...),
		Deadlines: maps.Clone(w.deadlines),
		Joined:    maps.Clone(w.joined),
		LastToken: w.lastToken,
		TokenEnd:  w.tokenEnd,
		Receipts:  maps.Clone(w.receipts),
	}
	if h := w.hash; h != nil {
		s.Capacity, s.Used, s.Expires, s.HashEnd = h.capacity, h.used, h.expires, h.expiresAt
		maps.Copy(s.Holders, h.holders)
	}
	return s
}

// expire drops what has expired by the server's clock: the hash, the
// holders set, the token counter and receipts.
func (w *WeightedModel) expire() {
	now := w.srv.now
	if w.hash != nil && w.hash.expiresAt != 0 && now >= w.hash.expiresAt {
		w.hash = nil
	}
	if w.leasesEnd != 0 && now >= w.leasesEnd {
		w.leases, w.leasesEnd = map[string]int64{}, 0
	}
	w.counter.expire(now)
	w.receipts.expire(now)
}

// prune is lib.lua's prune on the lock's line. No MultiLock ticket waits
// in a weighted lock's line, so an entry shaped as a ticket is dead.
func (w *WeightedModel) prune() (head string, deadline int64, ok bool) {
	return w.line.prune(w.srv.now, func(head string) bool { return !isTicket(head) })
}

// luaWeighted is the pattern of lib.lua's parse_weighted: a waiter id of
// hex digits, the lease, the weight followed by s or x (a writer), and the
// owner id.
var luaWeighted = regexp.MustCompile(`(?s)^[0-9A-Fa-f]+:([0-9]+):([0-9]+)([sx]):(.+)$`)

// parseWeighted returns the owner id, lease, weight and exclusiveness of a
// weighted waiter entry as parse_weighted reads it; ok is false for a
// malformed entry (numbers beyond an int64 are not modelled).
func parseWeighted(entry string) (owner string, lease, weight int64, excl, ok bool) {
	sub := luaWeighted.FindStringSubmatch(entry)
	if sub == nil {
		return "", 0, 0, false, false
	}
	lease, err1 := strconv.ParseInt(sub[1], 10, 64)
	weight, err2 := strconv.ParseInt(sub[2], 10, 64)
	if err1 != nil || err2 != nil {
		return "", 0, 0, false, false
	}
	return sub[4], lease, weight, sub[3] == "x", true
}

// holder returns owner's record, if the hash has one.
func (w *WeightedModel) holder(owner string) (Holder, bool) {
	if w.hash == nil {
		return Holder{}, false
	}
	h, ok := w.hash.holders[owner]
	return h, ok
}

// writeHash returns the hash for a write, made (without an expiry) when
// the key is gone, as HSET and HINCRBY make it.
func (w *WeightedModel) writeHash() *weightedHash {
	if w.hash == nil {
		w.hash = &weightedHash{holders: map[string]Holder{}}
	}
	return w.hash
}

// putHolder is put_holder: owner's record becomes h.
func (w *WeightedModel) putHolder(owner string, h Holder) { w.writeHash().holders[owner] = h }

// capacity returns the stored capacity; ok is false when none is.
func (w *WeightedModel) capacity() (c int64, ok bool) {
	if w.hash == nil || w.hash.capacity == 0 {
		return 0, false
	}
	return w.hash.capacity, true
}

// used returns the weights held, as the hash counts them.
func (w *WeightedModel) used() int64 {
	if w.hash == nil {
		return 0
	}
	return w.hash.used
}

// addUsed is HINCRBY used by n.
func (w *WeightedModel) addUsed(n int64) { w.writeHash().used += n }

// zrem is ZREM holders owner; the set's key goes with its last member.
func (w *WeightedModel) zrem(owner string) {
	delete(w.leases, owner)
	if len(w.leases) == 0 {
		w.leasesEnd = 0
	}
}

// inUse is in_use: whether a lease or a waiter deadline runs past now.
// The hash may outlive both (a renewal never moves its expiry earlier);
// the capacity it holds is then left over, and not in force.
func (w *WeightedModel) inUse() bool {
	for _, end := range w.leases {
		if end > w.srv.now {
			return true
		}
	}
	for _, d := range w.deadlines {
		if d > w.srv.now {
			return true
		}
	}
	return false
}

// begin starts a script's run: it has set no lease or deadline yet.
func (w *WeightedModel) begin() { w.need, w.fresh = 0, false }

// setLease is set_lease: owner's hold lasts ttl ms from now (at least 1).
func (w *WeightedModel) setLease(owner string, ttl int64) {
	if len(w.leases) == 0 {
		w.fresh = true
	}
	end := w.srv.now + max(ttl, 1)
	w.leases[owner] = end
	w.need = max(w.need, end)
}

// dropHolder is drop_holder: owner's hold h ends, and its weight is given
// back.
func (w *WeightedModel) dropHolder(owner string, h Holder) {
	delete(w.hash.holders, owner)
	w.zrem(owner)
	w.addUsed(-h.Weight)
}

// pruneHolders is prune_holders: the holders whose lease ended at or
// before now are dropped (a lease without a record only leaves the set).
func (w *WeightedModel) pruneHolders() {
	for owner, end := range w.leases {
		if end > w.srv.now {
			continue
		}
		if h, ok := w.holder(owner); ok {
			w.dropHolder(owner, h)
		} else {
			w.zrem(owner)
		}
	}
}

// keepAlive is keep_alive: the hash and the holders set go at once when
// no weight is held, no lease and no waiter deadline is left; otherwise
// they expire together at the hash's field 'expires', which moves to
// need + (need - now) when the script set a lease end or deadline, need,
// after it (expires).
func (w *WeightedModel) keepAlive() {
	if w.used() == 0 && len(w.leases) == 0 && len(w.deadlines) == 0 {
		w.hash = nil
		w.leases, w.leasesEnd = map[string]int64{}, 0
		return
	}
	expires := w.expires()
	if w.need > expires {
		w.expireAt(2*w.need - w.srv.now)
		return
	}
	if w.fresh && len(w.leases) > 0 {
		w.leasesEnd = expires
	}
}

// expires returns the hash's field 'expires' (0 when absent).
func (w *WeightedModel) expires() int64 {
	if w.hash == nil {
		return 0
	}
	return w.hash.expires
}

// expireAt is expire_at: the hash and the holders set (if it exists)
// expire at at, which the hash keeps (at is after now).
func (w *WeightedModel) expireAt(at int64) {
	h := w.writeHash()
	h.expires, h.expiresAt = at, at
	if len(w.leases) > 0 {
		w.leasesEnd = at
	}
}

// grant is grant_weighted: owner becomes a holder with weight, as a writer
// when excl, under a fresh token, for ttl ms; entry is the waiter entry it
// was given to. It returns the token.
func (w *WeightedModel) grant(owner, entry string, weight int64, excl bool, ttl int64) int64 {
	token := w.counter.next(w.srv.now, ttl)
	h := Holder{Weight: weight, Shared: 1, Token: token, Since: w.srv.now, Entry: entry}
	if excl {
		h.Shared, h.Excl = 0, 1
	}
	w.putHolder(owner, h)
	w.addUsed(weight)
	w.setLease(owner, ttl)
	return token
}

// grantHeads is grant_heads: waiters are granted from the head of the
// line, oldest first, as long as each one's weight fits beside the
// weights held; the first that does not fit stops it (nobody passes it).
// Each holds for its lease, but no longer than its waiter deadline, and is
// told by a wake message. While the weights held fill the capacity the
// walk ends without reading the line (every weight is at least 1). A head
// whose weight is above the capacity, or
// that fits but whose owner holds already (under another entry: its one
// record cannot keep two holds), leaves the line and is told by its entry
// alone (tell in lib.lua); a head whose entry is not a weighted one
// leaves it untold.
//
// own is the tag of the Client that makes the call, or "": a grant to a
// waiter of that Client publishes nothing, and its wake message is
// returned instead, with those of any other such grants, in order (a
// local hand-off, as handOver's).
func (w *WeightedModel) grantHeads(own string) (wakes []string) {
	capacity, ok := w.capacity()
	if !ok {
		return nil
	}
	now := w.srv.now
	for {
		// Every weight is at least 1: while the weights held fill the
		// capacity, the line is not read.
		if w.used() >= capacity {
			return wakes
		}
		head, deadline, ok := w.prune()
		if !ok {
			return wakes
		}
		owner, lease, weight, excl, ok := parseWeighted(head)
		_, holds := w.holder(owner)
		switch {
		case !ok:
			w.leave(head)
		case weight > capacity:
			w.srv.publish(w.key, head)
			w.leave(head)
		case w.used()+weight > capacity:
			return wakes
		case holds:
			w.srv.publish(w.key, head)
			w.leave(head)
		default:
			w.popHead()
			token := w.grant(owner, head, weight, excl, min(lease, deadline-now))
			msg := wakeMessage(head, token, now)
			if own != "" && TagOf(head) == own {
				wakes = append(wakes, msg)
			} else {
				w.srv.publish(w.key, msg)
			}
		}
	}
}

// hint is weighted_hint: a waiter polls again when the first lease ends
// (which publishes nothing), and at least every third of its waiter TTL.
func (w *WeightedModel) hint(waiterTTL int64) int64 {
	hint := floorDiv(waiterTTL, 3)
	for _, end := range w.leases {
		hint = min(hint, end-w.srv.now+1)
	}
	return max(hint, 1)
}
