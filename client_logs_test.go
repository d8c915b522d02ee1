package fairlock_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/internal/redistest"
)

// logRecorder is a slog.Handler that keeps every record at Warn or above
// (Info too with info, Debug too with debug): as one line of text, its
// message and its own attributes (those added with Logger.With are left
// out), and as a logRecord with every attribute, those added with
// Logger.With included.
type logRecorder struct {
	info  bool // records Info too; else Warn and above only
	debug bool // records Debug too
	// with are the attributes added with Logger.With, and keeper the
	// recorder that keeps the records (nil: this one), for the handlers
	// WithAttrs returns.
	with   []slog.Attr
	keeper *logRecorder

	mu    sync.Mutex
	lines []string // guarded by mu
	// errs, guarded by mu, holds each record's error attribute, nil for
	// a record with none: errs[i] is that of lines[i].
	errs    []error
	records []logRecord // guarded by mu; records[i] is lines[i]
}

// logRecord is one record a logRecorder kept.
type logRecord struct {
	level slog.Level
	msg   string
	attrs map[string]slog.Value // every attribute, by key
}

func (r logRecord) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %q", r.level, r.msg)
	for k, v := range r.attrs {
		fmt.Fprintf(&b, " %s=%v", k, v)
	}
	return b.String()
}

// has reports whether the record has the attribute key.
func (r logRecord) has(key string) bool {
	_, ok := r.attrs[key]
	return ok
}

// str returns the attribute key as a string ("" when absent).
func (r logRecord) str(key string) string {
	v, ok := r.attrs[key]
	if !ok {
		return ""
	}
	return v.String()
}

// duration returns the attribute key as a duration (0 when absent or of
// another kind).
func (r logRecord) duration(key string) time.Duration {
	v, ok := r.attrs[key]
	if !ok || v.Kind() != slog.KindDuration {
		return 0
	}
	return v.Duration()
}

func (h *logRecorder) Enabled(_ context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn || h.info && l >= slog.LevelInfo || h.debug
}

func (h *logRecorder) Handle(_ context.Context, rec slog.Record) error {
	var b strings.Builder
	var err error
	r := logRecord{level: rec.Level, msg: rec.Message, attrs: map[string]slog.Value{}}
	for _, a := range h.with {
		r.attrs[a.Key] = a.Value.Resolve()
	}
	b.WriteString(rec.Message)
	rec.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		if e, ok := a.Value.Any().(error); ok && err == nil {
			err = e
		}
		r.attrs[a.Key] = a.Value.Resolve()
		return true
	})
	k := h.store()
	k.mu.Lock()
	defer k.mu.Unlock()
	k.lines = append(k.lines, b.String())
	k.errs = append(k.errs, err)
	k.records = append(k.records, r)
	return nil
}

// store is the recorder that keeps h's records.
func (h *logRecorder) store() *logRecorder {
	if h.keeper != nil {
		return h.keeper
	}
	return h
}

func (h *logRecorder) WithAttrs(as []slog.Attr) slog.Handler {
	return &logRecorder{info: h.info, debug: h.debug, with: append(append([]slog.Attr(nil), h.with...), as...), keeper: h.store()}
}

func (h *logRecorder) WithGroup(string) slog.Handler { return h }

// errorOf returns the error of the first record that mentions what, or
// nil when no record with an error does.
func (h *logRecorder) errorOf(what string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	for i, l := range h.lines {
		if h.errs[i] != nil && strings.Contains(l, what) {
			return h.errs[i]
		}
	}
	return nil
}

func (h *logRecorder) all() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.lines...)
}

// kept returns the records kept so far.
func (h *logRecorder) kept() []logRecord {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]logRecord(nil), h.records...)
}

// find returns the records whose message contains msg.
func (h *logRecorder) find(msg string) []logRecord {
	var out []logRecord
	for _, r := range h.kept() {
		if strings.Contains(r.msg, msg) {
			out = append(out, r)
		}
	}
	return out
}

// Messages of the records the tests below look for.
const (
	msgLeaseLost = "fairlock: lease lost"
	msgOutage    = "fairlock: Redis unreachable"
	msgBack      = "fairlock: Redis answers again"
)

