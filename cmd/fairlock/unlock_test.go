package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock"
)

func TestUnlockWithoutYesRemovesNothing(t *testing.T) {
	t.Parallel()
	r := sharedRig(t)
	l := r.lineUp("orders", 1)
	tok := token(t, l.holder.Mutex("orders").Token, l.held)

	code, out, errs := r.cmd("unlock", "--force", "orders")
	assert.Equal(t, exitError, code)
	assert.Empty(t, out)
	assert.Contains(t, errs, fmt.Sprintf(`refused without --yes: it would remove the hold of mutex "orders" (owner boss, client %s, 1 level(s), token %d, held for `, l.holder.ID(), tok))
	assert.Contains(t, errs, "the first waiter (lock, owner w1, client "+l.waiters[0].ID()+") would be granted it")
	assert.Contains(t, errs, "overlap: ")

	st, err := l.holder.Inspect(t.Context(), "orders")
	require.NoError(t, err)
	assert.True(t, st.Held)
	assert.Equal(t, "boss", st.Owner)
	assert.Equal(t, tok, st.Token)
	assert.Len(t, st.Waiters, 1)
}

func TestUnlockWithYesRemovesTheHoldGrantsTheNextWaiterAndSaysTheOverlap(t *testing.T) {
	t.Parallel()
	for _, asJSON := range []bool{false, true} {
		t.Run(fmt.Sprintf("json=%v", asJSON), func(t *testing.T) {
			r := sharedRig(t)
			l := r.lineUp("orders", 1)
			tok := token(t, l.holder.Mutex("orders").Token, l.held)

			args := []string{"--force", "--yes", "orders"}
			if asJSON {
				args = append(args, "--json")
			}
			code, out, errs := r.cmd("unlock", args...)
			require.Equal(t, exitOK, code, errs)
			if asJSON {
				got := decode[unlockJSON](t, out)
				require.NotNil(t, got.Holder)
				require.NotNil(t, got.Next)
				assert.Equal(t, unlockJSON{Schema: schemaVersion, Command: "unlock", Name: "orders", Kind: ptr("mutex"), At: got.At, Removed: true,
					Holder: &holderJSON{Owner: "boss", Client: l.holder.ID(), Weight: 1, Count: 1, Token: tok,
						Since: got.Holder.Since, HeldForMS: got.Holder.HeldForMS, LeaseLeftMS: got.Holder.LeaseLeftMS},
					Next: &waiterJSON{Kind: "lock", Owner: "w1", Client: l.waiters[0].ID(), Weight: 1,
						WaitedForMS: got.Next.WaitedForMS, TimeLeftMS: got.Next.TimeLeftMS},
					OverlapMaxMS: got.Holder.LeaseLeftMS}, got)
				assert.Positive(t, got.OverlapMaxMS)
			} else {
				assert.Regexp(t, fmt.Sprintf(`^removed the hold of mutex "orders": owner boss, client %s, 1 level\(s\), token %d, held for [0-9.]+m?s, lease left [0-9.]+s\n`,
					l.holder.ID(), tok), out)
				assert.Contains(t, out, "cancels the hold's\n    context (cause ErrLeaseLost) within that message's latency")
				assert.Regexp(t, `at the latest when its lease would have\n    ended: in [0-9.]+s\.`, out)
				assert.Contains(t, out, "a holder that does not use that context, nor a fencing token, may go on acting")
				assert.Contains(t, out, fmt.Sprintf("the former holder (token %d)", tok))
			}

			h := granted(t, l.granted[0], "the next waiter")
			n, err := l.waiters[0].Mutex("orders").HoldCount(h)
			require.NoError(t, err)
			assert.Equal(t, 1, n, "w1 holds the lock")
			select {
			case <-l.held.Done():
				require.ErrorIs(t, context.Cause(l.held), fairlock.ErrLeaseLost, "the former holder's context ended")
			case <-h.Done():
				t.Fatal("w1's hold ended")
			case <-time.After(10 * time.Second):
				t.Fatal("the former holder's context did not end")
			}
		})
	}
}

// -owner guards a Mutex's removal: another owner's hold is left alone.
func TestUnlockOfAMutexHeldByAnotherOwnerRemovesNothing(t *testing.T) {
	t.Parallel()
	r := sharedRig(t)
	l := r.lineUp("orders", 0)
	code, out, errs := r.cmd("unlock", "--force", "--yes", "-owner", "someone", "orders")
	assert.Equal(t, exitNotFound, code)
	assert.Empty(t, out)
	assert.Contains(t, errs, `mutex "orders" is held by owner boss, not someone: nothing removed`)
	require.NoError(t, l.held.Err())
	code, _, errs = r.cmd("unlock", "--force", "--yes", "-owner", "boss", "orders")
	assert.Equal(t, exitOK, code, errs)
}

