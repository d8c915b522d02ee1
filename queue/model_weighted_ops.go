package queue

import (
	"fmt"
	"strconv"
	"strings"
)

// The steps of a weighted lock's scripts, each as its script does it:
// wacquire.lua (Acquire), wrelease.lua (Release), wrenew.lua (Renew),
// wcancel.lua (Cancel) and wresize.lua (Resize).

// Reasons for which a weighted lock refuses an acquire.
const (
	RefusePermits = "PERMITS" // a fresh caller whose capacity is not the stored one
	RefuseTooBig  = "TOOBIG"  // a weight above the stored capacity
	RefuseUpgrade = "UPGRADE" // a write re-entry of an owner that only reads
	RefuseHeld    = "HELD"    // a fresh call of an owner that holds already, or came to hold under another entry
)

// Refusal is an acquire that a weighted lock refused: the error reply of
// wacquire.lua, whose text Error returns.
type Refusal struct {
	Reason   string // RefusePermits, RefuseTooBig, RefuseUpgrade or RefuseHeld
	Capacity int64  // for RefusePermits and RefuseTooBig: the stored capacity
}

func (r *Refusal) Error() string {
	switch r.Reason {
	case RefusePermits, RefuseTooBig:
		return fmt.Sprintf("FAIRLOCK %s %d", r.Reason, r.Capacity)
	case RefuseUpgrade:
		return "FAIRLOCK UPGRADE a read hold cannot take the write lock"
	}
	return "FAIRLOCK HELD the owner holds this lock already"
}

// Acquire is wacquire.lua: owner's call with waiter entry entry (made by
// WeightedEntry) takes weight of the lock, as a writer when excl, re-enters
// its hold, or waits in line. lease, waiterTTL, mode and call are as for
// Model.Acquire; capacity is the caller's (a Semaphore handle's permits, 0
// for a RWMutex: RWCapacity). A call the lock refuses answers a *Refusal.
//
// A grant is claimed by a call under the entry it was given to (a
// hand-over, or a reply that was lost), with its token and the owner's
// levels of the kind asked for; a re-entry (mode ModeReenter, of an owner
// that holds) adds a level and leaves a receipt.
func (w *WeightedModel) Acquire(call, owner, entry string, lease, waiterTTL int64, mode string, weight int64, excl bool, capacity int64) (Reply, error) {
	mine := capacity
	if mine == 0 {
		mine = RWCapacity
	}
	now := w.srv.now
	w.begin()
	w.pruneHolders()

	// 1. The owner holds: a claim of the grant made to this very entry, or
	// a re-entry.
	if h, ok := w.holder(owner); ok {
		if h.Entry == entry {
			count := h.Shared
			if excl {
				count = h.Excl
			}
			return w.claim(owner, entry, lease, h.Token, count), nil
		}
		if mode != ModeReenter {
			return Reply{}, &Refusal{Reason: RefuseHeld}
		}
		if r, ok := w.receipts[call]; ok {
			// A receipt that is not an acquire's is never found: call ids
			// are unique.
			token, count, _ := strings.Cut(r.Answer, ":")
			t, _ := strconv.ParseInt(token, 10, 64)
			c, _ := strconv.Atoi(count)
			return Reply{Granted: true, Token: t, Count: c}, nil
		}
		if excl && h.Excl == 0 {
			return Reply{}, &Refusal{Reason: RefuseUpgrade}
		}
		count := &h.Shared
		if excl {
			count = &h.Excl
		}
		*count++
		w.putHolder(owner, h)
		if lease > 0 {
			w.setLease(owner, lease)
		}
		w.keepAlive()
		w.receipts.keep(call, strconv.FormatInt(h.Token, 10)+":"+strconv.Itoa(*count), now, w.srv.receiptTTL)
		return Reply{Granted: true, Token: h.Token, Count: *count}, nil
	}

	// A re-entry whose owner no longer holds must not turn into a fresh
	// grant; the waiters that now fit are granted on the way.
	if mode == ModeReenter {
		w.grantHeads("")
		w.keepAlive()
		return Reply{}, nil
	}

	// 2. The capacity: stored by the first grant that finds none in force
	// (one left over while nothing holds or waits is not; see inUse).
	stored, ok := w.capacity()
	ok = ok && w.inUse()
	_, waiting := w.deadlines[entry]
	switch {
	case ok && weight > stored:
		w.leave(entry)
		w.keepAlive()
		return Reply{}, &Refusal{Reason: RefuseTooBig, Capacity: stored}
	case ok && stored != mine && !waiting:
		return Reply{}, &Refusal{Reason: RefusePermits, Capacity: stored}
	case !ok:
		stored = mine
		w.writeHash().capacity = mine
	}

	// 3. Grant the waiters ahead that now fit (expired holders gave their
	// weight back), which may be this very entry: then claim it. An owner
	// granted under another of its entries holds already.
	w.grantHeads("")
	if h, ok := w.holder(owner); ok {
		if h.Entry == entry {
			return w.claim(owner, entry, lease, h.Token, 1), nil
		}
		w.leave(entry)
		w.keepAlive()
		return Reply{}, &Refusal{Reason: RefuseHeld}
	}

	// 4. A caller nobody live is ahead of is granted when its weight fits.
	// (A lock whose capacity the weights held fill grants nobody, and its
	// line is not read: see grantHeads.)
	if w.used() < stored {
		if head, _, ok := w.prune(); (!ok || head == entry) && w.used()+weight <= stored {
			w.leave(entry)
			token := w.grant(owner, entry, weight, excl, lease)
			w.keepAlive()
			return Reply{Granted: true, Token: token, Count: 1}, nil
		}
	}

	// 5. Wait in line, or in try mode go.
	if mode != ModeWait {
		w.keepAlive()
		return Reply{}, nil
	}
	place := w.join(entry, now, waiterTTL)
	w.need = max(w.need, now+waiterTTL)
	w.keepAlive()
	return Reply{Hint: w.hint(waiterTTL), Joined: place > 0, Position: place, ServerTime: now * 1000}, nil
}

