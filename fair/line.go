package fair

import (
	"context"
	"time"

	"github.com/fairlock/fairlock/queue"
)

// line is what a Lock call waits in: the line of one lock (a Mutex), or
// the lines of several locks of one server that one ticket waits in at
// once. G is what a grant makes: the hold of the lock, or the holds of
// every lock. The waiting engine (lockIn, take, wait, claimTry, giveUp
// and their helpers) is written once, over a line: how to join, poll,
// wait for a push, claim, give up and give back does not depend on how
// many locks the entry waits for.
type line[G any] interface {
	engine() *Engine
	// name names the line in logs and events: the lock's name; names
	// are the names of a line's several locks, nil for one lock's line.
	name() string
	names() []string
	// lockKind is what the line's lock is, for the log (see log.go).
	lockKind() string
	// entry returns the waiter entry of one Lock call.
	entry(req Request) string
	// wake is the engine's channel on which hand-overs to the line's
	// entries are pushed; sharedWake is a second channel watched for
	// them too ("" for none).
	wake() string
	sharedWake() string
	// pushed returns the grant a pushed hand-over carried, its token and,
	// for a grant of several locks, every lock's tokens; ok is false when
	// the message does not carry the whole grant, which must then be
	// claimed by a poll (see pushedSpan).
	pushed(token int64, tokens []int64) (rep queue.Reply, ok bool)
	// poll runs one acquire call in mode (queue.ModeTry, queue.ModeWait)
	// under entry, detached from ctx.
	poll(ctx context.Context, req Request, entry, mode string) (queue.Reply, error)
	// cancel takes entry out of the line, giving back a grant to it:
	// true when it gave one back.
	cancel(ctx context.Context, owner, entry string) (bool, error)
	// giveBack releases a grant its caller no longer wants;
	// giveBackUnacked does so without waiting for replicas (see
	// Mutex.giveBackUnacked).
	giveBack(ctx context.Context, req Request) error
	giveBackUnacked(ctx context.Context, req Request) error
	// grant turns a grant answered by a call sent at from (rep), known to
	// last span from then, into what the caller gets.
	grant(ctx context.Context, req Request, entry string, rep queue.Reply, from time.Time, span time.Duration, how handing) (G, error)
	// ended records a Lock call that failed, for the engine's audit.
	ended(req Request, entry string)
	// observeEnd reports the end of a Lock call that began at start.
	observeEnd(ctx context.Context, req Request, entry string, start time.Time, g G, err error)
}

// handing is how a grant came: after a wait in line (a hand-over), and
// the hand-over's latency when it was pushed with its time.
type handing struct {
	waited   bool
	handOver time.Duration
}

var _ line[*Hold] = (*Mutex)(nil)

func (l *Mutex) engine() *Engine  { return l.e }
func (l *Mutex) name() string     { return l.keys.Name }
func (l *Mutex) names() []string  { return nil }
func (l *Mutex) lockKind() string { return l.kind }
func (l *Mutex) wake() string     { return l.wakeChannel }

// sharedWake is the lock's shared wake channel, on which clients from
// before tags publish; a weighted lock has none (no such client knows it).
func (l *Mutex) sharedWake() string {
	if l.w != nil {
		return ""
	}
	return l.keys.Wake
}

func (l *Mutex) pushed(token int64, _ []int64) (queue.Reply, bool) {
	return queue.Reply{Granted: true, Token: token, Count: 1}, true
}

func (l *Mutex) grant(ctx context.Context, req Request, entry string, rep queue.Reply, from time.Time, span time.Duration, how handing) (*Hold, error) {
	return l.hold(ctx, req, entry, rep.Token, from, span, how)
}

func (l *Mutex) ended(req Request, entry string) { l.e.audit.ended(l, l, req, entry, nil, "") }
