package notify

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock/fairlock/internal/errs"
)

// Sharded mode: the scripts SPUBLISH a lock's wake message, which reaches
// only the nodes of the shard that serves the channel's slot, so the hub
// SSUBSCRIBEs each channel on that shard's master, through one connection
// per master (Hub.conns is keyed by the master's client). A channel is
// regrouped, that is subscribed again on the master that serves it now,
// when:
//
//   - the master answers its SSUBSCRIBE with MOVED (or ASK, TRYAGAIN,
//     CLUSTERDOWN): see Hub.refused;
//   - the master drops the subscription with an unsolicited "sunsubscribe"
//     (Redis 7 sends one to every subscriber of a slot that it hands to
//     another master, and of every slot when it turns into a replica): see
//     Hub.sunsubscribed;
//   - the connection fails: see Hub.reroute.
//
// The first two mark the topic stale and hand the channel to the regroup
// goroutine, which asks the cluster client to reload its map of the slots
// and then subscribes the channel where the map says, waiting up to
// regroupPatience for the map to name another master than the one that
// turned the channel away (go-redis reloads in the background). Waiters of
// a regrouped channel are signalled once its new subscription is
// confirmed, since a wake message may have been published in between.

// regroupPatience is how long a regroup waits for the cluster client's map
// to name another master than the one that refused or dropped the channel,
// before it subscribes where the map says all the same (and is refused
// again if the map was wrong, which starts another regroup).
const regroupPatience = time.Second

// regroupPoll is how often a regroup asks the cluster client's map again
// while it waits for it to change; reloadEvery is how often it asks the
// client to reload meanwhile.
const (
	regroupPoll = 10 * time.Millisecond
	reloadEvery = 250 * time.Millisecond
)

// regroup is a channel waiting to be subscribed again.
type regroup struct {
	from *redis.Client // the master that refused or dropped it
	due  time.Time     // not before: spaces out the regroups of a channel that keeps being refused
}

