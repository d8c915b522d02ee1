package fairlock_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/fairlock/fairlock/queue"
)

// A quorum lock's mutual exclusion rests on timing; its committed tokens
// do not. A holder paused past its validity, or a master whose clock
// steps, can leave two processes that each believe they hold the lock,
// and the later one's committed token is still the larger: a resource
// that checks tokens refuses the earlier one. What NewQuorum promises
// is that a Token committed to a majority is above every Token whose
// commit a majority acknowledged before its own commit began.

// fence is a resource that checks fencing tokens: it accepts a write only
// with a token at least the largest it has seen, and logs the writes it
// accepted. It lives on a redis-server apart from the lock's masters.
type fence struct {
	rdb *redis.Client
	key string // the largest token seen; the log is at key + ":log"
}

var fenceWrite = redis.NewScript(`
local top = tonumber(redis.call('GET', KEYS[1]) or '0')
if tonumber(ARGV[1]) < top then
  return 0
end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('RPUSH', KEYS[2], ARGV[2])
return 1`)

// write writes what under token, and reports whether the fence accepted it.
func (f fence) write(ctx context.Context, token int64, what string) (bool, error) {
	n, err := fenceWrite.Run(ctx, f.rdb, []string{f.key, f.key + ":log"}, token, what).Int()
	return n == 1, err
}

// log returns the writes the fence accepted, in order.
func (f fence) log(t *testing.T) []string {
	t.Helper()
	l, err := f.rdb.LRange(context.Background(), f.key+":log", 0, -1).Result()
	require.NoError(t, err)
	return l
}

// quorumPrefix returns the key prefix of the test's quorum Clients.
func quorumPrefix(t *testing.T) string {
	prefix, _ := quorumPrefixes.LoadOrStore(t.Name(), redistest.Prefix(t))
	return prefix.(string)
}

// quorumHolderRole is the role of a helper process (see helperMain) that
// takes a quorum lock and writes to a fence under its token: once when it
// holds the lock, and once more when the test tells it to on its standard
// input. It reports on its standard output (see quorumHolderMain).
const quorumHolderRole = "quorum-hold"

// quorumHolder is a helper process of quorumHolderRole.
type quorumHolder struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
}

// startQuorumHolder starts a process that takes the quorum lock name on
// servers with the given lease (fixed: WithFixedLease, else the
// watchdog's), and writes to f under its token.
func startQuorumHolder(t *testing.T, servers []*redistest.Server, name string, lease time.Duration, fixed bool, f fence) *quorumHolder {
	t.Helper()
	addrs := make([]string, len(servers))
	for i, s := range servers {
		addrs[i] = s.Addr
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(),
		helperEnv+"="+quorumHolderRole,
		"FAIRLOCK_MASTERS="+strings.Join(addrs, ","),
		"FAIRLOCK_PREFIX="+quorumPrefix(t),
		"FAIRLOCK_NAME="+name,
		"FAIRLOCK_LEASE="+lease.String(),
		"FAIRLOCK_FIXED="+strconv.FormatBool(fixed),
		"FAIRLOCK_FENCE="+f.rdb.Options().Addr,
		"FAIRLOCK_FENCE_KEY="+f.key,
	)
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	h := &quorumHolder{cmd: cmd, stdin: stdin, lines: make(chan string, 16)}
	cmd.Stdout = &lineWriter{lines: h.lines}
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill() // a stopped process dies of SIGKILL too
		_ = cmd.Wait()
	})
	return h
}

// next returns the next line the process reported.
func (h *quorumHolder) next(t *testing.T, within time.Duration) string {
	t.Helper()
	select {
	case l := <-h.lines:
		return l
	case <-time.After(within):
		t.Fatalf("helper process %d reported nothing within %v", h.cmd.Process.Pid, within)
		return ""
	}
}

// signal sends sig to the process.
func (h *quorumHolder) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	require.NoError(t, h.cmd.Process.Signal(sig))
}

