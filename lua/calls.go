package lua

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock/fairlock/internal/errs"
	"github.com/fairlock/fairlock/queue"
)

// Call is one run of an operation: its script, and its function when the
// operation is in the set's library, with its KEYS and ARGV, as the
// script's header describes them. The bindings (the methods of Scripts,
// Renew and Version) build each operation's Call; the caller sends it
// (with a Runner, or Send on a pipeline of its own) and reads the reply
// with the operation's reader.
type Call struct {
	Script *redis.Script
	// Function is the call's function in Library, or "" when the
	// operation is not in a library (it is sent as a script only).
	Function string
	Library  *Library
	Keys     []string
	Args     []any
}

// Run sends the call with EVALSHA, and again with EVAL when the server
// lacks the script (first use, SCRIPT FLUSH, a restart). It never calls
// the library's function: a Runner does.
func (c Call) Run(ctx context.Context, rdb redis.Scripter) *redis.Cmd {
	return c.Script.Run(ctx, rdb, c.Keys, c.Args...)
}

// Send sends the call, or queues it on a pipeline, the way via says.
func (c Call) Send(ctx context.Context, rdb Sender, via Via) *redis.Cmd {
	switch via {
	case ByFunction:
		return rdb.FCall(ctx, c.Function, c.Keys, c.Args...)
	case BySource:
		return c.Script.Eval(ctx, rdb, c.Keys, c.Args...)
	}
	return c.Script.EvalSha(ctx, rdb, c.Keys, c.Args...)
}

// lockKeys returns the four keys every script but renew receives, in
// script order (see lib.lua), with room for one more.
func lockKeys(k queue.Keys) []string {
	return append(make([]string, 0, 5), k.Lock, k.Queue, k.Deadline, k.Token)
}

// withReceipt returns lockKeys and the key of the receipt of call.
func withReceipt(k queue.Keys, call string) []string {
	return append(lockKeys(k), k.Call(call))
}

// Acquire is acquire.lua, the binding of queue's Model.Acquire: owner's
// Lock call with waiter entry entry takes the lock, re-enters it, or waits
// in line for it, under call id call. Times are in ms; a re-entry's
// receipt is kept for receiptTTL. Read its reply with ReadAcquire.
func (s *Scripts) Acquire(k queue.Keys, call, owner, entry string, lease, waiterTTL int64, mode string, receiptTTL int64) Call {
	return s.acquire.call(withReceipt(k, call), []any{owner, entry, lease, waiterTTL, mode, k.Wake, receiptTTL})
}

// WithValue returns the call with an election candidate's value as one
// more argument (see is_candidate in lib.lua), or as it is for "": the
// quorum scripts' tries and joins (QTry, QJoin) take it last.
func (c Call) WithValue(value string) Call {
	if value != "" {
		c.Args = append(c.Args[:len(c.Args):len(c.Args)], value)
	}
	return c
}

// Campaign is Acquire for an election's candidate (an entry made by
// queue.CandidateEntry) that campaigns with value: the value waits
// beside the line and becomes the leadership's when the entry is granted
// (see is_candidate in lib.lua). Read its reply with ReadAcquire.
func (s *Scripts) Campaign(k queue.Keys, call, owner, entry string, lease, waiterTTL int64, mode string, receiptTTL int64, value string) Call {
	return s.acquire.call(withReceipt(k, call), []any{owner, entry, lease, waiterTTL, mode, k.Wake, receiptTTL, value})
}

// Proclaim is proclaim.lua: the leadership of owner, granted to the
// candidate entry entry, takes value as its value. Read its reply with
// ReadFlag: false when the leadership is not (or no longer) theirs.
func (s *Scripts) Proclaim(k queue.Keys, owner, entry, value string) Call {
	return s.proclaim.call(lockKeys(k), []any{owner, entry, value})
}

// QProclaim is proclaim.lua on one master of a quorum (k a quorum
// election's keys, see queue.QuorumElection), under the sequence number
// seq of the leader's Proclaim calls. Read its reply with ReadFlag.
func (s *Scripts) QProclaim(k queue.Keys, owner, entry, value string, seq int64) Call {
	return s.proclaim.call(lockKeys(k), []any{owner, entry, value, seq})
}

// Release is release.lua, the binding of Model.ReleaseFrom: owner gives
// up one level of its hold under call id call, whose receipt is kept for
// receiptTTL ms; own is the tag of the releasing Client ("" for none), to
// whose own waiter a hand-over is not published but answered. Read its
// reply with ReadRelease.
func (s *Scripts) Release(k queue.Keys, call, owner, own string, lease, receiptTTL int64) Call {
	return s.release.call(withReceipt(k, call), []any{owner, lease, k.Wake, receiptTTL, own})
}

