package fairlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/queue"
)

// FuzzMutexName: any name either is refused with ErrInvalidName, changing
// nothing, or locks and unlocks with every key of the lock in one cluster
// slot. Never a panic, never a hang.
func FuzzMutexName(f *testing.F) {
	for _, seed := range []string{"orders:42", "", "}", "a}b", "{x}", "new\nline", "\xff", "ünï cödé"} {
		f.Add(seed)
	}
	e := newEnv(f)
	c := e.client()
	f.Fuzz(func(t *testing.T, name string) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		m := c.Mutex(name)
		lctx, err := m.TryLock(ctx)
		if _, err := queue.For("p", name); err != nil {
			if !errors.Is(err, fairlock.ErrInvalidName) {
				t.Fatalf("name %q: want ErrInvalidName, got %v", name, err)
			}
			return
		}
		if err != nil {
			t.Fatalf("name %q: %v", name, err)
		}
		k, err := queue.For(e.prefix, name)
		if err != nil {
			t.Fatal(err)
		}
		slot := e.rdb.ClusterKeySlot(ctx, k.Lock).Val()
		for _, key := range []string{k.Queue, k.Deadline, k.Token, k.Call("x")} {
			if got := e.rdb.ClusterKeySlot(ctx, key).Val(); got != slot {
				t.Fatalf("name %q: key %q in slot %d, the lock in %d", name, key, got, slot)
			}
		}
		if err := m.Unlock(lctx); err != nil {
			t.Fatalf("name %q: unlock: %v", name, err)
		}
	})
}

// FuzzOptions: any option values either make New (or the handle) fail with
// ErrInvalidOption, or give a Client that works. Never a panic.
func FuzzOptions(f *testing.F) {
	f.Add("fairlock", int64(30*time.Second), int64(10*time.Second), int64(0))
	f.Add("", int64(0), int64(-1), int64(-1))
	f.Add("a{b", int64(time.Millisecond), int64(time.Hour), int64(time.Millisecond))
	f.Add("p", int64(1<<62), int64(10*time.Millisecond), int64(10*time.Millisecond))
	// New opens nothing; a call with an ended context returns at once, and
	// the questions it started in the background give up at the refused
	// dial instead of retrying it until the call timeout (Close waits for
	// them).
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	defer rdb.Close()
	f.Fuzz(func(t *testing.T, prefix string, lease, ttl, fixed int64) {
		c, err := fairlock.New(rdb, fairlock.WithPrefix(prefix),
			fairlock.WithLease(time.Duration(lease)), fairlock.WithWaiterTTL(time.Duration(ttl)))
		valid := queue.ValidatePrefix(prefix) == nil &&
			time.Duration(lease) >= fairlock.MinDuration && time.Duration(ttl) >= fairlock.MinDuration
		if !valid {
			if !errors.Is(err, fairlock.ErrInvalidOption) {
				t.Fatalf("want ErrInvalidOption, got %v", err)
			}
			return
		}
		if err != nil {
			t.Fatalf("valid options refused: %v", err)
		}
		defer c.Close()
		var mopts []fairlock.HandleOption
		if fixed != 0 {
			mopts = append(mopts, fairlock.WithFixedLease(time.Duration(fixed)))
		}
		// A context that has ended: the handle's own error comes first, and
		// a valid handle returns at once instead of dialling.
		done, cancel := context.WithCancel(context.Background())
		cancel()
		_, err = c.Mutex("n", mopts...).IsLocked(done)
		if fixed != 0 && time.Duration(fixed) < fairlock.MinDuration {
			if !errors.Is(err, fairlock.ErrInvalidOption) {
				t.Fatalf("fixed lease %v: want ErrInvalidOption, got %v", time.Duration(fixed), err)
			}
		} else if !errors.Is(err, context.Canceled) {
			t.Fatalf("fixed lease %v: a valid handle should report the ended context, got %v", time.Duration(fixed), err)
		}
	})
}
