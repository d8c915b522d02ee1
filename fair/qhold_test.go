package fair

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock/internal/errs"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/fairlock/fairlock/lua"
	"github.com/fairlock/fairlock/queue"
)

// An Unlock that comes after the hold's validity passed, before the
// watchdog ended it (a process paused past its validity), reports the
// lease lost, not a release: no majority was known to keep the hold.
func TestQuorumUnlockPastTheValidityIsALostLease(t *testing.T) {
	servers := redistest.Masters(t, 3)
	var masters []Redis
	for _, s := range servers {
		masters = append(masters, s.Client(t))
	}
	qm, err := NewQuorum(masters, Config{WaiterTTL: 10 * time.Second, CallTimeout: 5 * time.Second}, QuorumConfig{Drift: 0.01})
	require.NoError(t, err)
	t.Cleanup(func() { _ = qm.Close() })
	keys, err := queue.Quorum(redistest.Prefix(t), "paused")
	require.NoError(t, err)
	l := qm.Mutex(keys)
	h, err := l.Lock(context.Background(), Request{Owner: "o", Lease: 30 * time.Second, Wait: true})
	require.NoError(t, err)

	h.mu.Lock()
	h.validity = time.Now().Add(-time.Millisecond) // as if paused past it
	h.mu.Unlock()
	err = h.Unlock(context.Background())
	require.True(t, errors.Is(err, errs.ErrLeaseLost), "Unlock: %v", err)
	require.ErrorIs(t, context.Cause(h.Context()), errs.ErrLeaseLost)
	// What was left of the hold is released in the background.
	other, err := l.Lock(context.Background(), Request{Owner: "p", Lease: 30 * time.Second, Wait: true})
	require.NoError(t, err)
	require.NoError(t, other.Unlock(context.Background()))
}

// delayReentries is a go-redis hook that holds back every qtry call in
// "reenter" mode for d before sending it.
type delayReentries struct{ d time.Duration }

func (h delayReentries) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h delayReentries) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		for _, a := range cmd.Args() {
			if a == queue.ModeReenter {
				time.Sleep(h.d)
			}
		}
		return next(ctx, cmd)
	}
}
func (h delayReentries) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// A hold's calls on one master land in the order they were made, even
// when the round they belong to did not wait for that master. Here a
// re-entry reaches master 2 late, after the hold's inner Unlock was
// answered by the others, and master 2 hands the lock to the hold's
// entry (still in line there) in between: without the order, the inner
// release finds nothing there, the re-entry then counts a second level
// on the hand-over's hold, and the last Unlock leaves one level behind.
func TestQuorumHoldCallsOnAMasterKeepTheirOrder(t *testing.T) {
	servers := redistest.Masters(t, 3)
	var masters []Redis
	var rdbs []*redis.Client
	for i, s := range servers {
		c := s.Client(t)
		if i == 2 {
			c.AddHook(delayReentries{d: 500 * time.Millisecond})
		}
		rdbs = append(rdbs, c)
		masters = append(masters, c)
	}
	qm, err := NewQuorum(masters, Config{WaiterTTL: 10 * time.Second, CallTimeout: 5 * time.Second}, QuorumConfig{Drift: 0.01})
	require.NoError(t, err)
	t.Cleanup(func() { _ = qm.Close() })
	keys, err := queue.Quorum(redistest.Prefix(t), "ordered")
	require.NoError(t, err)
	ctx := context.Background()

	// z holds masters 0 and 2 alone, by its own tries.
	zEntry := queue.Entry(queue.NewID()+"0000abcd"+queue.WakeVersion, time.Minute, "z")
	for _, i := range []int{0, 2} {
		rep, err := lua.ReadQTry(lua.Classic.QTry(keys, queue.NewID(), "z", zEntry, 60000, 10000, queue.ModeTry, 10000, 0).Run(ctx, rdbs[i]))
		require.NoError(t, err)
		require.Equal(t, lua.QHeld, rep.State)
	}
	l := qm.Mutex(keys)
	got := make(chan *QHold, 1)
	go func() {
		h, err := l.Lock(ctx, Request{Owner: "o", Lease: 30 * time.Second, Wait: true})
		if err != nil {
			t.Error(err)
		}
		got <- h
	}()
	zRelease := func(i int) {
		t.Helper()
		require.Eventually(t, func() bool {
			n, err := rdbs[i].ZCard(ctx, keys.Queue).Result()
			return err == nil && n == 1
		}, 5*time.Second, 5*time.Millisecond, "o's entry is in line on master %d", i)
		_, err := lua.ReadQRelease(lua.Classic.QRelease(keys, queue.NewID(), "z", zEntry, 0, 60000, true, 10000, 10000, 10000, 0).Run(ctx, rdbs[i]))
		require.NoError(t, err)
	}
	zRelease(0) // master 0 goes to o, which then holds 0 and 1
	h := <-got
	require.NotNil(t, h)

	require.NoError(t, h.Enter(ctx)) // counted on 0 and 1; master 2's is late
	require.NoError(t, h.Unlock(ctx))
	zRelease(2)                        // master 2 goes to o's entry, still in line there
	time.Sleep(700 * time.Millisecond) // the late re-entry lands
	require.NoError(t, h.Unlock(ctx))

	require.Eventually(t, func() bool {
		n, err := rdbs[2].Exists(ctx, keys.Lock).Result()
		return err == nil && n == 0
	}, 5*time.Second, 10*time.Millisecond, "a level of o's hold is left on master 2")
}

// The majority views are settled as soon as no master still out could
// change them, and not before: a re-entry counted on two of three
// masters, read from the one it has not reached yet and one it has, waits
// for the third.
func TestQuorumViewsSettleOnlyWhenNoMasterOutCouldChangeThem(t *testing.T) {
	l := &QMutex{qm: &Quorum{q: 2}}
	read := func(owner string, count int) holdRead { return holdRead{ok: true, owner: owner, count: count} }
	var out holdRead // a master that has not answered
	for _, tc := range []struct {
		name          string
		reads         []holdRead
		locked, count bool // settled for IsLocked, for HoldCount("o")
	}{
		{"one answer", []holdRead{read("o", 1), out, out}, false, false},
		{"two agree", []holdRead{read("o", 1), read("o", 1), out}, true, true},
		{"a re-entry on its way", []holdRead{read("o", 2), read("o", 1), out}, true, false},
		{"every master", []holdRead{read("o", 2), read("o", 1), read("o", 2)}, true, true},
		{"free on two", []holdRead{read("", 0), read("", 0), out}, true, true},
		{"another owner and a free master", []holdRead{read("x", 1), read("", 0), out}, false, true},
		{"five masters, two out", []holdRead{read("o", 3), read("o", 3), read("o", 3), out, out}, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if len(tc.reads) == 5 {
				l.qm.q = 3
				defer func() { l.qm.q = 2 }()
			}
			require.Equal(t, tc.locked, l.settled(tc.reads), "IsLocked's view")
			require.Equal(t, tc.count, l.countSettled(tc.reads, "o"), "HoldCount's view")
		})
	}
}
