package notify

import (
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock/fairlock/internal/shrink"
)

// topicState is where a topic's subscription stands.
type topicState int

const (
	pending   topicState = iota // SUBSCRIBE queued or sent, not yet confirmed
	confirmed                   // Redis has processed the SUBSCRIBE
	failed                      // Redis refused it, or no connection could be opened; err says why
	moved                       // superseded by a topic on another shard's connection
)

// topic is the subscription of one channel on one connection. A topic is
// created by the first Watch of its channel and dropped when its last
// waiter stops or its subscription fails; a later Watch of the same channel
// creates a new topic, so confirmations never outlive the subscription they
// were for. When the channel moves to another shard (or, in Sharded mode,
// is subscribed again after its master dropped it), a new topic takes over
// its waiters.
type topic struct {
	name    string
	conn    *conn                       // the connection that subscribes it; fixed
	waiters shrink.Map[string, *Waiter] // guarded by Hub.mu; id -> waiter
	state   topicState                  // guarded by Hub.mu
	err     error                       // guarded by Hub.mu; what Watch returns once state is failed
	ready   chan struct{}               // closed when state leaves pending
	// lossy is guarded by Hub.mu. It is true when messages for the
	// channel may have been lost before this subscription (it took over
	// from another shard): every waiter is signalled once it is confirmed.
	lossy bool
	// stale is guarded by Hub.mu. In Sharded mode it is set when the
	// master refused the SSUBSCRIBE (MOVED: the slot lives elsewhere) or
	// dropped the subscription (its slot moved, or it is no master any
	// more): the topic is never confirmed, and a regroup replaces it.
	stale bool
	// regroups is guarded by Hub.mu: how many times in a row the channel
	// was regrouped without being confirmed, which spaces out the next
	// regroup. A new topic takes it over when the channel moves.
	regroups int
	// idle and linger are guarded by Hub.mu. idle counts the times the
	// topic was left without waiters; linger unsubscribes it after
	// Options.Linger unless a waiter came (or it was left again) since.
	idle   int
	linger *time.Timer
}

// confirmation is what the answer to one PING confirms.
type confirmation struct {
	payload string
	topic   *topic // the topic whose SUBSCRIBE precedes the PING, if any
	rebuilt bool   // the last PING of a rebuild: signal every waiter of the connection when answered
	// unsub is the channel of the SUNSUBSCRIBE that precedes the PING, in
	// Sharded mode, where a master answers a SUNSUBSCRIBE of a slot it
	// does not serve with an error. unsubAnswered is set when its
	// "sunsubscribe" reply arrives, so that the reply is not taken for
	// the master dropping the channel.
	unsub         string
	unsubAnswered bool
}

// subscribeLocked creates the topic of channel on c and queues its
// SUBSCRIBE and confirmation PING.
func (h *Hub) subscribeLocked(c *conn, channel string) *topic {
	t := &topic{name: channel, conn: c, ready: make(chan struct{})}
	h.topics.Set(channel, t)
	h.queueSubscribeLocked(t)
	return t
}

// queueSubscribeLocked queues the SUBSCRIBE of t on its connection,
// followed by the PING whose answer confirms it.
func (h *Hub) queueSubscribeLocked(t *topic) {
	c := t.conn
	c.enqueueLocked(op{
		ps:        c.ps,
		subscribe: t.name,
		ping:      true,
		payload:   h.newPingLocked(c, &confirmation{topic: t}),
	})
}

// moveLocked hands the waiters of t to a new topic of the same channel on
// dst, the connection of the shard that owns the channel now, and
// unsubscribes the channel on t's connection. Messages published on the new
// shard before the new subscription is confirmed are lost, so the waiters
// are signalled once it is. dst may be t's own connection (a regroup that
// subscribes again on the same master): the UNSUBSCRIBE is queued first.
//
// In Sharded mode a connection that the move leaves without a channel is
// retired: its master no longer serves any channel of ours (it may have
// become a replica). moveLocked then returns its PubSub, for the caller to
// close once h.mu is released, else nil.
func (h *Hub) moveLocked(t *topic, dst *conn) (*topic, *redis.PubSub) {
	h.log.Debug("fairlock: notify: channel moved to another shard; re-subscribing it there",
		"channel", t.name, "waiters", t.waiters.Len())
	src := t.conn
	h.queueUnsubscribeLocked(src, t.name)
	nt := h.subscribeLocked(dst, t.name)
	nt.lossy = true
	nt.regroups = t.regroups
	for id, w := range t.waiters.All() {
		w.topic = nt
		nt.waiters.Set(id, w)
	}
	t.waiters = shrink.Map[string, *Waiter]{}
	t.settleLocked(moved)
	if nt.waiters.Len() == 0 && h.linger > 0 {
		h.lingerLocked(nt) // it lingered where it was: it lingers here
	}
	if src.sharded && src != dst && !src.retired && !h.watchedLocked(src) {
		h.retireLocked(src)
		return nt, src.ps
	}
	return nt, nil
}

