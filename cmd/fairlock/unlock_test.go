package main

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestUnlockWithoutYesRemovesNothing(t *testing.T) {
	r := sharedRig(t)
	l := r.lineUp("orders", 1)
	token, err := l.holder.Mutex("orders").Token(l.held)
	require.NoError(t, err)

	code, out, errs := r.cmd("unlock", "--force", "orders")
	assert.Equal(t, exitError, code)
	assert.Empty(t, out)
	assert.Contains(t, errs, fmt.Sprintf(`refused without --yes: it would remove the hold of lock "orders" (owner boss, client %s, token %d`, l.holder.ID(), token))
	assert.Contains(t, errs, "the next waiter (owner w1, client "+l.waiters[0].ID()+") would be granted it")

	st, err := l.holder.Inspect(t.Context(), "orders")
	require.NoError(t, err)
	assert.True(t, st.Held)
	assert.Equal(t, "boss", st.Owner)
	assert.Equal(t, token, st.Token)
	assert.Len(t, st.Waiters, 1)
}

func TestUnlockWithYesRemovesTheHoldAndGrantsTheNextWaiter(t *testing.T) {
	for _, asJSON := range []bool{false, true} {
		t.Run(fmt.Sprintf("json=%v", asJSON), func(t *testing.T) {
			r := sharedRig(t)
			l := r.lineUp("orders", 1)
			token, err := l.holder.Mutex("orders").Token(l.held)
			require.NoError(t, err)

			args := []string{"--force", "--yes", "orders"}
			if asJSON {
				args = append(args, "--json")
			}
			code, out, errs := r.cmd("unlock", args...)
			require.Equal(t, exitOK, code, errs)
			if asJSON {
				var got unlockJSON
				require.NoError(t, json.Unmarshal([]byte(out), &got), out)
				assert.Equal(t, unlockJSON{Name: "orders", Removed: true, Owner: "boss", Client: l.holder.ID(), Token: token}, got)
			} else {
				assert.Equal(t, fmt.Sprintf("removed the hold of lock %q: owner boss, client %s, token %d\n", "orders", l.holder.ID(), token), out)
			}

			select {
			case h := <-l.granted[0]:
				n, err := l.waiters[0].Mutex("orders").HoldCount(h)
				require.NoError(t, err)
				assert.Equal(t, 1, n, "w1 holds the lock")
			case <-time.After(5 * time.Second):
				t.Fatal("the next waiter was not granted the lock")
			}
		})
	}
}

func TestUnlockOfAFreeLockExitsWithStatus1(t *testing.T) {
	r := sharedRig(t)
	code, out, errs := r.cmd("unlock", "--force", "--yes", "free")
	assert.Equal(t, exitNotFound, code)
	assert.Empty(t, out)
	assert.Contains(t, errs, `lock "free" is not held`)

	code, out, _ = r.cmd("unlock", "--force", "--yes", "-json", "free")
	assert.Equal(t, exitNotFound, code)
	var got unlockJSON
	require.NoError(t, json.Unmarshal([]byte(out), &got), out)
	assert.Equal(t, unlockJSON{Name: "free"}, got)
}