// lineWriter sends each line written to it on lines. Only exec's copying
// goroutine writes to it, and lines has room for every line a helper
// prints.
type lineWriter struct {
	lines   chan<- string
	partial []byte
}

func (w *lineWriter) Write(p []byte) (int, error) {
	for _, b := range p {
		if b != '\n' {
			w.partial = append(w.partial, b)
			continue
		}
		w.lines <- string(w.partial)
		w.partial = w.partial[:0]
	}
	return len(p), nil
}

// quorumHolderMain is the helper process of quorumHolderRole. It prints
// "token <token> <accepted>" once it holds the lock and wrote under its
// token; then, after a line on its standard input, "wrote <accepted>"
// for a second write under the same token, made without looking at the
// hold, as a process paused just before its write makes it; then "lost
// <true|false>": whether its hold ended with ErrLeaseLost.
func quorumHolderMain() int {
	ctx := context.Background()
	var masters []redis.UniversalClient
	for _, addr := range strings.Split(os.Getenv("FAIRLOCK_MASTERS"), ",") {
		masters = append(masters, redis.NewClient(&redis.Options{Addr: addr}))
	}
	lease, err := time.ParseDuration(os.Getenv("FAIRLOCK_LEASE"))
	if err != nil {
		return fail(err)
	}
	opts := []fairlock.Option{fairlock.WithPrefix(os.Getenv("FAIRLOCK_PREFIX"))}
	var mopts []fairlock.HandleOption
	if os.Getenv("FAIRLOCK_FIXED") == "true" {
		mopts = append(mopts, fairlock.WithFixedLease(lease))
	} else {
		opts = append(opts, fairlock.WithLease(lease))
	}
	c, err := fairlock.NewQuorum(context.Background(), masters, opts...)
	if err != nil {
		return fail(err)
	}
	defer c.Close()
	f := fence{redis.NewClient(&redis.Options{Addr: os.Getenv("FAIRLOCK_FENCE")}), os.Getenv("FAIRLOCK_FENCE_KEY")}
	m := c.Mutex(os.Getenv("FAIRLOCK_NAME"), mopts...)
	held, err := m.Lock(ctx)
	if err != nil {
		return fail(err)
	}
	token, err := m.Token(held)
	if err != nil {
		return fail(err)
	}
	ok, err := f.write(ctx, token, "holder before the pause")
	if err != nil {
		return fail(err)
	}
	fmt.Printf("token %d %t\n", token, ok)
	// The test stops the process here, and resumes it with a line on
	// standard input already waiting.
	bufio.NewScanner(os.Stdin).Scan()
	ok, err = f.write(ctx, token, "holder after the pause")
	if err != nil {
		return fail(err)
	}
	fmt.Printf("wrote %t\n", ok)
	select {
	case <-held.Done():
	case <-time.After(10 * time.Second):
	}
	fmt.Printf("lost %t\n", errors.Is(context.Cause(held), fairlock.ErrLeaseLost))
	return 0
}

// fail reports err on the helper's standard output, and returns its exit
// code.
func fail(err error) int {
	fmt.Printf("error %v\n", err)
	return 3
}

