package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/queue"
)

// clearScreen moves the cursor home and clears the terminal.
const clearScreen = "\x1b[H\x1b[2J"

// watchMain is the watch command: a live view of one lock, redrawn on
// every hand-over and on a timer, until ctx ends or -for has passed.
func watchMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var (
		c          common
		every, dur time.Duration
		idle       bool
	)
	fs := c.flags("watch", "[flags] NAME",
		"Shows the state of the lock NAME, as inspect does, and redraws it on every\n"+
			"hand-over (it listens to the lock's wake channels) and every -every. On a\n"+
			"Redis Cluster it redraws on the timer only. When Redis goes away it says so,\n"+
			"keeps trying, and says when it is back. It runs until interrupted, or for\n"+
			"-for. On a terminal it redraws the screen; otherwise it appends snapshots\n"+
			"(with -json, one JSON object a line). A lock that nobody holds or waits\n"+
			"for when it starts is not found (exit status 1), unless -idle is given.\n", stderr)
	fs.DurationVar(&every, "every", time.Second, "redraw at least this often")
	fs.DurationVar(&dur, "for", 0, "stop after this long (0: run until interrupted)")
	fs.BoolVar(&idle, "idle", false, "watch the lock even if nobody holds it or waits for it yet")
	pos, code, ok := c.parse(fs, args, stderr)
	if !ok {
		return code
	}
	switch {
	case len(pos) != 1:
		return c.usageError(stderr, fmt.Errorf("want one lock NAME, got %d arguments", len(pos)))
	case every <= 0:
		return c.usageError(stderr, fmt.Errorf("-every %v: want a positive duration", every))
	case dur < 0:
		return c.usageError(stderr, fmt.Errorf("-for %v: want a positive duration, or 0", dur))
	}
	name := pos[0]
	keys, err := queue.For(c.prefix, name)
	if err != nil {
		return c.usageError(stderr, err)
	}
	rdb, fl, closeAll, err := c.connect()
	if err != nil {
		return c.fail(stderr, err)
	}
	defer closeAll()
	if dur > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, dur)
		defer cancel()
	}
	// Hand-overs are published on the lock's wake channels: classic
	// PUBLISH, caught by one pattern, except on a Redis Cluster, where
	// Redis 7 SPUBLISHes them on per-Client channels no pattern catches.
	// The subscription is confirmed before the first view, so that no
	// hand-over after it goes unseen.
	var wakes <-chan *redis.Message
	if _, cluster := rdb.(*redis.ClusterClient); !cluster {
		ps := rdb.PSubscribe(ctx, escapeGlob(keys.Wake)+"*")
		defer ps.Close()
		sctx, cancel := context.WithTimeout(ctx, c.timeout)
		_, err := ps.Receive(sctx)
		cancel()
		if err != nil && ctx.Err() == nil {
			if strings.HasPrefix(err.Error(), "NOPERM") {
				err = fmt.Errorf("%w: subscribing to the lock's wake channels (the user needs +psubscribe): %v", fairlock.ErrNoPermission, err)
			}
			return c.fail(stderr, err)
		}
		wakes = ps.Channel()
	}
	w := &watcher{c: &c, fl: fl, name: name, out: stdout, tty: isTerminal(stdout), every: every}
	// The first read is the first view, and without -idle it also tells
	// whether the lock is in use at all.
	st, err := w.read(ctx)
	switch {
	case ctx.Err() != nil:
		return exitOK // interrupted before the first view
	case err != nil && !idle:
		return c.fail(stderr, err)
	case err == nil && !idle && !found(st):
		return c.notFound(stderr, name, "; -idle watches it all the same")
	}
	if err := w.show(st, err, "start"); err != nil {
		return c.fail(stderr, err)
	}

	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		why := "timer"
		select {
		case <-ctx.Done():
			return exitOK
		case <-tick.C:
		case <-wakes:
			why = "hand-over"
		}
		_ = w.refresh(ctx, why) // shown; retried at the next tick
	}
}

// watcher draws the views of one lock.
type watcher struct {
	c     *common
	fl    *fairlock.Client
	name  string
	out   io.Writer
	tty   bool          // redraw the screen rather than append
	every time.Duration // the timer
	down  time.Time     // when Redis stopped answering; zero while it answers
}

// refresh reads the lock and draws it, or draws why it could not.
func (w *watcher) refresh(ctx context.Context, why string) error {
	st, err := w.read(ctx)
	if ctx.Err() != nil {
		return ctx.Err() // the end of the watch, not a failure of Redis
	}
	return w.show(st, err, why)
}

// read reads the lock, bounded by -timeout.
func (w *watcher) read(ctx context.Context) (fairlock.LockState, error) {
	rctx, cancel := context.WithTimeout(ctx, w.c.timeout)
	defer cancel()
	return w.fl.Inspect(rctx, w.name)
}

// show draws st, read for why, or why it could not be read (err); it
// returns err.
func (w *watcher) show(st fairlock.LockState, err error, why string) error {
	now := time.Now()
	if err != nil {
		if w.down.IsZero() {
			w.down = now
		}
		if w.c.json {
			writeJSON(w.out, map[string]any{"name": w.name, "at": now, "error": err.Error(), "down_since": w.down})
			return err
		}
		w.draw(fmt.Sprintf("Redis not answering since %s: %v\nreconnecting (every %s)...\n",
			w.down.Format("15:04:05"), err, w.every), now, "error")
		return err
	}
	reconnected := ""
	if !w.down.IsZero() {
		reconnected = fmt.Sprintf("reconnected at %s, after %s without Redis\n", now.Format("15:04:05"), now.Sub(w.down).Round(time.Millisecond))
		w.down = time.Time{}
		why = "reconnected"
	}
	if w.c.json {
		writeJSON(w.out, struct {
			lockJSON
			Why string `json:"why"`
		}{stateJSON(st), why})
		return nil
	}
	w.draw(reconnected+stateText(st), now, why)
	return nil
}

// draw writes one view with its header.
func (w *watcher) draw(body string, now time.Time, why string) {
	var b strings.Builder
	if w.tty {
		b.WriteString(clearScreen)
	}
	fmt.Fprintf(&b, "fairlock watch %q on %s, prefix %q: %s (%s)\n", w.name, w.c.spec, w.c.prefix, now.Format("15:04:05.000"), why)
	b.WriteString(body)
	if !w.tty {
		b.WriteString("\n")
	}
	io.WriteString(w.out, b.String())
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
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
