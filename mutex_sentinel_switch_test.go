package fairlock_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/internal/redistest"
)

// A graceful Sentinel failover stalls no lock much past the switch, even
// when the sentinels that the Clients' failover clients ask hear of it
// late. A go-redis failover client asks one sentinel, and moves to the
// new primary when that sentinel announces the switch (or at its next
// dial). On a loaded machine a sentinel other than the failover's leader
// can hear of the switch two seconds after the leader announced it; until
// then a Client that asks it works against the old primary, which stays a
// writable master until Sentinel demotes it, some ten seconds later.
// What it does there is lost, and what the failover brought back of the
// lock holds up its line: the lock stalls for seconds.
//
// The test makes the lag certain. Two Clients, three goroutines each,
// loop on one lock (Lock with a 5 s deadline, a 2 ms hold, Unlock). Each
// round pauses every sentinel but one that no Client asks, which then
// leads a SENTINEL FAILOVER, and resumes them switchLag after its
// +switch-master. Within a second of that announcement no Client may keep
// a connection to the old primary, and until Sentinel demotes the old
// primary no gap between two grants may be longer than the switch
// (SENTINEL FAILOVER to +switch-master) plus a second. (The demotion
// itself, a full resynchronisation from the new primary, is not the
// switch's: a loaded machine can slow the lock then too.)
//
// FAIRLOCK_FAILOVER_ROUNDS sets the number of rounds (3 by default),
// FAIRLOCK_FAILOVER_LAG the lag ("0s": no sentinel is paused), and
// FAIRLOCK_FAILOVER_LOG, when set, sends the Clients' logs to stderr.

// switchLag is how long after the leader's +switch-master the other
// sentinels are resumed.
const switchLag = 3 * time.Second

// grantLog records the grants of every contender, in grant order.
type grantLog struct {
	mu     sync.Mutex
	at     []time.Time // guarded by mu
	failed int         // Lock calls that returned an error; guarded by mu
	lost   int         // holds whose Unlock reported ErrLeaseLost; guarded by mu
}

func (g *grantLog) add(err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if err != nil {
		g.failed++
		return
	}
	g.at = append(g.at, time.Now())
}

// longestGap returns the longest time without a grant between from and
// to, and when it began; the first gap begins at the last grant before
// from.
func (g *grantLog) longestGap(from, to time.Time) (time.Duration, time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	last := from
	var gap time.Duration
	var began time.Time
	for _, at := range append(g.at[:len(g.at):len(g.at)], to) {
		if at.Before(from) {
			last = at
			continue
		}
		if at.After(to) {
			at = to
		}
		if at.Sub(last) > gap {
			gap, began = at.Sub(last), last
		}
		last = at
	}
	return gap, began
}

// contend starts three goroutines per Client that lock, hold for 2 ms and
// unlock name until the returned function stops them.
func contend(clients []*fairlock.Client, name string, g *grantLog) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, c := range clients {
		m := c.Mutex(name)
		for range 3 {
			wg.Go(func() {
				for ctx.Err() == nil {
					lctx, done := context.WithTimeout(ctx, 5*time.Second)
					held, err := m.Lock(lctx)
					if ctx.Err() == nil {
						g.add(err)
					}
					if err == nil {
						time.Sleep(2 * time.Millisecond)
						if errors.Is(m.Unlock(held), fairlock.ErrLeaseLost) { // the failover undid it
							g.mu.Lock()
							g.lost++
							g.mu.Unlock()
						}
					}
					done()
				}
			})
		}
	}
	return func() { cancel(); wg.Wait() }
}

// logTail keeps the last lines written to it (a bounded log of the
// Clients, printed when a round fails).
type logTail struct {
	mu    sync.Mutex
	lines []string // guarded by mu
}

const logTailLines = 400

func (l *logTail) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, string(p))
	if len(l.lines) > 2*logTailLines {
		l.lines = slices.Clone(l.lines[len(l.lines)-logTailLines:])
	}
	return len(p), nil
}

