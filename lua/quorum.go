package lua

import (
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock/fairlock/internal/errs"
	"github.com/fairlock/fairlock/queue"
)

// The quorum lock's scripts (qtry, qjoin, qcancel, qrelease, qrenew,
// qcommit, qforce) run on each master of the lock; see qlib.lua.

// QState is what a quorum script answers of the caller on one master.
type QState int

const (
	QGone    QState = -1 // the entry's Lock call is buried there: it gave up or released
	QWaiting QState = 0  // the caller does not hold there
	QHeld    QState = 1  // the caller holds there
	QAbove   QState = 2  // qcommit: the hold there has a larger token than the one sent
)

// QReply is the reply of a quorum script on one master. Which fields
// are set depends on the script.
type QReply struct {
	State   QState
	Token   int64 // the hold's token (held), or the larger one (QAbove)
	Count   int   // qtry, qrelease: the owner's levels there
	Ticket  int64 // qtry: C, the largest ticket written there
	Now     int64 // qtry, qjoin: the server's time in µs, with the skew
	Counter int64 // K, the token counter there
	Lower   bool  // qjoin: a smaller key waits there while the caller holds
	Hint    int64 // qjoin: ms until the next join
}

// quorumKeys returns the five keys of a quorum lock on a master, with
// room for one more.
func quorumKeys(k queue.Keys) []string {
	return append(make([]string, 0, 6), k.Lock, k.Queue, k.Deadline, k.Token, k.Ticket)
}

// QTry is qtry.lua: owner's Lock call with entry takes the free lock on
// one master, or re-enters it (mode "try" or "reenter"), under call id
// call. Times in ms, skew in µs. Read its reply with ReadQTry.
func (s *Scripts) QTry(k queue.Keys, call, owner, entry string, lease, waiterTTL int64, mode string, receiptTTL, skew int64) Call {
	return s.qTry.call(append(quorumKeys(k), k.Call(call)), []any{owner, entry, lease, waiterTTL, k.Wake, mode, receiptTTL, skew})
}

// QJoin is qjoin.lua: entry joins the line with ticket, keeps its place,
// or yields its hold there when yield is its token (0: none). Read its
// reply with ReadQJoin.
func (s *Scripts) QJoin(k queue.Keys, owner, entry string, lease, waiterTTL, ticket, yield, skew int64) Call {
	return s.qJoin.call(quorumKeys(k), []any{owner, entry, lease, waiterTTL, k.Wake, ticket, yield, skew})
}

// QCancel is qcancel.lua: entry's Lock call gives up, and is buried for
// tomb ms. Read its reply with ReadFlag.
func (s *Scripts) QCancel(k queue.Keys, entry string, waiterTTL, tomb, skew int64) Call {
	return s.qCancel.call(quorumKeys(k), []any{entry, k.Wake, waiterTTL, tomb, skew})
}

// QRelease is qrelease.lua: owner gives up one level (its last when
// last), under call id call; committed is the hold's committed token (0:
// none). Read its reply with ReadQRelease.
func (s *Scripts) QRelease(k queue.Keys, call, owner, entry string, committed, lease int64, last bool, waiterTTL, tomb, receiptTTL, skew int64) Call {
	l := "0"
	if last {
		l = "1"
	}
	return s.qRelease.call(append(quorumKeys(k), k.Call(call)), []any{owner, entry, committed, lease, l, waiterTTL, k.Wake, tomb, receiptTTL, skew})
}

// QForce is qforce.lua: the hold goes, whoever owns it. Read its reply
// with ReadFlag.
func (s *Scripts) QForce(k queue.Keys, waiterTTL, skew int64) Call {
	return s.qForce.call(quorumKeys(k), []any{k.Wake, waiterTTL, skew})
}

// QRenew is qrenew.lua: owner's hold lasts lease ms more. Read its reply
// with ReadQRenew.
func QRenew(k queue.Keys, owner string, lease int64) Call {
	return qRenewScript.call(quorumKeys(k), []any{owner, lease})
}

// QCommit is qcommit.lua: owner's hold takes token t, and the counter
// rises to it. Read its reply with ReadQCommit.
func (s *Scripts) QCommit(k queue.Keys, owner string, t, lease, waiterTTL, skew int64) Call {
	return s.qCommit.call(quorumKeys(k), []any{owner, t, lease, waiterTTL, skew})
}

// qNumbers reads a flat reply of integers and decimal strings.
func qNumbers(cmd *redis.Cmd, script string, want int) ([]int64, error) {
	v, err := cmd.Slice()
	if err != nil {
		return nil, err
	}
	if len(v) != want {
		return nil, fmt.Errorf("%w: %s answered %v", errs.ErrUnexpectedReply, script, v)
	}
	n := make([]int64, len(v))
	for i, x := range v {
		switch x := x.(type) {
		case int64:
			n[i] = x
		case string:
			if n[i], err = strconv.ParseInt(x, 10, 64); err != nil {
				return nil, fmt.Errorf("%w: %s answered %v", errs.ErrUnexpectedReply, script, v)
			}
		default:
			return nil, fmt.Errorf("%w: %s answered %v", errs.ErrUnexpectedReply, script, v)
		}
	}
	if n[0] < -1 || n[0] > 2 {
		return nil, fmt.Errorf("%w: %s answered %v", errs.ErrUnexpectedReply, script, v)
	}
	return n, nil
}

// ReadQTry reads the reply of a QTry call.
func ReadQTry(cmd *redis.Cmd) (QReply, error) {
	n, err := qNumbers(cmd, "qtry", 6)
	if err != nil {
		return QReply{}, err
	}
	return QReply{State: QState(n[0]), Token: n[1], Count: int(n[2]), Ticket: n[3], Now: n[4], Counter: n[5]}, nil
}

// ReadQJoin reads the reply of a QJoin call.
func ReadQJoin(cmd *redis.Cmd) (QReply, error) {
	n, err := qNumbers(cmd, "qjoin", 6)
	if err != nil {
		return QReply{}, err
	}
	return QReply{State: QState(n[0]), Token: n[1], Lower: n[2] == 1, Hint: n[3], Counter: n[4], Now: n[5]}, nil
}

// ReadQRelease reads the reply of a QRelease call: State QHeld with the
// levels the owner keeps, or QWaiting when it did not hold there.
func ReadQRelease(cmd *redis.Cmd) (QReply, error) {
	n, err := qNumbers(cmd, "qrelease", 2)
	if err != nil {
		return QReply{}, err
	}
	return QReply{State: QState(n[0]), Count: int(n[1])}, nil
}

// ReadQRenew reads the reply of a QRenew call: QHeld with the hold's
// token, or QWaiting with the counter.
func ReadQRenew(cmd *redis.Cmd) (QReply, error) {
	n, err := qNumbers(cmd, "qrenew", 2)
	if err != nil {
		return QReply{}, err
	}
	if n[0] == 1 {
		return QReply{State: QHeld, Token: n[1]}, nil
	}
	return QReply{State: QWaiting, Counter: n[1]}, nil
}

// ReadQCommit reads the reply of a QCommit call: QHeld with the token
// committed, QAbove with the hold's larger token, or QWaiting with the
// counter.
func ReadQCommit(cmd *redis.Cmd) (QReply, error) {
	n, err := qNumbers(cmd, "qcommit", 2)
	if err != nil {
		return QReply{}, err
	}
	switch n[0] {
	case 1, 2:
		return QReply{State: QState(n[0]), Token: n[1]}, nil
	}
	return QReply{State: QWaiting, Counter: n[1]}, nil
}
