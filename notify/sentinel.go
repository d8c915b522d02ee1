package notify

import (
	"context"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock/fairlock/internal/pause"
	"github.com/fairlock/fairlock/internal/shortly"
)

// A go-redis failover client asks one sentinel for the primary (the first
// that answered it), and moves to a new primary when that sentinel
// announces the switch (+switch-master) or at its own next dial. A
// sentinel other than the failover's leader hears of the switch from the
// leader's hello, which on a loaded machine can come two seconds after the
// leader announced it; until then a client that asks that sentinel keeps
// its connections to the old primary, which stays a writable master until
// Sentinel demotes it, some ten seconds later. What the client does there
// is lost when the old primary is demoted.
//
// So the hub of a failover client follows every sentinel. With its first
// connection it subscribes, through the client, to the hello that each
// sentinel publishes every two seconds on every server it monitors
// (__sentinel__:hello: the sentinel's address, and the name, address and
// configuration epoch of the master as that sentinel knows it), and to
// +switch-master on each sentinel a hello names (maxSentinels at most).
// When one of them announces a switch of the master the hellos name, the
// hub asks that sentinel for the master (SENTINEL MASTER); if its
// configuration epoch is newer than any the hub knows, the primary moved
// there, and the hub leaves the old one (redirect.go). A hello of a newer
// epoch that names another master says the same, up to two seconds later:
// it covers sentinels the hub cannot follow (one that wants a password,
// say).
//
// A server whose ACL refuses the hellos' channel leaves the hub with the
// client's dials to go by (primary.go).

const (
	helloChannel  = "__sentinel__:hello"
	switchChannel = "+switch-master"
	maxSentinels  = 16               // sentinels followed at most
	sentinelRetry = 10 * time.Second // before a sentinel that could not be followed is tried again
	sentinelQuiet = 5 * time.Second  // a subscription silent that long is PINGed
	sentinelCall  = time.Second      // bounds a dial of a sentinel, and a question whose answer can wait
)

// follower follows the primary of a failover client for its hub: through
// Sentinel (this file), and by moving the client's connections
// (redirect.go).
type follower struct {
	h   *Hub
	rdb *redis.Client // the failover client; fixed

	mu      sync.Mutex
	started bool                     // guarded by mu; the hellos' subscription was started
	name    string                   // guarded by mu; the master's name, from the first hello
	epoch   int64                    // guarded by mu; the newest configuration epoch known
	primary string                   // guarded by mu; the master of that epoch, "" until a hello
	links   map[string]*sentinelLink // guarded by mu; by the sentinel's address
	// See redirect.go. All guarded by mu.
	direct bool                      // a connection of the client reached a master that a hello named
	to     string                    // while not "", the client's dials go to this new primary
	conns  map[*trackedConn]struct{} // the client's own open connections
}

// sentinelLink is one sentinel the hellos named.
type sentinelLink struct {
	sc    *redis.SentinelClient // guarded by follower.mu; while its +switch-master is followed, else nil
	tried time.Time             // guarded by follower.mu; when following it last started
}

func newFollower(h *Hub, rdb *redis.Client) *follower {
	return &follower{h: h, rdb: rdb,
		links: map[string]*sentinelLink{}, conns: map[*trackedConn]struct{}{}}
}

// startLocked starts the hellos' subscription, once. Requires h.mu, with
// the hub not closed.
func (f *follower) startLocked() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.started {
		f.started = true
		f.h.wg.Go(f.hellos)
	}
}

// hellos reads Sentinel's hellos until the hub closes. Its connection is
// the hub's own: its dials do not count as the client's.
func (f *follower) hellos() {
	ctx := context.WithValue(f.h.ctx, dialKey{}, dialMark{h: f.h})
	for {
		var ps *redis.PubSub
		if err := guard("Subscribe", func() error { ps = f.rdb.Subscribe(ctx, helloChannel); return nil }); err != nil || ps == nil {
			return
		}
		closeNow := closeOnDone(ctx, func() { closePubSub(ps) })
		err := listen(ctx, ps, f.hello)
		closeNow()
		if isReply(err) && !shortly.Reply(err) {
			f.h.log.Info("fairlock: notify: Sentinel's hellos refused; following the primary through the client's dials only",
				"channel", helloChannel, "err", err)
			return
		}
		if !pause.For(ctx, time.Second) {
			return
		}
	}
}

// listen hands the payload of every message on ps to handle until ps
// fails, stays silent after a PING, or ctx ends, and returns why.
func listen(ctx context.Context, ps *redis.PubSub, handle func(payload string)) error {
	pinged := false
	for {
		rctx, cancel := context.WithTimeout(ctx, sentinelQuiet+sentinelCall)
		msg, err := receive(rctx, ps, sentinelQuiet)
		cancel()
		if m, ok := msg.(*redis.Message); ok {
			handle(m.Payload)
		}
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case err == nil:
			pinged = false
		case isTimeout(err) && !pinged:
			pinged = true
			_ = ps.Ping(ctx)
		default:
			return err
		}
	}
}