// requireNamesClient asserts that every record names the Client c, whose
// name is name, and that every record about a lock says what kind it is.
func requireNamesClient(t *testing.T, records []logRecord, c *fairlock.Client, name string) {
	t.Helper()
	require.NotEmpty(t, records)
	for _, r := range records {
		require.Equal(t, c.ID(), r.str("client"), "%v", r)
		require.Equal(t, name, r.str("client_name"), "%v", r)
		if r.has("lock") {
			require.NotEmpty(t, r.str("kind"), "%v", r)
		}
	}
}

// dropKeys deletes every key of the lock name under prefix, whatever its
// kind, as a server that lost its data would.
func dropKeys(t *testing.T, rdb redis.UniversalClient, prefix, name string) {
	t.Helper()
	ctx := context.Background()
	keys, err := rdb.Keys(ctx, prefix+":{"+name+"}*").Result()
	require.NoError(t, err)
	require.NotEmpty(t, keys)
	require.NoError(t, rdb.Del(ctx, keys...).Err())
}

// A hold that is lost is logged once, at Error (the holder may have
// acted on the lock after another owner was granted it), with the lock,
// its kind, the owner, the fencing token and how long it was held,
// however the loss was found: a renewal that finds the hold gone, a
// forced unlock, renewals that Redis does not answer until the lease
// nearly runs out.
func TestALostHoldIsLoggedAtErrorWithItsLockTokenAndTimeHeld(t *testing.T) {
	redistest.Slow(t)
	t.Parallel()
	e := newPrivateEnv(t)
	const lease = time.Second
	for _, tc := range []struct {
		name string
		kind string
		take func(t *testing.T, c *fairlock.Client, lock string) tokenHold
		lose func(t *testing.T, c *fairlock.Client, lock string)
	}{
		{"a Mutex whose keys are gone", "mutex", takeMutex, func(t *testing.T, _ *fairlock.Client, lock string) {
			dropKeys(t, e.rdb, e.prefix, lock)
		}},
		{"a Semaphore whose keys are gone", "semaphore", func(t *testing.T, c *fairlock.Client, lock string) tokenHold {
			s := c.Semaphore(lock, 3)
			ctx, err := s.Acquire(context.Background(), 2)
			require.NoError(t, err)
			tok, err := s.Token(ctx)
			require.NoError(t, err)
			return tokenHold{ctx, tok}
		}, func(t *testing.T, _ *fairlock.Client, lock string) { dropKeys(t, e.rdb, e.prefix, lock) }},
		{"a RWMutex's writer whose keys are gone", "rwmutex_write", func(t *testing.T, c *fairlock.Client, lock string) tokenHold {
			rw := c.RWMutex(lock)
			ctx, err := rw.Lock(context.Background())
			require.NoError(t, err)
			tok, err := rw.Token(ctx)
			require.NoError(t, err)
			return tokenHold{ctx, tok}
		}, func(t *testing.T, _ *fairlock.Client, lock string) { dropKeys(t, e.rdb, e.prefix, lock) }},
		{"a Mutex unlocked by force", "mutex", takeMutex, func(t *testing.T, _ *fairlock.Client, lock string) {
			removed, err := e.client().Mutex(lock).ForceUnlock(context.Background())
			require.NoError(t, err)
			require.True(t, removed)
		}},
		// Last: it stops the server the other cases use.
		{"a Mutex whose renewals Redis does not answer", "mutex", takeMutex, func(t *testing.T, _ *fairlock.Client, _ string) {
			require.NoError(t, e.srv.Suspend())
			t.Cleanup(func() { _ = e.srv.Resume() })
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			logs := &logRecorder{}
			c := e.client(fairlock.WithName("payroll-7"), fairlock.WithLease(lease), fairlock.WithLogger(slog.New(logs)))
			lock := strings.ReplaceAll(tc.name, " ", "-")
			h := tc.take(t, c, lock)
			took := time.Now()
			tc.lose(t, c, lock)
			requireDone(t, h.ctx, 10*time.Second)
			require.ErrorIs(t, context.Cause(h.ctx), fairlock.ErrLeaseLost)
			bound := time.Since(took)

			require.Eventually(t, func() bool { return len(logs.find(msgLeaseLost)) > 0 }, 5*time.Second, 5*time.Millisecond)
			lost := logs.find(msgLeaseLost)
			require.Len(t, lost, 1, "logged once: %v", logs.kept())
			r := lost[0]
			require.Equal(t, slog.LevelError, r.level, "%v", r)
			require.Equal(t, lock, r.str("lock"), "%v", r)
			require.Equal(t, tc.kind, r.str("kind"), "%v", r)
			require.NotEmpty(t, r.str("owner"), "%v", r)
			require.Equal(t, fmt.Sprint(h.token), r.str("token"), "%v", r)
			require.Positive(t, r.duration("held_for"), "%v", r)
			require.LessOrEqual(t, r.duration("held_for"), bound+time.Second, "%v", r)
			requireNamesClient(t, logs.kept(), c, "payroll-7")
		})
	}
}