// claim answers a call under the entry owner's hold was granted to: the
// entry leaves the line, the lease is extended unless it is fixed (0),
// and the answer is the grant's token with count levels.
func (w *WeightedModel) claim(owner, entry string, lease, token int64, count int) Reply {
	w.leave(entry)
	if lease > 0 {
		w.setLease(owner, lease)
	}
	w.keepAlive()
	return Reply{Granted: true, Token: token, Count: count}
}

// Release is wrelease.lua made by no Client (see ReleaseFrom): owner gives up one level of its hold, a write
// level when excl, else a read level (a Semaphore's hold). The levels that
// remain get lease ms more (0 keeps the expiry). When the last write level
// goes while read levels remain, the hold is downgraded to a reader's
// weight. The waiters from the head that now fit are granted. It returns
// the owner's levels of that kind left (0: that hold is over), or -1 when
// the owner holds no live level of that kind; a call whose receipt exists
// answers from it.
func (w *WeightedModel) Release(call, owner string, lease int64, excl bool) int {
	return w.ReleaseFrom(call, owner, "", lease, excl).Count
}

// ReleaseFrom is Release made by the Client with tag own (see grantHeads):
// a grant to a waiter of that Client publishes nothing, and the answer
// carries its wake message. A re-sent call answers what the first one
// answered, wake messages included.
func (w *WeightedModel) ReleaseFrom(call, owner, own string, lease int64, excl bool) Released {
	if r, ok := w.receipts[call]; ok {
		return releasedOf(r.Answer) // call ids are unique: a release's receipt
	}
	now := w.srv.now
	w.begin()
	h, holds := w.holder(owner)
	end, leased := w.leases[owner]
	if !holds || !leased || end <= now || excl && h.Excl == 0 || !excl && h.Shared == 0 {
		return Released{Count: -1}
	}
	count := &h.Shared
	if excl {
		count = &h.Excl
	}
	*count--
	if h.Excl == 0 && h.Shared == 0 {
		w.dropHolder(owner, h)
	} else {
		if excl && h.Excl == 0 {
			// A downgrade: the write hold is over, its read levels remain.
			w.addUsed(1 - h.Weight)
			h.Weight = 1
		}
		w.putHolder(owner, h)
		if lease > 0 {
			w.setLease(owner, lease)
		}
	}
	w.pruneHolders()
	wakes := w.grantHeads(own)
	w.keepAlive()
	answer := strconv.Itoa(*count)
	if len(wakes) > 0 {
		answer += " " + strings.Join(wakes, "\n")
	}
	w.receipts.keep(call, answer, now, w.srv.receiptTTL)
	return Released{Count: *count, Wakes: wakes}
}

