package main

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// atomicFixture is a redis-server of the test's own and a prefix for the
// test's names.
type atomicFixture struct {
	srv    *server
	prefix string
}

func newAtomicFixture(t *testing.T) atomicFixture {
	t.Helper()
	return atomicFixture{srv: startServer(t), prefix: "peers:test:" + t.Name()}
}

// locker returns an atomic try-all over a client of its own, which hook
// counts when it is not nil.
func (f atomicFixture) locker(t *testing.T, hook redis.Hook) atomicLocker {
	t.Helper()
	rdb := redis.NewClient(f.srv.opts)
	if hook != nil {
		rdb.AddHook(hook)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	return atomicLocker{rdb: rdb, ttl: 30 * time.Second, multiWait: time.Millisecond}
}

func (f atomicFixture) names(short ...string) []string {
	names := make([]string, len(short))
	for i, s := range short {
		names[i] = f.prefix + ":" + s
	}
	return names
}

// values returns the value of each name's key, "" for a missing one.
func (f atomicFixture) values(t *testing.T, names []string) []string {
	t.Helper()
	got, err := f.srv.admin.MGet(context.Background(), names...).Result()
	if err != nil {
		t.Fatal(err)
	}
	values := make([]string, len(got))
	for i, v := range got {
		if v != nil {
			values[i] = v.(string)
		}
	}
	return values
}

func TestAtomicTryAllSetsEveryNameInOneAttemptAndGivesThemAllBack(t *testing.T) {
	f := newAtomicFixture(t)
	a := f.locker(t, nil)
	ctx := context.Background()
	names := f.names("b", "a", "c")
	unlock, attempts, err := a.lockAll(ctx, names)
	if err != nil {
		t.Fatal(err)
	}
	if attempts != 1 {
		t.Errorf("attempts = %d, want 1: no name was taken", attempts)
	}
	values := f.values(t, names)
	for i, v := range values {
		if v == "" || v != values[0] {
			t.Fatalf("values %q: want one value of the grant's in every key", values)
		}
		ttl, err := f.srv.admin.PTTL(ctx, names[i]).Result()
		if err != nil {
			t.Fatal(err)
		}
		if ttl <= 0 || ttl > a.ttl {
			t.Errorf("%s: time to live %v, want up to %v", names[i], ttl, a.ttl)
		}
	}
	if err := unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := f.srv.admin.Exists(ctx, names...).Result(); err != nil || n != 0 {
		t.Errorf("%d keys left after unlock (err %v)", n, err)
	}
}

// One name held by another owner: the script sets none of the others, and
// the wait ends with its context having taken nothing.
func TestAtomicTryAllTakesNothingWhileOneNameIsHeld(t *testing.T) {
	f := newAtomicFixture(t)
	holder, waiter := f.locker(t, nil), f.locker(t, nil)
	names := f.names("a", "b", "c")
	unlock, _, err := holder.lockAll(context.Background(), names[1:2])
	if err != nil {
		t.Fatal(err)
	}
	held := f.values(t, names[1:2])[0]

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, attempts, err := waiter.lockAll(ctx, names)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want the context's", err)
	}
	if attempts < 1 {
		t.Errorf("attempts = %d, want at least 1", attempts)
	}
	if got := f.values(t, names); got[0] != "" || got[1] != held || got[2] != "" {
		t.Errorf("values %q: want a and c unset and b the holder's", got)
	}
	if err := unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// A waiter runs the script again after each random wait, and takes every
// name once the holder gives its name back.
func TestAtomicTryAllTriesAgainUntilTheHolderGivesBack(t *testing.T) {
	f := newAtomicFixture(t)
	hook := &answeredScripts{}
	holder, waiter := f.locker(t, nil), f.locker(t, hook)
	names := f.names("a", "b")
	// The holder's take loads the script, so each of the waiter's
	// attempts is one EVALSHA, counted by the hook once it is answered.
	unlockHolder, _, err := holder.lockAll(context.Background(), names[1:])
	if err != nil {
		t.Fatal(err)
	}
	type grant struct {
		unlock   func(context.Context) error
		attempts int64
		err      error
	}
	done := make(chan grant, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	go func() {
		unlock, attempts, err := waiter.lockAll(ctx, names)
		done <- grant{unlock, attempts, err}
	}()
	for hook.n.Load() < 2 { // two attempts answered while b is held
		select {
		case g := <-done:
			t.Fatalf("granted while b was held: %d attempts, err %v", g.attempts, g.err)
		case <-ctx.Done():
			t.Fatal("the waiter did not try twice")
		case <-time.After(time.Millisecond):
		}
	}
	if err := unlockHolder(context.Background()); err != nil {
		t.Fatal(err)
	}
	g := <-done
	if g.err != nil {
		t.Fatal(g.err)
	}
	if g.attempts < 2 {
		t.Errorf("attempts = %d, want at least 2", g.attempts)
	}
	if v := f.values(t, names); v[0] == "" || v[0] != v[1] {
		t.Errorf("values %q: want the waiter's in both", v)
	}
	if err := g.unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// Unlock deletes only the keys that still hold the grant's value: a name
// that someone else has taken since (after its time to live ran out)
// stays theirs, and Unlock says so.
func TestAtomicUnlockLeavesANameThatIsNoLongerItsOwn(t *testing.T) {
	f := newAtomicFixture(t)
	a := f.locker(t, nil)
	ctx := context.Background()
	names := f.names("a", "b")
	unlock, _, err := a.lockAll(ctx, names)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.srv.admin.Set(ctx, names[1], "someone else", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := unlock(ctx); !errors.Is(err, errNotReleased) {
		t.Errorf("unlock: %v, want errNotReleased", err)
	}
	if got := f.values(t, names); got[0] != "" || got[1] != "someone else" {
		t.Errorf("values %q: want a deleted and b left to its owner", got)
	}
}

// In the multi workload on Redis the atomic try-all lets no two grants
// share a name, retries, and leaves no key behind.
func TestAtomicTryAllExcludesInTheMultiWorkload(t *testing.T) {
	f := newAtomicFixture(t)
	sel, err := selectWorkloads(multiKey)
	if err != nil {
		t.Fatal(err)
	}
	w := sel.workloads[0]
	lockers := []locker{f.locker(t, nil), f.locker(t, nil)}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	tl := drive(ctx, w, lockers, f.prefix, w.goroutines)
	cancel()
	if tl.grants() == 0 {
		t.Fatal("no grant")
	}
	if err := tl.firstError(); err != nil {
		t.Error(err)
	}
	if v := tl.violations.Load(); v != 0 {
		t.Errorf("%d violations in %d grants", v, tl.grants())
	}
	if a := tl.attemptsPerGrant(); a <= 1 {
		t.Errorf("%.2f attempts per grant: 16 goroutines on 16 names never retried", a)
	}
	keys, err := f.srv.admin.Keys(context.Background(), f.prefix+":*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 0 {
		t.Errorf("keys left after the run: %s", strings.Join(keys, ", "))
	}
}

// Only the multi workload runs the atomic try-all, which has no
// single-lock form; -libs selects it like a library.
func TestAtomicTryAllRunsInTheMultiWorkloadOnly(t *testing.T) {
	libs, err := selectLibraries(libraries(libConfig{}), atomicName)
	if err != nil {
		t.Fatal(err)
	}
	if len(libs) != 1 || libs[0].name != atomicName {
		t.Fatalf("-libs %s selected %d libraries", atomicName, len(libs))
	}
	for _, w := range workloads {
		if got, want := libs[0].runsIn(w), w.key == multiKey; got != want {
			t.Errorf("runs in %s: %v, want %v", w.key, got, want)
		}
	}
	for _, lib := range libraries(libConfig{}) {
		if lib.name != atomicName && !lib.runsIn(workloads[0]) {
			t.Errorf("%s does not run in %s", lib.name, workloads[0].key)
		}
	}
}

// answeredScripts counts the script calls that Redis answered without an
// error: a waiter's attempts that came back, not those still on their way.
type answeredScripts struct{ n atomic.Int64 }

func (h *answeredScripts) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *answeredScripts) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if name := cmd.Name(); err == nil && (name == "evalsha" || name == "eval") {
			h.n.Add(1)
		}
		return err
	}
}

func (h *answeredScripts) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