// Releasing is one hold's part of a ReleaseAll: owner gives up one level
// of its hold of the lock of Keys under call id Call, whose receipt is
// kept for ReceiptTTL ms; Lease is the lease of the levels that remain
// (0 keeps the expiry).
type Releasing struct {
	Keys       queue.Keys
	Call       string
	Owner      string
	Lease      int64
	ReceiptTTL int64
}

// ReleaseAll is release.lua for several holds of one server at once (at
// least two), the binding of Server.ReleaseAll: each releases one level
// as Release does, every hold that ends is ended before any lock is
// handed over, and each keeps its own receipt, so that one sent again
// alone with Release under its call id answers what it answered here.
// own is the tag of the releasing Client. Read its reply with
// ReadReleaseAll.
func (s *Scripts) ReleaseAll(rs []Releasing, own string) Call {
	keys := make([]string, 0, 5*len(rs))
	args := make([]any, 0, 5*len(rs))
	for _, r := range rs {
		keys = append(keys, withReceipt(r.Keys, r.Call)...)
		args = append(args, r.Owner, r.Lease, r.Keys.Wake, r.ReceiptTTL, own)
	}
	return s.release.call(keys, args)
}

// Cancel is cancel.lua, the binding of Model.Cancel: owner's Lock call
// with waiter entry entry gives up. Read its reply with ReadFlag: true
// when a level handed to entry was given back.
func (s *Scripts) Cancel(k queue.Keys, owner, entry string) Call {
	return s.cancel.call(lockKeys(k), []any{owner, entry, k.Wake})
}

// MultiAcquire is multiacquire.lua: owner's MultiLock call with the
// ticket entry takes every lock of ks (at least two, of one server, in
// key order) at once, or waits in all their lines at once (mode ModeTry
// or ModeWait). Times are in ms. Read its reply with ReadMultiAcquire.
func (s *Scripts) MultiAcquire(ks []queue.Keys, owner, entry string, lease, waiterTTL int64, mode string) Call {
	return s.multiAcquire.call(everyLock(ks), []any{owner, entry, lease, waiterTTL, mode})
}

// CancelTicket is cancel.lua for a MultiLock's ticket: owner's call with
// the ticket entry gives up the lines of every lock of ks, and gives
// back any lock handed to it. Read its reply with ReadFlag.
func (s *Scripts) CancelTicket(ks []queue.Keys, owner, entry string) Call {
	return s.cancel.call(everyLock(ks), []any{owner, entry, ks[0].Wake})
}

// everyLock returns the four keys of each lock of ks, one lock after
// another.
func everyLock(ks []queue.Keys) []string {
	keys := make([]string, 0, 4*len(ks))
	for _, k := range ks {
		keys = append(keys, k.Lock, k.Queue, k.Deadline, k.Token)
	}
	return keys
}

// ForceUnlock is forceunlock.lua, the binding of Model.ForceUnlock. Read
// its reply with ReadFlag: true when a hold was removed.
func (s *Scripts) ForceUnlock(k queue.Keys) Call {
	return s.forceUnlock.call(lockKeys(k), []any{k.Wake})
}

// Renew is renew.lua, the binding of Model.Renew: owner's hold lasts
// lease ms more. It publishes nothing, so it is the same script in both
// sets. Read its reply with ReadFlag: false when owner holds no more.
func Renew(k queue.Keys, owner string, lease int64) Call {
	return renewScript.call([]string{k.Lock}, []any{owner, lease})
}

// ReadAcquire reads the reply of an Acquire call: {1, token, count} is a
// grant, {0, hint, position} is none (position: the entry's place in
// line when the call appended it, else 0), followed in wait mode by the
// server's time in µs.
func ReadAcquire(cmd *redis.Cmd) (queue.Reply, error) {
	return readTaking(cmd, "acquire", func(n []int64) (queue.Reply, bool) {
		if len(n) != 3 {
			return queue.Reply{}, false
		}
		return queue.Reply{Granted: true, Token: n[1], Count: int(n[2])}, true
	})
}

// ReadMultiAcquire reads the reply of a MultiAcquire call of n locks:
// {1, token of each} is a grant, {0, hint, position[, server time]} is
// none, as ReadAcquire reads it.
func ReadMultiAcquire(cmd *redis.Cmd, n int) (queue.Reply, error) {
	return readTaking(cmd, "multiacquire", func(t []int64) (queue.Reply, bool) {
		if len(t) != n+1 {
			return queue.Reply{}, false
		}
		return queue.Reply{Granted: true, Token: t[1], Count: 1, Tokens: t[1:]}, true
	})
}

