package lua

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock/fairlock/internal/errs"
)

// Via is how a call reaches the server.
type Via uint8

const (
	// BySHA is EVALSHA: the script by its SHA1, which the server must have
	// cached.
	BySHA Via = iota
	// BySource is EVAL: the script's text.
	BySource
	// ByFunction is FCALL of the call's function, whose library the
	// server must have loaded.
	ByFunction
)

// A Runner sends the calls of one Redis deployment (the go-redis client of
// one server, its failover client, a Cluster or a Ring), each by FCALL of
// its function where the deployment can, else by EVALSHA:
//
//   - a call is first sent by FCALL (Redis 7 and later);
//   - where the server lacks the library (its first use, FUNCTION FLUSH,
//     a restart without persistence, a new cluster master), the call is
//     sent again at once by EVAL, as a script the server lacked would be,
//     and the Runner loads the library (FUNCTION LOAD, on every master of
//     a Cluster or shard of a Ring), once however many calls found it
//     missing, for the calls after it: in the background when Go is set,
//     else before the call is sent again, by FCALL;
//   - where the server does not know FCALL (Redis 6), or the user may not
//     run it or load the library (an ACL), the call goes by EVALSHA, and
//     so does every later call of the Runner;
//   - a call the server refused to start for memory (it is at its
//     maxmemory, where Redis starts no function that may write) is sent
//     again by EVALSHA, whose writes the server refuses one by one, as the
//     scripts rely on (see allow_full in lib.lua); later calls try FCALL
//     again;
//   - by EVALSHA, a call whose script the server lacks is sent again by
//     EVAL.
//
// Nothing runs on the server when it answers any of these, so sending the
// call again never runs it twice. A call that finds the library missing
// costs what one that finds its script missing does, one round trip more
// than a call that finds it: a quorum's masters, say, which may have the
// library or not, answer a Lock's first calls alike. Pipelines follow the
// same rules with Start, Send and Again. A Runner is safe for concurrent
// use.
type Runner struct {
	// Detach returns the context a load of the library runs under, made
	// from the context of the call that found it missing: a load serves
	// every later call, so it must not end with the call that started it
	// (the call of a quorum's slowest master, say, whose context ends
	// once a majority answered). nil: ctx without its cancellation, for
	// loadTimeout at most.
	Detach func(ctx context.Context) (context.Context, context.CancelFunc)
	// Go runs a load of the library in the background and reports
	// whether it did (false: the owner is closing, and nothing loads).
	// nil: a call that finds the library missing loads it before it is
	// sent again.
	Go func(f func()) bool

	scriptsOnly atomic.Bool
	// started counts the loads sent, and covered is the number (in that
	// count) of the latest that succeeded: it serves every call sent
	// before it started (see load).
	started atomic.Uint64
	covered atomic.Uint64
	once    sync.Once
	loading chan struct{} // held while one loads

	mu      sync.Mutex // guards the two below
	running bool       // a load runs in the background
	// wanted is the load that calls which found the library missing
	// wait for in the background, after the one running (nil: none).
	wanted *wantedLoad
}

// wantedLoad is a background load that calls wait for: of the library of
// the latest of them, with its client and context, for the newest loads
// started that one of them saw.
type wantedLoad struct {
	ctx  context.Context
	rdb  Client
	lib  *Library
	seen uint64
}

// NewRunner returns a Runner of one deployment. A zero Runner is one too.
func NewRunner() *Runner { return &Runner{} }

// ScriptsOnly reports whether the Runner sends every call by EVALSHA, since
// the server or its user cannot run functions.
func (r *Runner) ScriptsOnly() bool { return r.scriptsOnly.Load() }

// Sending is where one call's sends stand.
type Sending struct {
	// Via is how to send the call next.
	Via    Via
	seen   uint64 // the loads the Runner had started when the call was first sent
	loaded bool   // a load was tried for the call
}

// Start returns how to send c first.
func (r *Runner) Start(c Call) Sending {
	s := Sending{Via: BySHA, seen: r.started.Load()}
	if c.Function != "" && !r.scriptsOnly.Load() {
		s.Via = ByFunction
	}
	return s
}

// Again reports whether c must be sent again after it was sent by s.Via
// and answered err, and sets s.Via to how. When the server lacked c's
// library, it loads the library on rdb first (the client the call was
// sent with, not a pipeline of it). false: err is the call's answer.
func (r *Runner) Again(ctx context.Context, rdb Client, c Call, s *Sending, err error) bool {
	if err == nil {
		return false
	}
	switch s.Via {
	case BySHA:
		if noScript(err) {
			s.Via = BySource
			return true
		}
	case ByFunction:
		msg, ok := errs.Reply(err)
		switch {
		case !ok:
		case functionsRefused(msg):
			r.scriptsOnly.Store(true)
			s.Via = BySHA
			return true
		case strings.HasPrefix(msg, "OOM"):
			s.Via = BySHA
			return true
		case strings.HasPrefix(msg, "ERR Function not found"):
			s.Via = BySource
			if s.loaded {
				return true
			}
			s.loaded = true
			if r.Go != nil {
				r.loadSoon(ctx, rdb, c.Library, s.seen)
				return true
			}
			if r.loadNow(ctx, rdb, c.Library, s.seen) == nil {
				s.Via = ByFunction
			}
			return true
		}
	}
	return false
}

// Run sends c with rdb, and again as Again says, and returns its reply.
func (r *Runner) Run(ctx context.Context, rdb Client, c Call) *redis.Cmd {
	s := r.Start(c)
	for {
		cmd := c.Send(ctx, rdb, s.Via)
		if !r.Again(ctx, rdb, c, &s, cmd.Err()) {
			return cmd
		}
	}
}

