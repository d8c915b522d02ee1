package fairlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Observe sends the election's leadership on the channel it returns: the
// current one at once, then every change, a new term, a new value, or no
// leader (a Leadership with Term 0), until ctx ends or the Client closes,
// when the channel is closed.
//
// Changes are pushed, not polled: every script that changes an election's
// leadership tells it on the election's channel, which the Client watches
// through its one pub/sub connection, and the Client then reads the
// leadership once for all its observers of the election. A lease that
// runs out tells nothing: the Client reads again when the lease it last
// read would end (once per lease, as the leader renews it), so a leader
// whose process died with nobody in line is reported gone at most a
// round trip after its lease ended; with candidates in line, the next
// one's election is pushed as any. After a reconnect or a failover, when
// messages may have been lost, the Client reads the leadership again and
// sends it if it changed.
//
// A leader whose lease runs out while candidates wait is seen gone (no
// leader) when the watcher reads at the lease's end, and the next
// candidate's election is told once it polls, at about the same time.
//
// Views never go backwards: no term lower than one already sent is sent.
// A receiver that falls behind gets the latest view, not every one in
// between; and a leadership that begins and ends between two reads of
// the Client's watcher (a short one, on a busy Client) is not sent at
// all: the observers' view, no leader, was the state after it. While
// Redis does not answer, the channel stays open and the Client reads
// again, with a backoff, until it does.
//
// Observe returns once the Client's subscription to the election's
// channel is confirmed (at once when it already observes the election),
// so that no change after it returns goes untold; or when ctx ends
// first, with ctx's error. It differs from etcd's Observe in returning
// an error as well: a handle or a context that cannot be observed (an
// invalid name, a nil context, a closed Client) and a subscription Redis
// refuses (ErrNoPermission: an ACL without the election's channel) fail
// at once instead of giving a closed channel.
func (e *Election) Observe(ctx context.Context) (<-chan Leadership, error) {
	if err := e.usable(ctx); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, ctxErr(ctx)
	}
	o := &observer{out: make(chan Leadership), kick: make(chan struct{}, 1)}
	w, err := e.c.leaders.join(e, o)
	if err != nil {
		return nil, err
	}
	select {
	case <-w.started:
	case <-ctx.Done():
		e.c.leaders.leave(w, o)
		return nil, ctxErr(ctx)
	}
	if w.startErr != nil {
		e.c.leaders.leave(w, o)
		return nil, w.startErr
	}
	go o.run(ctx, w)
	return o.out, nil
}

// leaderWatches are a Client's watchers of elections, one per election
// observed, by its hash key.
type leaderWatches struct {
	mu     sync.Mutex
	m      map[string]*leaderWatch // guarded by mu
	closed bool                    // guarded by mu; set by close
}

// join adds o to the watcher of e's election, starting one when there is
// none, and returns it.
func (ws *leaderWatches) join(e *Election, o *observer) (*leaderWatch, error) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.closed {
		return nil, ErrClosed
	}
	w := ws.m[e.keys.Lock]
	if w == nil {
		ctx, cancel := context.WithCancel(context.Background())
		w = &leaderWatch{e: e, ws: ws, cancel: cancel, started: make(chan struct{}), done: make(chan struct{}), obs: map[*observer]bool{}}
		if ws.m == nil {
			ws.m = map[string]*leaderWatch{}
		}
		ws.m[e.keys.Lock] = w
		go w.run(ctx)
	}
	w.add(o)
	return w, nil
}

// leave takes o off w; the last observer to leave stops w.
func (ws *leaderWatches) leave(w *leaderWatch, o *observer) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	w.mu.Lock()
	delete(w.obs, o)
	last := len(w.obs) == 0
	w.mu.Unlock()
	if last {
		ws.dropLocked(w)
	}
}

// drop forgets w and stops it, if it is still the watcher of its election.
func (ws *leaderWatches) drop(w *leaderWatch) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	ws.dropLocked(w)
}

// dropLocked is drop with ws.mu held.
func (ws *leaderWatches) dropLocked(w *leaderWatch) {
	if ws.m[w.e.keys.Lock] == w {
		delete(ws.m, w.e.keys.Lock)
	}
	w.cancel()
}

// close stops every watcher and waits for them: at Close, whose hub they
// subscribe through.
func (ws *leaderWatches) close() {
	ws.mu.Lock()
	ws.closed = true
	all := ws.m
	ws.m = nil
	ws.mu.Unlock()
	for _, w := range all {
		w.cancel()
		<-w.done
	}
}

