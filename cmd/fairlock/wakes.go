package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/queue"
)

// wakes follows the hand-overs of the locks of one name on their wake
// channels: the scripts publish a grant to a waiter there, and a forced
// unlock's revocation. One pattern subscription per server catches the
// channels of the name's Mutex, Semaphore, RWMutex and Election (each
// under its own base: P:{N}:wake, P:{N}:sem:wake, P:{N}:rw:wake,
// P:{N}:e:wake, each followed by a Client's tag) and the Election's leader
// channel (P:{N}:e:leader, told of every change of its leadership, a new
// value and a leader gone with nobody in line among them), or on a quorum
// the lock's channels on every master (P:{N}:q:wake). A MultiLock's ticket
// is granted every one of its locks at once, and its grant is published on
// the channel of its first lock only, in key order: while a ticket waits
// in the line of the name, the channels of its first lock are followed too
// (track). A hand-over to a waiter of the very Client that gave the lock
// up publishes nothing (the Client hands it over itself), nor does a lock
// taken while free: those are seen at the next timer tick.
type wakes struct {
	prefix, name string
	// heard gets a value when a message came since the last receive,
	// follow when a ticket's first lock is followed from now on; each
	// keeps one value, so that any number of them make one redraw.
	heard, follow chan struct{}
	pss           []*redis.PubSub
	tickets       *redis.PubSub   // the subscription that follows tickets' first locks; nil on a quorum
	followed      map[string]bool // the patterns of tickets' first locks subscribed; owned by the watch loop
	mu            sync.Mutex
	pending       map[string]bool // patterns subscribed, not yet confirmed; guarded by mu
	wg            sync.WaitGroup  // the goroutines that read pss
}

// subscribe follows the wake channels of the locks called name, and
// returns once the servers have confirmed it, so that no hand-over after
// it goes unseen. On a Redis Cluster it returns nil: Redis 7 publishes
// hand-overs there with SPUBLISH on a channel per Client, which no
// pattern catches, and watch redraws on its timer only. On a quorum, a
// minority of masters that cannot be subscribed to yet are subscribed to
// in the background.
func subscribe(ctx context.Context, d *deployment, prefix, name string, timeout time.Duration) (*wakes, error) {
	if d.cluster() {
		return nil, nil
	}
	var patterns []string
	if d.quorum() {
		k, err := queue.Quorum(prefix, name)
		if err != nil {
			return nil, err
		}
		patterns = []string{escapeGlob(k.Wake) + "*"}
	} else {
		m, err := queue.For(prefix, name)
		if err != nil {
			return nil, err
		}
		s, _ := queue.Weighted(prefix, name, queue.KindSemaphore)
		rw, _ := queue.Weighted(prefix, name, queue.KindRWMutex)
		el, _ := queue.Election(prefix, name)
		patterns = []string{escapeGlob(m.Wake) + "*", escapeGlob(s.Wake) + "*", escapeGlob(rw.Wake) + "*",
			escapeGlob(el.Wake) + "*", escapeGlob(el.Leader)}
	}
	w := &wakes{prefix: prefix, name: name, heard: make(chan struct{}, 1), follow: make(chan struct{}, 1),
		followed: map[string]bool{}, pending: map[string]bool{}}
	var failed []error
	for _, rdb := range d.rdbs {
		ps := rdb.PSubscribe(ctx, patterns...)
		w.pss = append(w.pss, ps)
		sctx, cancel := context.WithTimeout(ctx, timeout)
		_, err := ps.Receive(sctx) // the first confirmation: Redis took the command, every pattern with it
		cancel()
		if err != nil && ctx.Err() == nil {
			if strings.HasPrefix(err.Error(), "NOPERM") {
				err = fmt.Errorf("%w: subscribing to the lock's wake channels (the user needs +psubscribe): %v", fairlock.ErrNoPermission, err)
			}
			failed = append(failed, err)
		}
	}
	if n := len(d.rdbs); len(failed) > 0 && (!d.quorum() || len(failed) > n-(n/2+1)) {
		w.close()
		return nil, failed[0]
	}
	if !d.quorum() {
		w.tickets = w.pss[0]
	}
	for _, ps := range w.pss {
		ch := ps.ChannelWithSubscriptions()
		w.wg.Go(func() { w.read(ch) })
	}
	return w, nil
}

// read hands what ch brings to heard and follow, until ch is closed.
func (w *wakes) read(ch <-chan any) {
	for m := range ch {
		switch m := m.(type) {
		case *redis.Message:
			nudge(w.heard)
		case *redis.Subscription:
			// The last confirmation of the patterns subscribed together
			// makes one redraw.
			w.mu.Lock()
			confirmed := m.Kind == "psubscribe" && w.pending[m.Channel]
			delete(w.pending, m.Channel)
			confirmed = confirmed && len(w.pending) == 0
			w.mu.Unlock()
			if confirmed {
				nudge(w.follow)
			}
		}
	}
}

// nudge puts a value in c unless it has one.
func nudge(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// Heard yields when a hand-over was heard; Followed when a ticket's
// first lock is followed from now on (the grant may have come before:
// look again). Both are nil, never ready, on a nil wakes.
func (w *wakes) Heard() <-chan struct{} {
	if w == nil {
		return nil
	}
	return w.heard
}

func (w *wakes) Followed() <-chan struct{} {
	if w == nil {
		return nil
	}
	return w.follow
}

// track follows the wake channels of the first locks of the tickets in
// the line of v's Mutex, when another lock is first, and stops following
// those of tickets gone. A failure is left to the timer: the next view
// tries again.
func (w *wakes) track(ctx context.Context, v view) {
	if w == nil || w.tickets == nil {
		return
	}
	want := map[string]bool{}
	for _, st := range v.locks {
		for _, wt := range st.Waiters {
			// A ticket's grant is published on its first lock's channel
			// (Locks are in key order, as the scripts take them).
			if wt.Kind != fairlock.WaitsTicket || len(wt.Locks) == 0 || wt.Locks[0] == v.name {
				continue
			}
			if k, err := queue.For(w.prefix, wt.Locks[0]); err == nil {
				want[escapeGlob(k.Wake)+"*"] = true
			}
		}
	}
	var add, drop []string
	for p := range want {
		if !w.followed[p] {
			add = append(add, p)
		}
	}
	for p := range w.followed {
		if !want[p] {
			drop = append(drop, p)
		}
	}
	if len(add) > 0 {
		w.mu.Lock()
		for _, p := range add {
			w.pending[p] = true
		}
		w.mu.Unlock()
		if w.tickets.PSubscribe(ctx, add...) == nil {
			for _, p := range add {
				w.followed[p] = true
			}
		}
	}
	if len(drop) > 0 && w.tickets.PUnsubscribe(ctx, drop...) == nil {
		for _, p := range drop {
			delete(w.followed, p)
		}
	}
}

// close ends the subscriptions and waits for their readers.
func (w *wakes) close() {
	if w == nil {
		return
	}
	for _, ps := range w.pss {
		ps.Close()
	}
	w.wg.Wait()
}

// escapeGlob escapes the characters special in a Redis glob pattern.
func escapeGlob(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\^`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