// Preload loads lib now, unless the Runner has loaded it or sends only
// scripts, so that the calls after it find the library: the first calls
// of a quorum's masters, each preloaded alike, then cost the same on each.
// A failure is left to those calls, which find the library missing.
func (r *Runner) Preload(ctx context.Context, rdb Client, lib *Library) {
	if r.scriptsOnly.Load() || r.covered.Load() > 0 {
		return
	}
	_ = r.loadNow(ctx, rdb, lib, 0)
}

// loadSoon loads lib in the background for a call that saw seen loads
// started; the load detaches itself from ctx (see load). While one runs
// there, the call waits for it, and for one more after it when the call
// was sent after it started: the library the running load sends may be
// gone already (a FUNCTION FLUSH between the two), so the newer call
// must not be taken as served by it. However many calls wait, one more
// load serves them all.
func (r *Runner) loadSoon(ctx context.Context, rdb Client, lib *Library, seen uint64) {
	r.mu.Lock()
	if r.wanted != nil {
		seen = max(seen, r.wanted.seen)
	}
	r.wanted = &wantedLoad{ctx: ctx, rdb: rdb, lib: lib, seen: seen}
	if r.running {
		r.mu.Unlock()
		return
	}
	r.running = true
	r.mu.Unlock()
	next := func() *wantedLoad {
		r.mu.Lock()
		defer r.mu.Unlock()
		w := r.wanted
		r.wanted = nil
		r.running = w != nil
		return w
	}
	if !r.Go(func() {
		for w := next(); w != nil; w = next() {
			_ = r.loadNow(w.ctx, w.rdb, w.lib, w.seen)
		}
	}) {
		r.mu.Lock()
		r.running, r.wanted = false, nil
		r.mu.Unlock()
	}
}

// loadNow loads lib (see load), and turns the Runner to scripts for good
// when the server or the user cannot load functions.
func (r *Runner) loadNow(ctx context.Context, rdb Client, lib *Library, seen uint64) error {
	err := r.load(ctx, rdb, lib, seen)
	if msg, ok := errs.Reply(err); ok && functionsRefused(msg) {
		r.scriptsOnly.Store(true)
	}
	return err
}

// loadTimeout bounds a load of a Runner without Detach.
const loadTimeout = 10 * time.Second

// load loads lib with rdb for a call that found it missing and saw seen
// loads started when it was sent, unless a load that started after that
// has succeeded: calls that find the library missing at once load it
// once. A load that started before the call was sent does not serve it,
// even if it ended after: the server may have run it before the call
// and lost the library between the two (FUNCTION FLUSH, a restart).
func (r *Runner) load(ctx context.Context, rdb Client, lib *Library, seen uint64) error {
	r.once.Do(func() { r.loading = make(chan struct{}, 1) })
	detach := r.Detach
	if detach == nil {
		detach = func(ctx context.Context) (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.WithoutCancel(ctx), loadTimeout)
		}
	}
	ctx, cancel := detach(ctx)
	defer cancel()
	select {
	case r.loading <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-r.loading }()
	if r.covered.Load() > seen {
		return nil
	}
	n := r.started.Add(1)
	if err := Load(ctx, rdb, lib); err != nil {
		return err
	}
	r.covered.Store(n) // loads run one at a time: n is the newest
	return nil
}

// Client is what a Runner needs of a go-redis client: every kind has it.
type Client interface {
	Sender
	FunctionLoad(ctx context.Context, code string) *redis.StringCmd
}

// Sender is what sending a call needs: a client, or a pipeline of one.
type Sender interface {
	redis.Scripter
	FCall(ctx context.Context, function string, keys []string, args ...any) *redis.Cmd
}

// Load loads lib on the server of rdb: on every master of a Cluster, on
// every shard of a Ring. A server that has it already answers as one that
// loads it.
func Load(ctx context.Context, rdb Client, lib *Library) error {
	one := func(ctx context.Context, c *redis.Client) error { return loadOn(ctx, c, lib) }
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, one)
	case *redis.Ring:
		return c.ForEachShard(ctx, one)
	}
	return loadOn(ctx, rdb, lib)
}

func loadOn(ctx context.Context, c Client, lib *Library) error {
	err := c.FunctionLoad(ctx, lib.Source).Err()
	if msg, ok := errs.Reply(err); ok && strings.Contains(msg, "'"+lib.Name+"' already exists") {
		return nil
	}
	return err
}

// functionsRefused reports whether an error reply says that the server
// does not know functions (before Redis 7: "ERR unknown command 'fcall'",
// quoted one way or another) or that the user may not call or load them
// (an ACL without FCALL or FUNCTION LOAD: "NOPERM ... the 'fcall'
// command").
func functionsRefused(msg string) bool {
	if strings.HasPrefix(msg, "NOPERM") {
		if strings.HasPrefix(msg, "NOPERM fairlock:") {
			return false // a script's own reply: it ran (see finish in lib.lua)
		}
		return strings.Contains(msg, "'fcall' command") || strings.Contains(msg, "'function|load' command") ||
			strings.Contains(msg, "'function' command")
	}
	rest, ok := strings.CutPrefix(strings.ToLower(msg), "err unknown command ")
	if !ok {
		return false
	}
	f := strings.Fields(rest)
	if len(f) == 0 {
		return false
	}
	name := strings.Trim(f[0], "'`,")
	return name == "fcall" || name == "function"
}

// noScript reports whether err says the server lacks the script.
func noScript(err error) bool {
	return err != nil && (errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT"))
}