// learnMode makes sure the hub knows its mode, asking Options.Mode if it
// does not yet (outside h.mu: it may call Redis). It returns errs.ErrClosed once
// Close has started, and an error wrapping ctx.Err() if ctx ends first.
func (h *Hub) learnMode(ctx context.Context) error {
	h.mu.Lock()
	if !h.modeSet && h.modeOf == nil {
		h.mode, h.modeSet = Classic, true
	}
	set := h.modeSet
	h.mu.Unlock()
	if set {
		return nil
	}
	backoff := minBackoff
	for {
		var m Mode
		err := guard("Options.Mode", func() (err error) {
			m, err = h.modeOf(ctx)
			return err
		})
		if err == nil && m == Sharded && h.cluster == nil {
			return fmt.Errorf("sharded wake-ups need a Redis Cluster client, not %T", h.rdb)
		}
		if err == nil {
			h.mu.Lock()
			if !h.modeSet {
				h.mode, h.modeSet = m, true
				h.log.Debug("fairlock: notify: wake-up mode", "mode", m)
			}
			h.mu.Unlock()
			return nil
		}
		h.log.Debug("fairlock: notify: cannot tell yet how wake messages are published; asking again",
			"err", err, "backoff", backoff)
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return errors.Join(ctx.Err(), err)
		case <-h.done:
			t.Stop()
			return errs.ErrClosed
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// isSharded reports whether the hub is in Sharded mode.
func (h *Hub) isSharded() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.modeSet && h.mode == Sharded
}

// masterFor returns the client of the master that serves channel's slot,
// as the cluster client's map says. It may do network I/O (the first map
// is loaded on demand), so h.mu must not be held.
func (h *Hub) masterFor(ctx context.Context, channel string) (*redis.Client, error) {
	var master *redis.Client
	err := guard("MasterForKey", func() (err error) {
		master, err = h.cluster.MasterForKey(ctx, channel)
		return err
	})
	if err == nil && master == nil {
		err = errors.New("no master serves the channel's slot")
	}
	return master, err
}

// reloadSlots asks the cluster client to reload its map of the slots; it
// reloads in the background. h.mu must not be held.
func (h *Hub) reloadSlots() {
	_ = guard("ReloadState", func() error {
		h.cluster.ReloadState(h.ctx)
		return nil
	})
}

// elsewhere reports whether reply, an error reply to an SSUBSCRIBE, says
// that the channel's slot is served by another master, or by none for now.
func elsewhere(reply error) bool {
	msg := reply.Error()
	for _, p := range []string{"MOVED ", "ASK ", "TRYAGAIN", "CLUSTERDOWN"} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

// sunsubscribed handles a "sunsubscribe" on c: the answer to a SUNSUBSCRIBE
// of the hub's, or else the master dropping the channel by itself, which
// Redis 7 does when the channel's slot moves to another master or the
// master becomes a replica. A channel with waiters on c is then regrouped.
func (h *Hub) sunsubscribed(c *conn, channel string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, k := range c.awaiting {
		if k.unsub == channel && !k.unsubAnswered {
			k.unsubAnswered = true
			return
		}
	}
	t := h.topics.Get(channel)
	if t == nil || t.conn != c {
		return
	}
	h.log.Info("fairlock: notify: a master dropped a channel's subscription (its slot moved, or it is no master any more); regrouping it",
		"channel", channel)
	h.regroupLocked(t)
}

// regroupLocked marks t stale and queues its channel for the regroup
// goroutine, which it starts if it has not yet.
func (h *Hub) regroupLocked(t *topic) {
	if h.closed || h.topics.Get(t.name) != t || t.stale {
		return
	}
	t.stale = true
	t.regroups++
	var delay time.Duration
	if n := t.regroups; n > 1 {
		delay = maxBackoff
		if n < 8 {
			delay = min(minBackoff<<(n-2), maxBackoff)
		}
	}
	if h.regroups == nil {
		h.regroups = map[string]regroup{}
	}
	h.regroups[t.name] = regroup{from: t.conn.key, due: time.Now().Add(delay)}
	if !h.regrouper {
		h.regrouper = true
		h.wg.Go(h.regroupLoop)
	}
	select {
	case h.regroupKick <- struct{}{}:
	default:
	}
}

// regroupLoop is the regroup goroutine: it subscribes each queued channel
// again on the master that serves it now. It runs until the hub closes.
func (h *Hub) regroupLoop() {
	type item struct {
		regroup
		patience time.Time // until then, wait for the map to name another master than from
	}
	var pending map[string]item // nil while empty
	var reloaded time.Time
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		h.mu.Lock()
		fresh := len(h.regroups) > 0
		for name, r := range h.regroups {
			if pending == nil {
				pending = make(map[string]item)
			}
			pending[name] = item{regroup: r, patience: r.due.Add(regroupPatience)}
		}
		h.regroups = nil // a map keeps the room of its largest size
		h.mu.Unlock()

		if now := time.Now(); fresh || (len(pending) > 0 && now.Sub(reloaded) >= reloadEvery) {
			h.reloadSlots()
			reloaded = now
		}
		next := time.Now().Add(time.Hour)
		for name, it := range pending {
			if !h.stale(name) {
				delete(pending, name) // its waiters left, or a Watch moved it meanwhile
				continue
			}
			now := time.Now()
			if now.Before(it.due) {
				next = minTime(next, it.due)
				continue
			}
			key, err := h.masterFor(h.ctx, name)
			if h.ctx.Err() != nil {
				return
			}
			if err != nil {
				h.log.Debug("fairlock: notify: no master known for a channel to regroup; asking again",
					"channel", name, "err", err)
				it.due = now.Add(minBackoff)
				pending[name] = it
				next = minTime(next, it.due)
				continue
			}
			if key == it.from && now.Before(it.patience) {
				next = minTime(next, now.Add(regroupPoll))
				continue
			}
			delete(pending, name)
			h.resubscribe(name, key)
		}
		if len(pending) == 0 {
			pending = nil // a map keeps the room of its largest size
		}

		timer.Reset(time.Until(next))
		select {
		case <-h.ctx.Done():
			return
		case <-h.regroupKick:
		case <-timer.C:
		}
	}
}

// stale reports whether channel has waiters and a stale topic, one that
// a regroup is to replace.
func (h *Hub) stale(channel string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	t := h.topics.Get(channel)
	return t != nil && t.stale
}

// resubscribe moves the channel's topic, if it is still stale, to the
// connection of master key, which may be the one it was on.
func (h *Hub) resubscribe(channel string, key *redis.Client) {
	if !h.stale(channel) {
		return // no connection to open for it
	}
	dst, err := h.lockConn(key)
	if errors.Is(err, errs.ErrClosed) {
		return
	}
	if err != nil {
		h.log.Warn("fairlock: notify: cannot open a connection to regroup a channel; its waiters will rely on polling",
			"channel", channel, "err", err)
		h.mu.Lock()
		if t := h.topics.Get(channel); t != nil && t.stale {
			h.failLocked(t, fmt.Errorf("fairlock: notify: subscribing to %q: %w", channel, err))
		}
		h.mu.Unlock()
		return
	}
	var emptied *redis.PubSub
	if t := h.topics.Get(channel); t != nil && t.stale {
		_, emptied = h.moveLocked(t, dst)
	}
	h.mu.Unlock()
	closeIfAny(emptied)
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