func TestQuorumHolderPausedPastItsValidityIsFencedOffByTheNextHoldersToken(t *testing.T) {
	redistest.Slow(t)
	t.Parallel()
	for _, tc := range []struct {
		name  string
		fixed bool
	}{{"watchdog", false}, {"fixed", true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			servers := redistest.Masters(t, 3)
			c := quorumOf(t, servers, fairlock.WithWaiterTTL(time.Second))
			f := fence{redistest.Shared(t).Client(t), redistest.Prefix(t) + ":resource"}
			const lease = 2 * time.Second
			holder := startQuorumHolder(t, servers, "job", lease, tc.fixed, f)

			var first int64
			var accepted bool
			line := holder.next(t, 30*time.Second)
			_, err := fmt.Sscanf(line, "token %d %t", &first, &accepted)
			require.NoError(t, err, "the holder reported %q", line)
			require.True(t, accepted, "the fence takes the holder's first write")

			// The holder stops between its writes, and stays stopped while
			// its hold runs out on the masters and this Client is granted.
			holder.signal(t, syscall.SIGSTOP)
			lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			held, err := c.Mutex("job").Lock(lctx)
			require.NoError(t, err, "granted once the stopped holder's hold ran out")
			token, err := c.Mutex("job").Token(held)
			require.NoError(t, err)
			require.Greater(t, token, first, "the next holder's token is above the paused one's")
			ok, err := f.write(ctx, token, "next holder")
			require.NoError(t, err)
			require.True(t, ok, "the fence takes the next holder's write")

			// Resumed, the old holder writes under its old token.
			_, err = io.WriteString(holder.stdin, "write\n")
			require.NoError(t, err)
			holder.signal(t, syscall.SIGCONT)
			require.Equal(t, "wrote false", holder.next(t, 30*time.Second), "the fence refuses the resumed holder's write")
			require.Equal(t, "lost true", holder.next(t, 30*time.Second), "the resumed holder's hold ends with ErrLeaseLost")
			require.NoError(t, holder.cmd.Wait())
			require.Equal(t, []string{"holder before the pause", "next holder"}, f.log(t))

			require.NoError(t, held.Err(), "the next holder keeps its hold")
			require.NoError(t, c.Mutex("job").Unlock(held))
		})
	}
}

// masterClocks steps the clocks of a quorum's masters as the lock's
// scripts see them. A step of master i forward by d has every Client of
// the test read i's clock d later (fairlock.SetQuorumSkew), and every key
// on i expire d sooner, as Redis expires keys by its wall clock. (A key a
// script later sets to expire at an absolute time read from the stepped
// clock, the token counter, lasts d longer than on a stepped server: a
// counter kept longer only keeps tokens higher.)
type masterClocks struct {
	t       *testing.T
	masters []*redis.Client
	clients []*fairlock.Client
	skews   []time.Duration
}

func newMasterClocks(t *testing.T, servers []*redistest.Server, clients ...*fairlock.Client) *masterClocks {
	c := &masterClocks{t: t, clients: clients, skews: make([]time.Duration, len(servers))}
	for _, s := range servers {
		c.masters = append(c.masters, s.Client(t))
	}
	return c
}

// shiftExpiries moves the expiry of every key that has one by ARGV[1] ms
// (negative: sooner); a key whose expiry moves into the past is deleted,
// as it would have expired.
var shiftExpiries = redis.NewScript(`
local d = tonumber(ARGV[1])
for _, k in ipairs(redis.call('KEYS', '*')) do
  local p = redis.call('PTTL', k)
  if p > 0 then
    if p + d > 0 then
      redis.call('PEXPIRE', k, p + d)
    else
      redis.call('DEL', k)
    end
  end
end
return 0`)

// step steps master i's clock forward by d.
func (c *masterClocks) step(i int, d time.Duration) {
	c.t.Helper()
	require.NoError(c.t, shiftExpiries.Run(context.Background(), c.masters[i], nil, -d.Milliseconds()).Err())
	c.skews[i] += d
	for _, cl := range c.clients {
		fairlock.SetQuorumSkew(cl, i, c.skews[i])
	}
}

// waitQuorumQueued waits until n waiters are in line for the lock on
// master rdb.
func waitQuorumQueued(t *testing.T, rdb *redis.Client, k queue.Keys, n int64) {
	t.Helper()
	require.Eventually(t, func() bool { return rdb.ZCard(context.Background(), k.Queue).Val() == n },
		10*time.Second, 2*time.Millisecond, "waiting for %d queued waiters on %s", n, rdb.Options().Addr)
}

// waitQuorumHeld waits until the lock is held on master rdb.
func waitQuorumHeld(t *testing.T, rdb *redis.Client, k queue.Keys) {
	t.Helper()
	require.Eventually(t, func() bool { return rdb.Exists(context.Background(), k.Lock).Val() == 1 },
		10*time.Second, 2*time.Millisecond, "waiting for a hold on %s", rdb.Options().Addr)
}