func (l *logTail) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines[max(0, len(l.lines)-logTailLines):], "")
}

// switchRound is what one failover of TestGracefulFailoverStallsNoLockPastTheSwitch
// measured.
type switchRound struct {
	leader   string        // the sentinel that led it
	asked    []string      // the sentinels the Clients asked before it
	switched time.Duration // from SENTINEL FAILOVER to the leader's +switch-master
	stayed   []string      // Clients with a connection to the old primary a second after the switch
	back     []string      // Clients seen there again later, before the demotion, and when
	demoted  time.Duration // when Sentinel demoted the old primary, after the switch: the end of the gaps measured
	gap      time.Duration // the longest time without a grant
	gapAt    time.Duration // when that gap began, after the switch
	failed   int           // Lock calls that failed meanwhile
	lost     int           // holds that ended with ErrLeaseLost meanwhile
}

func TestGracefulFailoverStallsNoLockPastTheSwitch(t *testing.T) {
	redistest.Slow(t)
	t.Parallel()
	rounds, lag := 3, switchLag
	if s := os.Getenv("FAIRLOCK_FAILOVER_ROUNDS"); s != "" {
		n, err := strconv.Atoi(s)
		require.NoError(t, err, "FAIRLOCK_FAILOVER_ROUNDS")
		rounds = n
	}
	if s := os.Getenv("FAIRLOCK_FAILOVER_LAG"); s != "" {
		d, err := time.ParseDuration(s)
		require.NoError(t, err, "FAIRLOCK_FAILOVER_LAG")
		lag = d
	}
	set := redistest.SentinelFor(t, 1, 3)
	switches := set.WatchSwitches(t)
	prefix := redistest.Prefix(t)
	names := []string{prefix + "-a", prefix + "-b"}
	var clients []*fairlock.Client
	tail := &logTail{}
	for _, name := range names {
		rdb := redis.NewFailoverClient(&redis.FailoverOptions{
			MasterName: set.MasterName(), SentinelAddrs: set.SentinelAddrs(), ClientName: name,
		})
		t.Cleanup(func() { _ = rdb.Close() })
		// The Clients' logs from Info up are kept and shown when a round
		// fails; FAIRLOCK_FAILOVER_LOG sends them to stderr, from Debug.
		var logs io.Writer = tail
		level := slog.LevelInfo
		if os.Getenv("FAIRLOCK_FAILOVER_LOG") != "" {
			logs, level = os.Stderr, slog.LevelDebug
		}
		opts := []fairlock.Option{fairlock.WithPrefix(prefix), fairlock.WithLogger(slog.New(slog.NewTextHandler(logs,
			&slog.HandlerOptions{Level: level})).With("client", name))}
		c, err := fairlock.New(rdb, opts...)
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		clients = append(clients, c)
	}
	g := &grantLog{}
	stop := contend(clients, "switch", g)
	defer stop()
	time.Sleep(3 * time.Second) // contention under way, and Sentinel's hellos (every 2 s) heard

	results := make([]switchRound, 0, rounds)
	for i := range rounds {
		r, err := failoverRound(t, set, switches, names, g, lag)
		for tries := 1; err != nil; tries++ {
			// Sentinel gave the failover up (its replica did not report
			// itself promoted in time): nothing switched, so nothing to
			// measure.
			require.Less(t, tries, 3, "round %d: %v", i, err)
			t.Logf("round %d: %v; again", i, err)
			r, err = failoverRound(t, set, switches, names, g, lag)
		}
		t.Logf("round %d: led by %s (the Clients asked %v): switched in %v; longest gap %v, from %v after the switch (demoted at %v); %d Lock calls failed, %d holds lost; still on the old primary after a second: %v; there again before the demotion: %v",
			i, r.leader, r.asked, r.switched.Round(time.Millisecond), r.gap.Round(time.Millisecond),
			r.gapAt.Round(time.Millisecond), r.demoted.Round(time.Millisecond), r.failed, r.lost, r.stayed, r.back)
		results = append(results, r)
	}
	for _, r := range results {
		if len(r.stayed) > 0 || r.gap > r.switched+time.Second {
			t.Logf("the Clients' logs end:\n%s", tail)
			break
		}
	}
	for i, r := range results {
		require.Empty(t, r.stayed, "round %d: Clients kept a connection to the old primary a second after the switch", i)
		require.LessOrEqual(t, r.gap, r.switched+time.Second, "round %d: a gap between grants longer than the switch plus a second", i)
	}
}

