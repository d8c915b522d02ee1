package notify

import (
	"time"

	"github.com/redis/go-redis/v9"
)

// A missed hand-over is a waiter's poll that finds the lock already
// granted to it while no grant message for it has arrived: the release
// script published the grant, and the hub did not hear it. One such miss
// is an ordinary race (the poll's answer overtook the message, or the
// poll took a lock whose holder died, which no script announces); misses
// that repeat on one connection mean it listens to a server that no longer
// receives the publications. For a failover client the hub sees that
// coming through its dials (primary.go); a client whose address is a name
// or a proxy that moved to another server shows it only this way. Polls
// find every hand-over meanwhile, each a third of the waiter TTL late.
//
// missThreshold misses within missWindow on one connection make the hub
// rebuild it through the client (which dials the current primary) or, in
// Sharded mode, regroup its channels after reloading the slot map; at most
// once per refreshEvery per connection. Misses are found by polls, which
// come a third of the waiter TTL apart, so the window spans two poll
// intervals of a waiter TTL of up to 45s: two misses can follow one
// another along a single lock's line of waiters. A needless rebuild costs
// one reconnection and one poll per waiter of the connection, and the
// rate limit bounds how often that can happen.
const (
	missThreshold = 2
	missWindow    = 30 * time.Second
	refreshEvery  = 10 * time.Second
)

// Missed tells the hub that a poll of w's waiter found the lock already
// granted to it. Unless a grant message for w has arrived, that hand-over
// was not pushed, and the hub counts a miss on the connection that
// subscribes w's channel (see missThreshold). A waiter counts once, and
// not at all after the hub signalled it because messages may have been
// lost (a rebuild, a reconnect, a move), nor after Stop or Close. Missed
// never waits for the network.
func (w *Waiter) Missed() {
	h := w.hub
	h.mu.Lock()
	if h.closed || w.stopped || w.granted || w.missed || w.excused {
		h.mu.Unlock()
		return
	}
	w.missed = true
	t := w.topic
	c := t.conn
	if h.topics.Get(t.name) != t || t.state != confirmed || t.stale || c.retired || c.rebuilding {
		h.mu.Unlock()
		return
	}
	now := time.Now()
	c.misses = append(recent(c.misses, now), now)
	if len(c.misses) < missThreshold || (!c.refreshed.IsZero() && now.Sub(c.refreshed) < refreshEvery) {
		h.mu.Unlock()
		return
	}
	c.misses = nil
	c.refreshed = now
	c.refreshes++
	if c.sharded {
		n := 0
		for _, t := range h.topics.All() {
			if t.conn == c {
				h.regroupLocked(t)
				n++
			}
		}
		h.mu.Unlock()
		h.log.Info("fairlock: notify: hand-overs were found by polls, not pushed; regrouping the channels of the connection",
			"channels", n)
		return
	}
	ps := c.ps
	c.refresh = ps
	h.mu.Unlock()
	h.log.Info("fairlock: notify: hand-overs were found by polls, not pushed; rebuilding the pub/sub connection",
		"misses", missThreshold, "within", missWindow)
	closePubSub(ps) // the reader notices and rebuilds
}

// recent returns the times of misses that are still within missWindow of
// now, reusing the slice.
func recent(misses []time.Time, now time.Time) []time.Time {
	kept := misses[:0]
	for _, m := range misses {
		if now.Sub(m) < missWindow {
			kept = append(kept, m)
		}
	}
	return kept
}

// refreshing reports whether ps, which just failed, was closed by Missed
// to be rebuilt, and forgets it.
func (h *Hub) refreshing(c *conn, ps *redis.PubSub) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if c.refresh != ps || ps == nil {
		return false
	}
	c.refresh = nil
	return true
}