// closeOnDone calls shut as soon as ctx ends, so that Close does not wait
// for a receive or a question to a sentinel to time out. The function it
// returns calls shut, unless ctx's end did, and returns once it has run.
func closeOnDone(ctx context.Context, shut func()) (closeNow func()) {
	shutDone := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		shut()
		close(shutDone)
	})
	return func() {
		if stop() {
			shut()
		} else {
			<-shutDone
		}
	}
}

// hello handles a hello: sentinel-ip,sentinel-port,run-id,current-epoch,
// master-name,master-ip,master-port,master-config-epoch.
func (f *follower) hello(payload string) {
	p := strings.Split(payload, ",")
	if len(p) != 8 {
		return
	}
	epoch, err := strconv.ParseInt(p[7], 10, 64)
	if err != nil {
		return
	}
	addr, master := net.JoinHostPort(p[0], p[1]), net.JoinHostPort(p[5], p[6])
	f.mu.Lock()
	if f.name == "" {
		f.name = p[4]
	}
	if p[4] != f.name { // a server monitored under several names: the first is followed
		f.mu.Unlock()
		return
	}
	moved := f.newerLocked(master, epoch)
	for c := range f.conns {
		if c.addr == master {
			f.direct = true
			break
		}
	}
	link := f.links[addr]
	if link == nil && len(f.links) < maxSentinels {
		link = &sentinelLink{}
		f.links[addr] = link
	}
	follow := link != nil && link.sc == nil && time.Since(link.tried) > sentinelRetry
	if follow {
		link.tried = time.Now()
	}
	f.mu.Unlock()
	if moved {
		f.switchTo(master)
	}
	if follow {
		f.h.goUnlessClosed(func() { f.follow(addr, link) })
	}
}

// newerLocked records that master is the primary in configuration epoch,
// and reports whether that moves the primary known so far. Requires mu.
func (f *follower) newerLocked(master string, epoch int64) bool {
	if f.primary != "" && epoch <= f.epoch {
		return false
	}
	moved := f.primary != "" && f.primary != master
	f.epoch, f.primary = epoch, master
	return moved
}

// follow listens to the sentinel at addr for +switch-master until it fails
// or the hub closes; a later hello that names it follows it again.
func (f *follower) follow(addr string, link *sentinelLink) {
	o := f.rdb.Options()
	sc := redis.NewSentinelClient(&redis.Options{Addr: addr, Protocol: 2, TLSConfig: o.TLSConfig,
		DialTimeout: sentinelCall, ReadTimeout: sentinelQuiet, ContextTimeoutEnabled: true,
		MaxRetries: -1, PoolSize: 2, DisableIdentity: true})
	ctx := f.h.ctx
	defer closeOnDone(ctx, func() { _ = sc.Close() })()
	ps := sc.Subscribe(ctx, switchChannel)
	defer closeOnDone(ctx, func() { closePubSub(ps) })()
	sctx, cancel := context.WithTimeout(ctx, sentinelQuiet)
	_, err := ps.Receive(sctx)
	cancel()
	if err != nil {
		f.h.log.Debug("fairlock: notify: cannot follow a sentinel", "sentinel", addr, "err", err)
		return
	}
	f.mu.Lock()
	link.sc = sc
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		link.sc, link.tried = nil, time.Now()
		f.mu.Unlock()
	}()
	err = listen(ctx, ps, func(payload string) { f.announced(ctx, sc, payload) })
	if ctx.Err() == nil {
		f.h.log.Debug("fairlock: notify: lost a sentinel", "sentinel", addr, "err", err)
	}
}

// announced handles a +switch-master from sc: master-name old-ip old-port
// new-ip new-port. The sentinel's own answer, with its configuration
// epoch, decides: an announcement can arrive late. A sentinel too slow to
// answer leaves the announcement itself, taken when it moves the primary
// the hub knows: one that moves another primary is older than what the
// hub knows.
func (f *follower) announced(ctx context.Context, sc *redis.SentinelClient, payload string) {
	p := strings.Fields(payload)
	if len(p) != 5 {
		return
	}
	old, master := net.JoinHostPort(p[1], p[2]), net.JoinHostPort(p[3], p[4])
	f.mu.Lock()
	ours := p[0] == f.name
	f.mu.Unlock()
	if !ours {
		return
	}
	qctx, cancel := context.WithTimeout(ctx, sentinelQuiet)
	defer cancel()
	m, err := sc.Master(qctx, p[0]).Result()
	var epoch int64
	if err == nil {
		master = net.JoinHostPort(m["ip"], m["port"])
		epoch, err = strconv.ParseInt(m["config-epoch"], 10, 64)
	}
	f.mu.Lock()
	var moved bool
	switch {
	case err == nil:
		moved = f.newerLocked(master, epoch)
	case f.primary == old:
		f.h.log.Debug("fairlock: notify: a sentinel announced a switch but did not say the master",
			"err", err)
		f.primary, moved = master, true // a hello gives its epoch
	}
	f.mu.Unlock()
	if moved {
		f.switchTo(master)
	}
}

// goUnlessClosed runs fn on a goroutine of the hub, unless Close started.
func (h *Hub) goUnlessClosed(fn func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.closed {
		h.wg.Go(fn)
	}
}