// leaderWatch is the watcher of one election for all the observers of it
// in one Client: it watches the election's channel and reads the
// leadership when told, at the end of the lease it last read, and when
// messages may have been lost, and offers each reading to every observer.
type leaderWatch struct {
	e      *Election
	ws     *leaderWatches
	cancel context.CancelFunc
	// started is closed once the subscription to the election's channel
	// was confirmed or failed (startErr, written before).
	started  chan struct{}
	startErr error
	done     chan struct{} // closed when run returns

	mu   sync.Mutex
	obs  map[*observer]bool // guarded by mu
	last Leadership         // guarded by mu; the latest reading
	read bool               // guarded by mu; last was read
}

// add offers o the latest reading, if any, and every later one.
func (w *leaderWatch) add(o *observer) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.obs[o] = true
	if w.read {
		o.offer(w.last)
	}
}

// publish offers l to every observer.
func (w *leaderWatch) publish(l Leadership) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.last, w.read = l, true
	for o := range w.obs {
		o.offer(l)
	}
}

// Backoff of a watcher's reads while Redis does not answer.
const (
	watchRetryMin = 50 * time.Millisecond
	watchRetryMax = 2 * time.Second
)

// run watches until ctx ends or the Client closes. Its first step is the
// subscription: once it is confirmed, the hub keeps it across reconnects
// and failovers, and tells of messages that may have been lost there; a
// refused one (an ACL) ends the watcher, and Observe reports it.
func (w *leaderWatch) run(ctx context.Context) {
	defer close(w.done)
	sub, err := w.e.lock.WatchLeader(ctx)
	if err != nil && ctx.Err() == nil {
		w.startErr = fmt.Errorf("fairlock: observe election %q: %w", w.e.name, err)
	} else if err != nil {
		w.startErr = ctxErr(ctx)
	}
	close(w.started)
	if err != nil {
		w.ws.drop(w)
		return
	}
	defer sub.Stop()
	log := w.e.c.cfg.clientLogger(w.e.c.ID())
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	retry := watchRetryMin
	names := map[string]string{} // Client names by ID: a Client's name never changes
	for {
		l, lease, err := w.e.readLease(ctx, names)
		switch {
		case ctx.Err() != nil || errors.Is(err, ErrClosed):
			return
		case err != nil:
			log.Debug("fairlock: cannot read the election's leader; trying again", "election", w.e.name, "err", err, "retry", retry)
			timer.Reset(retry)
			retry = min(2*retry, watchRetryMax)
		default:
			retry = watchRetryMin
			w.publish(l)
			if l.HasLeader() {
				timer.Reset(lease + time.Millisecond) // a lease that runs out tells nothing
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-sub.C():
		case <-timer.C:
		}
		timer.Stop()
	}
}

// observer is one Observe call: the latest view offered, which its
// goroutine sends on out.
type observer struct {
	out  chan Leadership
	kick chan struct{} // capacity 1: a view is pending

	mu      sync.Mutex
	pending Leadership // guarded by mu; the view to send next, when fresh
	fresh   bool       // guarded by mu; pending is still to be sent
	offered Leadership // guarded by mu; the latest view offered
	has     bool       // guarded by mu; a view was offered
	top     int64      // guarded by mu; the highest term offered
}

// offer makes l the next view to send, unless it is the view offered
// last or would go backwards: a term lower than one offered before.
func (o *observer) offer(l Leadership) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if (l.HasLeader() && l.Term < o.top) || (o.has && l.same(o.offered)) {
		return
	}
	o.offered, o.pending, o.has, o.fresh = l, l, true, true
	o.top = max(o.top, l.Term)
	select {
	case o.kick <- struct{}{}:
	default:
	}
}

// run sends the views offered on out, each time the latest, until ctx
// ends or w stops; then it leaves w and closes out.
func (o *observer) run(ctx context.Context, w *leaderWatch) {
	defer close(o.out)
	defer w.ws.leave(w, o)
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.done:
			return
		case <-o.kick:
		}
		l, ok := o.take()
		for ok {
			select {
			case o.out <- l:
				ok = false
			case <-o.kick: // a newer view, perhaps: send the latest
				if newer, fresh := o.take(); fresh {
					l = newer
				}
			case <-ctx.Done():
				return
			case <-w.done:
				return
			}
		}
	}
}

// take returns the view to send, unless it was taken already.
func (o *observer) take() (Leadership, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	fresh := o.fresh
	o.fresh = false
	return o.pending, fresh
}