// readTaking reads the reply of a script that takes locks: a grant, which
// starts with 1 and which granted reads (false: not its shape; n[1] is
// there), or
// {0, hint, position[, server time]}, none. script names the script in
// the error of a reply of neither shape.
func readTaking(cmd *redis.Cmd, script string, granted func([]int64) (queue.Reply, bool)) (queue.Reply, error) {
	v, err := cmd.Slice()
	if err != nil {
		return queue.Reply{}, err
	}
	n, err := ints(v)
	switch {
	case err != nil:
		return queue.Reply{}, err
	case len(n) >= 2 && n[0] == 1:
		if rep, ok := granted(n); ok {
			return rep, nil
		}
	case len(n) == 3 && n[0] == 0:
		return queue.Reply{Hint: n[1], Joined: n[2] >= 1, Position: int(n[2])}, nil
	case len(n) == 4 && n[0] == 0:
		return queue.Reply{Hint: n[1], Joined: n[2] >= 1, Position: int(n[2]), ServerTime: n[3]}, nil
	}
	return queue.Reply{}, fmt.Errorf("%w: %s answered %v", errs.ErrUnexpectedReply, script, v)
}

// ReadRelease reads the reply of a Release or WRelease call: the owner's
// remaining levels, or -1 when it did not hold the lock (0 with an
// error); or {count, wake message...} for grants to waiters of the
// releasing Client (a Mutex's release: {0, wake message}).
func ReadRelease(cmd *redis.Cmd) (queue.Released, error) {
	v, err := cmd.Result()
	if err != nil {
		return queue.Released{}, err
	}
	switch v := v.(type) {
	case int64:
		return queue.Released{Count: int(v)}, nil
	case []any:
		if n, ok := wakesOf(v); ok {
			return n, nil
		}
	}
	return queue.Released{}, fmt.Errorf("%w: release answered %v", errs.ErrUnexpectedReply, v)
}

