package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// The redlock workload runs one lock on several independent Redis
// masters, started for the run, each lock held while a majority of the
// masters hold it. redsync is RedLock itself: redsync.New with one pool
// per master, whose Lock sets the key on every master at once and holds
// the lock when a majority set it in time, and otherwise removes what it
// set, sleeps its retry delay and tries again. fairlock has
// NewQuorum, a quorum lock that keeps its line on the masters and serves
// it in order, and fencing tokens that rise from grant to grant, which
// every hold reads (fencer). redislock has no quorum lock and does not run
// it.

// redlockMasters is how many independent masters the redlock workload
// runs on: the fewest that outlive the loss of one.
const redlockMasters = 3

// A fencer is a locker whose holds carry fencing tokens: numbers that rise
// from one grant of a name to the next, for the holder to pass to what
// the lock protects, so that a holder that lost the lock can be turned
// away.
type fencer interface {
	// lockFenced is lock, and also returns the function that reads the
	// hold's token, which is called while the lock is held.
	lockFenced(ctx context.Context, name string) (unlock func(context.Context) error, token func() (int64, error), err error)
}

// quorumMasters returns how many masters the selected workloads need:
// the most any of them that a library of libs runs in asks for, or 0.
func quorumMasters(sel []workload, libs []library) int {
	n := 0
	for _, w := range sel {
		for _, lib := range libs {
			if w.masters > 0 && lib.runsIn(w) {
				n = max(n, w.masters)
			}
		}
	}
	return n
}

// openMasters starts n redis-servers without persistence, each on a free
// loopback port: independent masters, which share nothing but the
// machine.
func openMasters(ctx context.Context, n int) (servers, error) {
	var ms servers
	for range n {
		s, err := openServer(ctx, "")
		if err != nil {
			ms.close()
			return nil, fmt.Errorf("start a master: %w", err)
		}
		ms = append(ms, s)
	}
	return ms, nil
}

// close stops the servers.
func (ss servers) close() {
	for _, s := range ss {
		s.close()
	}
}

// describe says in a few words what the servers are, for the report.
func (ss servers) describe() string {
	if len(ss) == 0 {
		return ""
	}
	addrs := make([]string, len(ss))
	for i, s := range ss {
		addrs[i] = s.opts.Addr
	}
	return fmt.Sprintf("%d independent masters, Redis %s at %s (started for this run)", len(ss), ss[0].version, strings.Join(addrs, ", "))
}

// tokensCell formats what the holds of a workload on several masters
// said of their fencing tokens: "none" when the library's locks carry
// none, else how many were read and whether each rose above the one
// before it.
func tokensCell(r result) string {
	switch {
	case !r.Fenced:
		return "none"
	case r.TokensNotRising > 0:
		return fmt.Sprintf("%s of %s not rising", group(r.TokensNotRising), group(r.Tokens))
	case r.Tokens == 0:
		return "none read"
	default:
		return fmt.Sprintf("%s read, each rising", group(r.Tokens))
	}
}

// errNoQuorumLock reports a library asked for a quorum lock it does not
// have.
var errNoQuorumLock = errors.New("no quorum lock")