// failoverRound runs one graceful failover led by a sentinel that no
// Client asks, the others paused until lag after its +switch-master, and
// returns what it measured once the old primary is demoted; an error
// when the leader gave the failover up.
func failoverRound(t *testing.T, set *redistest.SentinelSet, switches *redistest.Switches,
	names []string, g *grantLog, lag time.Duration) (switchRound, error) {
	t.Helper()
	ctx := t.Context()
	_, err := set.WaitReady(90 * time.Second)
	require.NoError(t, err)
	var r switchRound
	for _, s := range set.SentinelAddrs() {
		conns, err := redistest.ClientNames(ctx, s, false)
		require.NoError(t, err)
		if slices.ContainsFunc(names, func(n string) bool { return slices.Contains(conns, n) }) {
			r.asked = append(r.asked, s)
		} else if r.leader == "" {
			r.leader = s
		}
	}
	require.NotEmpty(t, r.leader, "a sentinel that no Client asks")
	var resume []func()
	if lag > 0 {
		for _, s := range set.SentinelAddrs() {
			if s != r.leader {
				resume = append(resume, set.PauseSentinel(t, s))
			}
		}
	}
	g.mu.Lock()
	failedBefore, lostBefore := g.failed, g.lost
	g.mu.Unlock()

	sent := time.Now()
	old, err := set.FailoverVia(ctx, r.leader)
	require.NoError(t, err)
	sw, err := switches.First(sent, 2*redistest.SentinelFailoverTimeout)
	if err != nil {
		for _, f := range resume {
			f()
		}
		return r, fmt.Errorf("%w; the leader's log ends:\n%s", err, set.Sentinel(r.leader).LogTail())
	}
	r.switched = sw.At.Sub(sent)

	time.Sleep(time.Until(sw.At.Add(time.Second)))
	conns, err := redistest.ClientNames(ctx, old, true)
	require.NoError(t, err)
	for _, n := range names {
		if slices.Contains(conns, n) {
			r.stayed = append(r.stayed, n)
		}
	}
	// Until the demotion, look for a Client back on the old primary
	// (it answers as a master until then): a cause of a gap, if any.
	sampling, stopSampling := context.WithCancel(ctx)
	sampled := make(chan []string, 1)
	go func() {
		var back []string
		defer func() { sampled <- back }()
		for sampling.Err() == nil {
			select {
			case <-sampling.Done():
				return
			case <-time.After(250 * time.Millisecond):
			}
			conns, err := redistest.ClientNames(sampling, old, true)
			if err != nil {
				continue
			}
			for _, n := range names {
				if slices.Contains(conns, n) {
					back = append(back, fmt.Sprintf("%s at %v", n, time.Since(sw.At).Round(time.Millisecond)))
				}
			}
		}
	}()
	time.Sleep(time.Until(sw.At.Add(lag)))
	for _, f := range resume {
		f()
	}
	require.NoError(t, set.WaitDemoted(old, 40*time.Second))
	demoted := time.Now()
	r.demoted = demoted.Sub(sw.At)
	stopSampling()
	r.back = <-sampled

	var began time.Time
	r.gap, began = g.longestGap(sent, demoted)
	r.gapAt = began.Sub(sw.At)
	g.mu.Lock()
	r.failed, r.lost = g.failed-failedBefore, g.lost-lostBefore
	g.mu.Unlock()
	return r, nil
}
