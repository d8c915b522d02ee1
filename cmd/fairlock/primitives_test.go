package main

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock"
)

// holds are the holders and waiters of a weighted lock, each on a Client
// of its own: clients[i] took holds[i] under owners[i]; waiters[i] waits
// under waiting[i], and its grant comes on waits[i]. A weighted lock's
// hold has an owner id of its own (ContextWithOwner does not apply),
// read back with Inspect.
type holds struct {
	clients []*fairlock.Client
	holds   []context.Context
	owners  []string
	waiters []*fairlock.Client
	waiting []string
	waits   []<-chan context.Context
}

// readOwners fills in the owners of h's holds and waits of the lock of
// kind called name, by their Clients' ids.
func (r *rig) readOwners(h *holds, name string, kind fairlock.Kind) {
	r.t.Helper()
	sts, err := h.clients[0].InspectAll(context.Background(), name)
	require.NoError(r.t, err)
	byClient := map[string]string{}
	for _, st := range sts {
		if st.Kind != kind {
			continue
		}
		for _, x := range st.Holders {
			byClient[x.Client] = x.Owner
		}
		for _, w := range st.Waiters {
			byClient[w.Client] = w.Owner
		}
	}
	for _, c := range h.clients {
		require.Contains(r.t, byClient, c.ID())
		h.owners = append(h.owners, byClient[c.ID()])
	}
	for _, c := range h.waiters {
		require.Contains(r.t, byClient, c.ID())
		h.waiting = append(h.waiting, byClient[c.ID()])
	}
}

// afterGrants waits until the server's clock has passed the millisecond
// of the latest grant of the lock of kind called name: holders are shown
// in the order of their grants' times, in ms, and those of one ms by
// owner id.
func (r *rig) afterGrants(c *fairlock.Client, name string, kind fairlock.Kind) {
	r.t.Helper()
	require.Eventually(r.t, func() bool {
		sts, err := c.InspectAll(context.Background(), name)
		if err != nil {
			return false
		}
		for _, st := range sts {
			if st.Kind != kind {
				continue
			}
			for _, h := range st.Holders {
				if st.At.UnixMilli() <= h.Since.UnixMilli() {
					return false
				}
			}
		}
		return true
	}, 10*time.Second, time.Millisecond, "the server's clock never passed the grant of %s %q", kind, name)
}

// semaphoreLine sets up the Semaphore name of 3 permits: two holders
// of 2 and 1 permits, then two waiters for 2 and 1.
func (r *rig) semaphoreLine(name string) *holds {
	r.t.Helper()
	h := &holds{}
	for _, n := range []int64{2, 1} {
		c := r.client()
		held, err := c.Semaphore(name, 3).Acquire(context.Background(), n)
		require.NoError(r.t, err)
		h.clients, h.holds = append(h.clients, c), append(h.holds, held)
		r.afterGrants(c, name, fairlock.KindSemaphore)
	}
	for i, n := range []int64{2, 1} {
		c := r.client()
		h.waiters = append(h.waiters, c)
		h.waits = append(h.waits, r.async(func(ctx context.Context) (context.Context, error) {
			return c.Semaphore(name, 3).Acquire(ctx, n)
		}))
		r.waitLine(c, name, fairlock.KindSemaphore, i+1)
	}
	r.readOwners(h, name, fairlock.KindSemaphore)
	return h
}

// rwLine sets up the RWMutex name: two readers hold it; a writer waits,
// then a reader.
func (r *rig) rwLine(name string) *holds {
	r.t.Helper()
	h := &holds{}
	for range 2 {
		c := r.client()
		held, err := c.RWMutex(name).RLock(context.Background())
		require.NoError(r.t, err)
		h.clients, h.holds = append(h.clients, c), append(h.holds, held)
		r.afterGrants(c, name, fairlock.KindRWMutex)
	}
	cw, cr := r.client(), r.client()
	h.waiters = []*fairlock.Client{cw, cr}
	h.waits = append(h.waits, r.async(func(ctx context.Context) (context.Context, error) {
		return cw.RWMutex(name).Lock(ctx)
	}))
	r.waitLine(cw, name, fairlock.KindRWMutex, 1)
	h.waits = append(h.waits, r.async(func(ctx context.Context) (context.Context, error) {
		return cr.RWMutex(name).RLock(ctx)
	}))
	r.waitLine(cr, name, fairlock.KindRWMutex, 2)
	r.readOwners(h, name, fairlock.KindRWMutex)
	return h
}

// ticket is a MultiLock of a, b and c waiting for b, which a Mutex
// holds.
type ticket struct {
	holder, waiter *fairlock.Client
	held           context.Context        // boss's hold of b
	granted        <-chan context.Context // the ticket's holds
}

// ticketLine has owner boss take the Mutex b, then owner batch's
// MultiLock of a, b and c wait for it with one ticket.
func (r *rig) ticketLine() *ticket {
	r.t.Helper()
	tk := &ticket{holder: r.client(), waiter: r.client()}
	var err error
	tk.held, err = tk.holder.Mutex("b").Lock(fairlock.ContextWithOwner(context.Background(), "boss"))
	require.NoError(r.t, err)
	tk.granted = r.async(func(ctx context.Context) (context.Context, error) {
		return tk.waiter.MultiLock([]string{"a", "b", "c"}).Lock(fairlock.ContextWithOwner(ctx, "batch"))
	})
	r.waitLine(tk.holder, "b", fairlock.KindMutex, 1)
	return tk
}

// owners are the owners of holders, in order.
func owners(hs []holderJSON) []string {
	var out []string
	for _, h := range hs {
		out = append(out, h.Owner)
	}
	return out
}

// token returns the fencing token of a hold.
func token(t *testing.T, tok func(context.Context) (int64, error), held context.Context) int64 {
	t.Helper()
	n, err := tok(held)
	require.NoError(t, err)
	return n
}