// tokenHold is a hold, and its fencing token.
type tokenHold struct {
	ctx   context.Context
	token int64
}

// takeMutex locks the Mutex lock of c.
func takeMutex(t *testing.T, c *fairlock.Client, lock string) tokenHold {
	m := c.Mutex(lock)
	ctx, err := m.Lock(context.Background())
	require.NoError(t, err)
	tok, err := m.Token(ctx)
	require.NoError(t, err)
	return tokenHold{ctx, tok}
}

// When Redis goes away and comes back, a Client logs it twice, whatever
// the number of its calls that failed meanwhile: at Warn when it notices
// the outage, and at Info once Redis answers again, with how long it did
// not. The renewals and the polls that fail log at Debug only, with the
// lock, its kind, the owner and (for a poll) how long the call has
// waited; every record names the Client.
func TestAnOutageIsLoggedOnceAsItStartsAndOnceAsRedisIsBack(t *testing.T) {
	redistest.Slow(t)
	t.Parallel()
	e := newPrivateEnv(t)
	logs := &logRecorder{debug: true}
	c := e.client(fairlock.WithName("ledger-1"), fairlock.WithLease(3*time.Second),
		fairlock.WithWaiterTTL(900*time.Millisecond), fairlock.WithLogger(slog.New(logs)))
	ctx := context.Background()

	// A hold renewed every second, and a Lock call waiting behind another
	// Client's hold, polling at least every 300ms.
	_, err := c.Mutex("held").Lock(ctx)
	require.NoError(t, err)
	other := e.client()
	_, err = other.Mutex("awaited").Lock(ctx)
	require.NoError(t, err)
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	waiting := lockAsync(wctx, c.Mutex("awaited"))
	e.waitQueued("awaited", 1)

	killed := time.Now()
	e.srv.Kill()
	require.Eventually(t, func() bool { return len(logs.find(msgOutage)) > 0 }, 10*time.Second, 5*time.Millisecond)
	// Let the calls fail a while: each of them is no news.
	require.Eventually(t, func() bool { return len(logs.find("poll failed")) >= 2 },
		10*time.Second, 5*time.Millisecond, "%v", logs.kept())
	require.NoError(t, e.srv.Restart())
	require.Eventually(t, func() bool { return len(logs.find(msgBack)) > 0 }, 10*time.Second, 5*time.Millisecond, "%v", logs.kept())
	back := time.Since(killed)

	// Redis answers as before, and nothing more is said of the outage.
	for range 5 {
		hctx, err := c.Mutex("after").Lock(ctx)
		require.NoError(t, err)
		require.NoError(t, c.Mutex("after").Unlock(hctx))
	}
	time.Sleep(time.Second) // the renewals and polls out at the restart have been answered

	records := logs.kept()
	requireNamesClient(t, records, c, "ledger-1")
	outages, backs := logs.find(msgOutage), logs.find(msgBack)
	require.Len(t, outages, 1, "%v", records)
	require.Len(t, backs, 1, "%v", records)
	require.Equal(t, slog.LevelWarn, outages[0].level)
	require.True(t, outages[0].has("err"), "%v", outages[0])
	require.Equal(t, slog.LevelInfo, backs[0].level)
	require.Positive(t, backs[0].duration("unreachable_for"), "%v", backs[0])
	require.Less(t, backs[0].duration("unreachable_for"), back, "%v", backs[0])
	for _, r := range records {
		switch {
		case r.level < slog.LevelWarn, r.msg == outages[0].msg:
		case r.level == slog.LevelError && strings.Contains(r.msg, msgLeaseLost):
		default:
			assert.Fail(t, "a record above Debug besides the outage's", "%v", r)
		}
	}
	polls := logs.find("poll failed")
	for _, r := range polls {
		require.Equal(t, slog.LevelDebug, r.level, "%v", r)
		require.Equal(t, "awaited", r.str("lock"), "%v", r)
		require.Equal(t, "mutex", r.str("kind"), "%v", r)
		require.NotEmpty(t, r.str("owner"), "%v", r)
		require.Positive(t, r.duration("waited"), "%v", r)
	}
	for _, r := range logs.find("renewal failed") {
		require.Equal(t, slog.LevelDebug, r.level, "%v", r)
		require.Equal(t, "held", r.str("lock"), "%v", r)
		require.True(t, r.has("token") && r.has("held_for") && r.has("owner"), "%v", r)
	}
	stop()
	await(t, waiting, 5*time.Second) // granted once the restart emptied the line, or cancelled
}