// lingerLocked keeps t, which has just lost its last waiter, subscribed
// for the hub's linger: a Watch meanwhile finds it confirmed. Then, unless
// a waiter came, t is dropped and its channel unsubscribed.
func (h *Hub) lingerLocked(t *topic) {
	t.idle++
	idle := t.idle
	if t.linger != nil {
		t.linger.Stop()
	}
	t.linger = time.AfterFunc(h.linger, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.closed || h.topics.Get(t.name) != t || t.waiters.Len() > 0 || t.idle != idle {
			return
		}
		h.topics.Delete(t.name)
		h.queueUnsubscribeLocked(t.conn, t.name)
	})
}

// queueUnsubscribeLocked queues the UNSUBSCRIBE of channel on c. In
// Sharded mode a PING follows the SUNSUBSCRIBE: a master answers it with an
// error when it no longer serves the channel's slot, and the PING lets
// that error be told apart from the answer to an SSUBSCRIBE (see
// Hub.refused).
func (h *Hub) queueUnsubscribeLocked(c *conn, channel string) {
	if c.retired {
		return
	}
	o := op{ps: c.ps, unsubscribe: channel}
	if c.sharded {
		o.ping = true
		o.payload = h.newPingLocked(c, &confirmation{unsub: channel})
	}
	c.enqueueLocked(o)
}

// confirmLocked marks t as subscribed and releases the Watch calls waiting
// for it. A stale topic is not confirmed: its regroup will be.
func (h *Hub) confirmLocked(t *topic) {
	if t.state != pending || t.stale {
		return
	}
	t.regroups = 0
	t.settleLocked(confirmed)
	if t.lossy {
		t.lossy = false
		t.signalLocked()
		return
	}
	for _, w := range t.waiters.All() {
		if w.noteConfirm {
			w.noteConfirm = false
			w.signal()
		}
	}
}

// failLocked ends t with err: the Watch calls waiting for it return err,
// and the channel is dropped, so that a later Watch subscribes afresh. A
// topic that was already confirmed (a rebuild's SUBSCRIBE was refused)
// keeps its waiters but receives nothing more; they are signalled and must
// rely on polling.
func (h *Hub) failLocked(t *topic, err error) {
	if h.topics.Get(t.name) != t {
		return // dropped or moved: nobody waits on this subscription
	}
	h.topics.Delete(t.name)
	if t.state == confirmed {
		h.log.Warn("fairlock: notify: subscription of a watched channel lost; its waiters will rely on polling",
			"channel", t.name, "err", err)
	}
	t.err = err
	t.settleLocked(failed)
	t.signalLocked()
	// go-redis remembers every channel it was asked to subscribe, and
	// would subscribe it again after a reconnect.
	h.queueUnsubscribeLocked(t.conn, t.name)
}

// refusedError is the error of Watch when Redis answers the SUBSCRIBE of
// channel with the error reply reply.
func refusedError(channel string, reply error) error {
	return fmt.Errorf("fairlock: notify: subscribing to %q refused: %w", channel, reply)
}

// settleLocked moves t to state s, releasing the Watch calls waiting for t
// if it was pending.
func (t *topic) settleLocked(s topicState) {
	if t.state == pending {
		close(t.ready)
	}
	t.state = s
}

// signalLocked signals every waiter of t: messages may have been lost, so
// each is excused from counting a missed hand-over (see Waiter.Missed).
func (t *topic) signalLocked() {
	for _, w := range t.waiters.All() {
		w.excused = true
		w.signal()
	}
}