// Renew is wrenew.lua: owner's hold lasts lease ms from now, if its lease
// has not ended. When the new lease ends after the keys' expiry, that
// moves as keepAlive moves it; it never moves earlier. It returns false
// when the owner's hold is gone.
func (w *WeightedModel) Renew(owner string, lease int64) bool {
	now := w.srv.now
	w.begin()
	end, leased := w.leases[owner]
	if _, holds := w.holder(owner); !leased || end <= now || !holds {
		return false
	}
	if ends := now + max(lease, 1); ends > w.expires() {
		w.expireAt(2*ends - now)
	} else {
		w.leasesEnd = w.expires()
	}
	w.setLease(owner, lease)
	return true
}

// Cancel is wcancel.lua: owner's call with waiter entry entry gives up. The
// entry leaves the line; a hold granted to it meanwhile is dropped, all
// its levels. The waiters from the head that now fit are granted. It
// returns true when a grant to the entry was given back.
func (w *WeightedModel) Cancel(owner, entry string) bool {
	w.begin()
	w.leave(entry)
	released := false
	if h, ok := w.holder(owner); ok && h.Entry == entry {
		w.dropHolder(owner, h)
		released = true
	}
	w.pruneHolders()
	w.grantHeads("")
	w.keepAlive()
	return released
}

// Force is wforce.lua: owner's hold, every level of it, is removed
// whoever holds it, unless its lease has ended, and the former holder's
// Client is told (a revocation: queue.Revoked of the hold's entry on its
// channel). The waiters from the head that now fit are granted. It
// returns true when a hold was removed.
func (w *WeightedModel) Force(owner string) bool {
	now := w.srv.now
	w.begin()
	removed := false
	if h, ok := w.holder(owner); ok {
		if end, leased := w.leases[owner]; leased && end > now {
			w.dropHolder(owner, h)
			w.srv.publish(w.key, Revoked(h.Entry))
			removed = true
		}
	}
	w.pruneHolders()
	w.grantHeads("")
	w.keepAlive()
	return removed
}

// Resize is wresize.lua: a Semaphore's stored capacity becomes permits (1
// to 2^53), and the waiters from the head that now fit are granted.
// Holders above a lowered capacity keep their weights. A waiter above it
// is told by its entry alone: at the head it leaves the line too (see
// grantHeads), and when the capacity was lowered every other waiter in
// line above it is told after that, in the line's order (it leaves when
// its poll is refused). It returns the capacity stored before, or 0 when
// none was in force (see inUse): then nothing is stored.
func (w *WeightedModel) Resize(permits int64) int64 {
	w.begin()
	w.pruneHolders()
	before, ok := w.capacity()
	if !ok || !w.inUse() {
		return 0
	}
	w.hash.capacity = permits
	w.grantHeads("")
	if permits < before {
		for _, entry := range w.queue {
			if _, _, weight, _, ok := parseWeighted(entry); ok && weight > permits {
				w.srv.publish(w.key, entry)
			}
		}
	}
	w.keepAlive()
	return before
}