func TestUnlockOfAFreeLockExitsWithStatus1(t *testing.T) {
	t.Parallel()
	r := sharedRig(t)
	code, out, errs := r.cmd("unlock", "--force", "--yes", "free")
	assert.Equal(t, exitNotFound, code)
	assert.Empty(t, out)
	assert.Contains(t, errs, `lock "free" is not held`)

	code, out, _ = r.cmd("unlock", "--force", "--yes", "-json", "free")
	assert.Equal(t, exitNotFound, code)
	got := decode[unlockJSON](t, out)
	assert.Equal(t, unlockJSON{Schema: schemaVersion, Command: "unlock", Name: "free", At: got.At}, got)
	require.NotNil(t, got.At)
}

// A Semaphore's or a RWMutex's holds are removed one owner's at a time:
// -owner is required, and refused without --yes. This version of the
// library cannot remove them, which the command says, removing nothing.
func TestUnlockOfAWeightedLockNeedsAnOwner(t *testing.T) {
	t.Parallel()
	r := sharedRig(t)
	p := r.semaphoreLine("pool")
	rw := r.rwLine("doc")

	code, _, errs := r.cmd("unlock", "--force", "--yes", "pool")
	assert.Equal(t, exitError, code)
	assert.Contains(t, errs, fmt.Sprintf(`a semaphore has a hold per owner: name the one to remove with -owner; "pool" is held by %s (weight 2) and %s (weight 1)`, p.owners[0], p.owners[1]))
	code, _, errs = r.cmd("unlock", "--force", "--yes", "-owner", "nobody", "pool")
	assert.Equal(t, exitNotFound, code)
	assert.Contains(t, errs, `owner nobody holds no part of semaphore "pool"`)

	code, out, errs := r.cmd("unlock", "--force", "-owner", p.owners[0], "pool")
	assert.Equal(t, exitError, code)
	assert.Empty(t, out)
	assert.Contains(t, errs, fmt.Sprintf(`refused without --yes: it would remove the hold of semaphore "pool" (owner %s, client %s, 2 permit(s), 1 level(s), token `, p.owners[0], p.clients[0].ID()))
	assert.Contains(t, errs, "the first waiter (permits, owner "+p.waiting[0]+", client "+p.waiters[0].ID()+") would be granted it if what the hold frees is enough")
	assert.Contains(t, errs, "the permits in use may exceed the 3 by its 2")

	code, _, errs = r.cmd("unlock", "--force", "-owner", rw.owners[1], "doc")
	assert.Equal(t, exitError, code)
	assert.Contains(t, errs, fmt.Sprintf(`it would remove the hold of rwmutex "doc" (owner %s, client %s, a reader, `, rw.owners[1], rw.clients[1].ID()))
	assert.Contains(t, errs, "it may still read while a writer writes")

	for _, c := range []struct {
		name, owner string
		held        context.Context
	}{{"pool", p.owners[0], p.holds[0]}, {"doc", rw.owners[1], rw.holds[1]}} {
		code, out, errs = r.cmd("unlock", "--force", "--yes", "-owner", c.owner, c.name)
		require.Equal(t, exitOK, code, "%s: %s", c.name, errs)
		assert.Contains(t, out, "removed the hold of", c.name)
		select {
		case <-c.held.Done():
			assert.ErrorIs(t, context.Cause(c.held), fairlock.ErrLeaseLost, c.name)
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: the forced holder's context is still live", c.name)
		}
	}
	require.NoError(t, p.holds[1].Err(), "the Semaphore's other holder keeps its hold")
	require.NoError(t, rw.holds[0].Err(), "the RWMutex's other reader keeps its hold")
	code, out, errs = r.cmd("inspect", "-json", "pool")
	require.Equal(t, exitOK, code, errs)
	got := owners(decode[inspectJSON](t, out).Locks[0].Holders)
	assert.NotContains(t, got, p.owners[0], "the forced holder is gone")
	assert.Contains(t, got, p.owners[1])
	assert.Len(t, got, 2, "the first waiter's 2 permits fit beside the other holder's 1")
}

// A name held as several kinds: -kind says which.
func TestUnlockOfANameHeldAsSeveralKindsNeedsAKind(t *testing.T) {
	t.Parallel()
	r := sharedRig(t)
	c := r.client()
	ctx := fairlock.ContextWithOwner(context.Background(), "one")
	m, err := c.Mutex("shared").Lock(ctx)
	require.NoError(t, err)
	s, err := c.Semaphore("shared", 2).Acquire(ctx, 1)
	require.NoError(t, err)

	code, _, errs := r.cmd("unlock", "--force", "--yes", "shared")
	assert.Equal(t, exitError, code)
	assert.Contains(t, errs, `lock "shared" is held as a mutex and a semaphore: name one with -kind`)
	code, _, errs = r.cmd("unlock", "--force", "--yes", "-kind", "rwmutex", "shared")
	assert.Equal(t, exitNotFound, code)
	assert.Contains(t, errs, `no rwmutex "shared" is held`)
	code, out, errs := r.cmd("unlock", "--force", "--yes", "-kind", "mutex", "shared")
	require.Equal(t, exitOK, code, errs)
	assert.Contains(t, out, `removed the hold of mutex "shared": owner one`)
	<-m.Done()
	assert.NoError(t, s.Err(), "the Semaphore's hold is kept")
}
