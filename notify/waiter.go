package notify

import (
	"errors"
	"strconv"
	"strings"
	"time"
)

// Waiter is one registration made by Hub.Watch: the id of one waiter of a
// lock, watching the lock's channel. Its methods are safe for concurrent
// use.
type Waiter struct {
	hub     *Hub
	topic   *topic // guarded by hub.mu; the channel's subscription, replaced when the channel moves to another shard
	channel string
	id      string
	c       chan struct{} // capacity 1; sent to without blocking

	// fn, when not nil, is called in place of a send on c (see Listen);
	// noteConfirm is guarded by hub.mu: fn is still to be called when the
	// subscription is confirmed.
	fn          func()
	noteConfirm bool

	stopped bool      // guarded by hub.mu; set by the first Stop
	granted bool      // guarded by hub.mu; sticky, set by the first grant
	token   int64     // guarded by hub.mu; fencing token of the latest grant
	tokens  []int64   // guarded by hub.mu; every token of the latest grant when it carried several (a ticket's), else nil
	at      int64     // guarded by hub.mu; server time (µs) the latest grant's message carried, 0 if none
	heard   time.Time // guarded by hub.mu; when the latest grant's message arrived
	missed  bool      // guarded by hub.mu; set by the first Missed
	// excused is guarded by hub.mu. It is set when the hub signals the
	// waiter because messages may have been lost: a hand-over its next
	// poll finds is then no miss of the current connection.
	excused bool
}

// C returns the waiter's signal channel, of capacity one. A value on it
// means "something happened, look": a grant or a wake arrived for this id,
// or messages may have been lost after a reconnect, a rebuild or a move to
// another shard. Signals are coalesced, and none are sent after Stop or
// Close.
func (w *Waiter) C() <-chan struct{} {
	return w.c
}

// Grant reports whether a grant message for this waiter's id has arrived
// and, if so, the fencing token of the latest one. Once ok, it stays ok.
// The token is recorded before the signal is sent, so a caller that
// receives from C and then calls Grant sees the grant that caused the
// signal.
func (w *Waiter) Grant() (token int64, ok bool) {
	w.hub.mu.Lock()
	defer w.hub.mu.Unlock()
	return w.token, w.granted
}

// Tokens returns every fencing token the latest grant message carried
// when it carried several, one per lock of a MultiLock's ticket in key
// order; nil for a grant of one lock, and before any grant.
func (w *Waiter) Tokens() []int64 {
	w.hub.mu.Lock()
	defer w.hub.mu.Unlock()
	return w.tokens
}

// GrantTime reports, for the latest grant message of this waiter's id,
// the server's time in µs that it carried (the time of the hand-over; 0
// for a message without one) and when this process received it (zero
// before any grant).
func (w *Waiter) GrantTime() (serverMicros int64, heard time.Time) {
	w.hub.mu.Lock()
	defer w.hub.mu.Unlock()
	return w.at, w.heard
}

// Stop unregisters the waiter. When it was the last waiter of its channel,
// the hub unsubscribes the channel in the background, at once or once it
// has lingered (Options.Linger) without a new waiter; Stop itself never
// waits for the network. Stop is idempotent.
func (w *Waiter) Stop() {
	h := w.hub
	h.mu.Lock()
	defer h.mu.Unlock()
	if w.stopped {
		return
	}
	w.stopped = true
	t := w.topic
	t.waiters.Delete(w.id)
	if t.waiters.Len() > 0 || h.topics.Get(t.name) != t {
		return
	}
	if h.linger > 0 && !h.closed {
		h.lingerLocked(t)
		return
	}
	h.topics.Delete(t.name)
	if !h.closed {
		h.queueUnsubscribeLocked(t.conn, t.name)
	}
}

// signal sends on w.c without blocking, or calls w.fn (see Listen).
// Requires hub.mu.
func (w *Waiter) signal() {
	if w.fn != nil {
		w.noteConfirm = false
		if !w.stopped {
			w.fn()
		}
		return
	}
	select {
	case w.c <- struct{}{}:
	default:
	}
}

var errMalformed = errors.New("malformed notification payload")

// message is one parsed message payload.
type message struct {
	id     string  // the waiter id it is for
	grant  bool    // a grant, not a wake
	token  int64   // a grant's fencing token: the first of tokens, when it has several
	tokens []int64 // every token of a grant of several locks (a ticket's), else nil
	at     int64   // a grant's server time in µs, 0 when it carries none
}

// parsePayload parses a message payload: "<id> <token> <µs>" and
// "<id> <token>" are grants, with and without the server's time of the
// hand-over; "<id>" is a wake. The token of a grant of several locks (a
// MultiLock's ticket) is every lock's, joined with commas.
func parsePayload(payload string) (message, error) {
	id, rest, grant := strings.Cut(payload, " ")
	if id == "" {
		return message{}, errMalformed
	}
	if !grant {
		return message{id: id}, nil
	}
	tok, at, timed := strings.Cut(rest, " ")
	m := message{id: id, grant: true}
	var err error
	if strings.Contains(tok, ",") {
		for t := range strings.SplitSeq(tok, ",") {
			n, err := strconv.ParseInt(t, 10, 64)
			if err != nil {
				return message{}, errMalformed
			}
			m.tokens = append(m.tokens, n)
		}
		m.token = m.tokens[0]
	} else if m.token, err = strconv.ParseInt(tok, 10, 64); err != nil {
		return message{}, errMalformed
	}
	if timed {
		if m.at, err = strconv.ParseInt(at, 10, 64); err != nil || m.at <= 0 {
			return message{}, errMalformed
		}
	}
	return m, nil
}

// Deliver hands payload to the waiters of channel as if it had been
// published there and received: a Client that made a hand-over to a
// waiter of its own gives it the wake message this way, without pub/sub.
// A message for a waiter that is gone is ignored, as a published one is.
func (h *Hub) Deliver(channel, payload string) {
	h.route(channel, payload)
}

// route delivers one message payload published on channel, whichever
// connection it arrived on.
func (h *Hub) route(channel, payload string) {
	m, err := parsePayload(payload)
	if err != nil {
		h.log.Debug("fairlock: notify: ignoring malformed message",
			"channel", channel, "payload", payload)
		return
	}
	h.mu.Lock()
	t := h.topics.Get(channel)
	if t == nil {
		h.mu.Unlock()
		return
	}
	w := t.waiters.Get(m.id)
	if w == nil {
		h.mu.Unlock()
		if m.grant && h.onUnclaimed != nil {
			h.onUnclaimed(channel, m.id)
		}
		return
	}
	if m.grant {
		w.token, w.tokens, w.granted, w.at, w.heard = m.token, m.tokens, true, m.at, time.Now()
	}
	w.signal()
	h.mu.Unlock()
}