// A named Client writes its name again as soon as it notices that Redis
// may have lost it, not at the next turn of its timer (every 20 s): after
// a restart without persistence, Inspect shows the name of a holder
// within a second or two.
func TestTheNameIsWrittenAgainSoonAfterARestart(t *testing.T) {
	redistest.Slow(t)
	t.Parallel()
	e := newPrivateEnv(t)
	const name = "invoicer-2"
	c := e.client(fairlock.WithName(name), fairlock.WithLease(time.Second))
	ctx := context.Background()
	m := c.Mutex("named")
	hctx, err := m.Lock(ctx)
	require.NoError(t, err)
	st, err := c.Inspect(ctx, "named")
	require.NoError(t, err)
	require.Equal(t, name, st.ClientName)
	inspector := e.client()

	e.srv.Kill()
	require.NoError(t, e.srv.Restart())
	restarted := time.Now()
	// The hold went with the data; its holder takes the lock again.
	requireDone(t, hctx, 5*time.Second)
	require.ErrorIs(t, context.Cause(hctx), fairlock.ErrLeaseLost)
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	hctx, err = m.Lock(lctx)
	require.NoError(t, err)

	require.Eventually(t, func() bool {
		st, err := inspector.Inspect(ctx, "named")
		return err == nil && st.Client == c.ID() && st.ClientName == name
	}, 3*time.Second, 20*time.Millisecond, "the holder's name, not the 20 s turn of its timer")
	t.Logf("the name is back %v after the restart", time.Since(restarted))
	require.NoError(t, m.Unlock(hctx))
}

// The records of a quorum Client name it too, and those of a master's
// engine the master.
func TestAQuorumClientsRecordsNameIt(t *testing.T) {
	redistest.Slow(t)
	t.Parallel()
	servers := redistest.Masters(t, 2)
	masters := []redis.UniversalClient{servers[0].Client(t), servers[1].Client(t)}
	logs := &logRecorder{}
	c, err := fairlock.NewQuorum(context.Background(), masters, fairlock.WithPrefix(redistest.Prefix(t)),
		fairlock.WithName("q-1"), fairlock.WithLogger(slog.New(logs)))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	require.Len(t, logs.find("even number of masters"), 1, "%v", logs.kept())

	servers[1].Kill()
	_, err = c.Mutex("q").TryLock(context.Background())
	require.ErrorIs(t, err, fairlock.ErrNoQuorum)
	require.Eventually(t, func() bool { return len(logs.find(msgOutage)) > 0 }, 10*time.Second, 5*time.Millisecond)
	require.Equal(t, "1", logs.find(msgOutage)[0].str("master"))
	requireNamesClient(t, logs.kept(), c, "q-1")
}