func TestQuorumClockStepOnOneMasterKeepsTheHoldAndTokensRise(t *testing.T) {
	redistest.Slow(t)
	t.Parallel()
	ctx := context.Background()
	servers := redistest.Masters(t, 3)
	opts := []fairlock.Option{fairlock.WithLease(2 * time.Second), fairlock.WithWaiterTTL(2 * time.Second)}
	a, b, c := quorumOf(t, servers, opts...), quorumOf(t, servers, opts...), quorumOf(t, servers, opts...)
	clocks := newMasterClocks(t, servers, a, b, c)
	k := quorumKeys(t, "job")
	ma, mb, mc := a.Mutex("job"), b.Mutex("job"), c.Mutex("job")

	held, err := ma.Lock(ctx)
	require.NoError(t, err)
	tokA, err := ma.Token(held)
	require.NoError(t, err)
	for _, rdb := range clocks.masters { // the hold on every master first (see quorum_fault_test.go)
		waitQuorumHeld(t, rdb, k)
	}
	waitB := lockAsync(ctx, mb)
	for _, rdb := range clocks.masters {
		waitQuorumQueued(t, rdb, k, 1)
	}

	// Master 0's clock steps a minute: A's hold there expires at once, and
	// master 0 hands itself to B, the one waiter. A keeps masters 1 and 2.
	left, err := ma.TTL(held)
	require.NoError(t, err)
	validAtStep := time.Now().Add(left)
	clocks.step(0, time.Minute)
	waitQuorumHeld(t, clocks.masters[0], k)

	// The validity A had at the step passes: only renewals that a majority
	// answered since can have kept its hold.
	require.Eventually(t, func() bool { return held.Err() != nil || time.Now().After(validAtStep) },
		30*time.Second, 10*time.Millisecond)
	require.NoError(t, held.Err(), "the holder keeps its hold on the majority left")
	left, err = ma.TTL(held)
	require.NoError(t, err)
	require.Positive(t, left)

	// A hands over to B, which counts master 0 too: B's token comes from
	// master 0's clock, a minute ahead of the others.
	waitC := lockAsync(ctx, mc)
	waitQuorumQueued(t, clocks.masters[1], k, 2)
	waitQuorumQueued(t, clocks.masters[2], k, 2)
	require.NoError(t, ma.Unlock(held))
	rb := await(t, waitB, 30*time.Second)
	require.NoError(t, rb.err)
	tokB, err := mb.Token(rb.ctx)
	require.NoError(t, err)
	require.Greater(t, tokB, tokA)

	// Master 0 stops answering, so that C's grant counts only masters whose
	// clocks did not step: its token is above B's because B committed its
	// token to them.
	redistest.Pause(t, clocks.masters[0])
	require.NoError(t, mb.Unlock(rb.ctx))
	rc := await(t, waitC, 30*time.Second)
	require.NoError(t, rc.err)
	tokC, err := mc.Token(rc.ctx)
	require.NoError(t, err)
	require.Greater(t, tokC, tokB)
	require.NoError(t, mc.Unlock(rc.ctx))
}