// ReadReleaseAll reads the reply of a ReleaseAll call of n holds: each
// hold's answer, as ReadRelease reads it, in the order of the call.
func ReadReleaseAll(cmd *redis.Cmd, n int) ([]queue.Released, error) {
	v, err := cmd.Result()
	if err != nil {
		return nil, err
	}
	vs, ok := v.([]any)
	if !ok || len(vs) != n {
		return nil, fmt.Errorf("%w: a release of %d holds answered %v", errs.ErrUnexpectedReply, n, v)
	}
	out := make([]queue.Released, n)
	for i, v := range vs {
		one := redis.NewCmd(context.Background())
		one.SetVal(v)
		if out[i], err = ReadRelease(one); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// wakesOf reads {count, wake message...}, at least one message.
func wakesOf(v []any) (queue.Released, bool) {
	if len(v) < 2 {
		return queue.Released{}, false
	}
	n, ok := v[0].(int64)
	if !ok || n < 0 {
		return queue.Released{}, false
	}
	wakes := make([]string, len(v)-1)
	for i, x := range v[1:] {
		wake, ok := x.(string)
		if !ok || wake == "" {
			return queue.Released{}, false
		}
		wakes[i] = wake
	}
	return queue.Released{Count: int(n), Wakes: wakes}, true
}

// ReadFlag reads the reply of a Cancel, ForceUnlock or Renew call: 1 is
// true, 0 false.
func ReadFlag(cmd *redis.Cmd) (bool, error) {
	n, err := cmd.Int64()
	if err == nil && n != 0 && n != 1 {
		return false, fmt.Errorf("%w: %d", errs.ErrUnexpectedReply, n)
	}
	return n == 1, err
}

// ints converts a script's flat array of integers.
func ints(v []any) ([]int64, error) {
	out := make([]int64, len(v))
	for i, x := range v {
		switch x := x.(type) {
		case int64:
			out[i] = x
		case string:
			n, err := strconv.ParseInt(x, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("%w: %q", errs.ErrUnexpectedReply, x)
			}
			out[i] = n
		default:
			return nil, fmt.Errorf("%w: %T", errs.ErrUnexpectedReply, x)
		}
	}
	return out, nil
}

// weightedKeys returns the five keys every weighted lock's script
// receives, in script order (see "Weighted locks" in lib.lua), with room
// for one more.
func weightedKeys(k queue.Keys) []string {
	return append(make([]string, 0, 6), k.Lock, k.Queue, k.Deadline, k.Token, k.Holders)
}

// Level is what one call of a weighted lock asks for: a weight, and
// whether it is a RWMutex's writer (an exclusive level).
type Level struct {
	Weight int64
	Excl   bool
}

func (v Level) kind() string {
	if v.Excl {
		return "x"
	}
	return "s"
}

// WAcquire is wacquire.lua: owner's call with waiter entry entry takes
// the weighted lock of k at level v, re-enters its hold, or waits in line,
// under call id call. capacity is the caller's (a Semaphore handle's
// permits; 0 for a RWMutex). Times are in ms. Read its reply with
// ReadAcquire, and its refusals with WeightedRefusal.
func (s *Scripts) WAcquire(k queue.Keys, call, owner, entry string, lease, waiterTTL int64, mode string, receiptTTL int64, v Level, capacity int64) Call {
	return s.wAcquire.call(append(weightedKeys(k), k.Call(call)), []any{owner, entry, lease, waiterTTL, mode, k.Wake, receiptTTL, v.Weight, v.kind(), capacity})
}

// WRelease is wrelease.lua: owner gives up one level of kind v.Excl of its
// hold, under call id call, whose receipt is kept for receiptTTL ms; own
// is the tag of the releasing Client ("" for none), to whose own waiters
// a grant is not published but answered. Read its reply with
// ReadRelease.
func (s *Scripts) WRelease(k queue.Keys, call, owner, own string, lease, receiptTTL int64, v Level) Call {
	return s.wRelease.call(append(weightedKeys(k), k.Call(call)), []any{owner, lease, k.Wake, receiptTTL, v.kind(), own})
}

// WCancel is wcancel.lua: owner's call with waiter entry entry gives up.
// Read its reply with ReadFlag: true when a grant to entry was given back.
func (s *Scripts) WCancel(k queue.Keys, owner, entry string) Call {
	return s.wCancel.call(weightedKeys(k), []any{owner, entry, k.Wake})
}

// WForce is wforce.lua: the hold of owner, every level of it, is removed
// whoever holds it, and the waiters that now fit are granted. Read its
// reply with ReadFlag: true when a hold was removed.
func (s *Scripts) WForce(k queue.Keys, owner string) Call {
	return s.wForce.call(weightedKeys(k), []any{k.Wake, owner})
}

// WResize is wresize.lua: the Semaphore of k gets capacity permits. Read
// its reply with ReadCount: the capacity stored before, 0 when none was.
func (s *Scripts) WResize(k queue.Keys, permits int64) Call {
	return s.wResize.call(weightedKeys(k), []any{permits, k.Wake})
}

// WRenew is wrenew.lua: owner's weighted hold lasts lease ms more. Read
// its reply with ReadFlag.
func (s *Scripts) WRenew(k queue.Keys, owner string, lease int64) Call {
	return s.wRenew.call(weightedKeys(k), []any{owner, lease})
}

// ReadCount reads a script's integer reply.
func ReadCount(cmd *redis.Cmd) (int64, error) { return cmd.Int64() }

// WeightedRefusal turns an error reply by which wacquire.lua refused a
// call into its Go error: for "FAIRLOCK PERMITS n" an error wrapping
// errs.ErrPermits, for "FAIRLOCK TOOBIG n" one wrapping
// errs.ErrInvalidOption, for "FAIRLOCK UPGRADE" and "FAIRLOCK HELD" one
// wrapping errs.ErrWouldDeadlock; each keeps the server's reply wrapped
// too. Any other error is returned as it is.
func WeightedRefusal(err error) error {
	var re redis.Error
	if !errors.As(err, &re) {
		return err
	}
	msg := re.Error()
	var n int64
	switch {
	case scan(msg, "FAIRLOCK PERMITS %d", &n):
		return fmt.Errorf("%w: the semaphore's capacity in Redis is %d permits, not this handle's (SetPermits changes it): %w", errs.ErrPermits, n, err)
	case scan(msg, "FAIRLOCK TOOBIG %d", &n):
		return fmt.Errorf("%w: weight above the semaphore's capacity, lowered to %d permits: %w", errs.ErrInvalidOption, n, err)
	case strings.HasPrefix(msg, "FAIRLOCK UPGRADE"):
		return fmt.Errorf("%w: a read hold cannot take the write lock (it would wait for itself): %w", errs.ErrWouldDeadlock, err)
	case strings.HasPrefix(msg, "FAIRLOCK HELD"):
		return fmt.Errorf("%w: the owner holds this lock already: %w", errs.ErrWouldDeadlock, err)
	}
	return err
}

// scan reports whether msg is format with one integer, read into n.
func scan(msg, format string, n *int64) bool {
	c, err := fmt.Sscanf(msg, format, n)
	return err == nil && c == 1
}