func TestQuorumTokensRiseAfterTheLockIdlesBehindAMasterThatStepped(t *testing.T) {
	redistest.Slow(t)
	t.Parallel()
	ctx := context.Background()
	servers := redistest.Masters(t, 3)
	const lease = time.Second // the waiter TTL too
	opts := []fairlock.Option{fairlock.WithLease(lease), fairlock.WithWaiterTTL(lease)}
	a, b := quorumOf(t, servers, opts...), quorumOf(t, servers, opts...)
	clocks := newMasterClocks(t, servers, a, b)
	ma, mb := a.Mutex("job"), b.Mutex("job")

	// Master 0's clock steps an hour ahead. A holds with masters 0 and 1
	// (master 2 is stopped meanwhile), so its token, the larger of theirs,
	// comes from master 0's clock, and both acknowledge its commit.
	clocks.step(0, time.Hour)
	resume := redistest.Pause(t, clocks.masters[2])
	held, err := ma.Lock(ctx)
	require.NoError(t, err)
	tokA, err := ma.Token(held)
	require.NoError(t, err)
	require.NoError(t, ma.Unlock(held))
	resume()

	// The lock idles for longer than its lease and waiter TTL; then B is
	// granted by masters 1 and 2 alone, whose clocks read an hour behind
	// A's token.
	time.Sleep(3 * lease)
	redistest.Pause(t, clocks.masters[0])
	heldB, err := mb.Lock(ctx)
	require.NoError(t, err)
	tokB, err := mb.Token(heldB)
	require.NoError(t, err)
	require.Greater(t, tokB, tokA, "B's commit began after a majority acknowledged A's")
	require.NoError(t, mb.Unlock(heldB))
}

func TestQuorumStepThatBreaksMutualExclusionKeepsCommittedTokensOrdered(t *testing.T) {
	redistest.Slow(t)
	t.Parallel()
	for _, tc := range []struct {
		name string
		// early: A commits its token before the steps; else it first asks
		// for its token once B's commit was acknowledged.
		early bool
		// ahead is how far master 0's clock steps before A locks: A's
		// token comes from master 0's clock, and is above the clock of
		// every other master when ahead is longer than the steps below.
		ahead time.Duration
	}{
		{"earlier holder commits first", true, time.Hour},
		{"later holder commits first", false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			servers := redistest.Masters(t, 3)
			opts := []fairlock.Option{fairlock.WithWaiterTTL(2 * time.Second)}
			a, b := quorumOf(t, servers, opts...), quorumOf(t, servers, opts...)
			clocks := newMasterClocks(t, servers, a, b)
			k := quorumKeys(t, "job")
			// A's lease is fixed: it believes it holds until its validity
			// passes, whatever the masters do meanwhile.
			const lease = 20 * time.Second
			ma, mb := a.Mutex("job", fairlock.WithFixedLease(lease)), b.Mutex("job")

			// A is granted with masters 0 and 1 (master 2 is stopped
			// meanwhile): its token is the larger of theirs. Master 2 then
			// takes A's late try: A holds all three.
			clocks.step(0, tc.ahead)
			resume := redistest.Pause(t, clocks.masters[2])
			held, err := ma.Lock(ctx)
			require.NoError(t, err)
			var tokA int64
			if tc.early {
				tokA, err = ma.Token(held)
				require.NoError(t, err)
			}
			resume()
			waitQuorumHeld(t, clocks.masters[2], k)
			waitB := lockAsync(ctx, mb)
			for _, rdb := range clocks.masters {
				waitQuorumQueued(t, rdb, k, 1)
			}

			// Masters 2 and 1, of A's majority, step past A's lease: each
			// drops A's hold and hands itself to B, which is granted with
			// both while A's validity runs.
			step := lease + 10*time.Second
			clocks.step(2, step)
			waitQuorumQueued(t, clocks.masters[2], k, 0)
			clocks.step(1, step)
			rb := await(t, waitB, 30*time.Second)
			require.NoError(t, rb.err)
			t.Logf("A still held when B was granted: %t", held.Err() == nil)
			tokB, err := mb.Token(rb.ctx)
			require.NoError(t, err)

			// A token committed to a majority is above every token whose
			// commit a majority acknowledged before its own began.
			if tc.early {
				require.Greater(t, tokB, tokA, "B's commit began after A's was acknowledged")
			} else {
				tokA, err = ma.Token(held)
				t.Logf("A's first Token, after B's commit: %d, %v", tokA, err)
				if err == nil {
					require.Greater(t, tokA, tokB, "A's commit began after B's was acknowledged")
				}
			}
			require.NoError(t, mb.Unlock(rb.ctx))
		})
	}
}
