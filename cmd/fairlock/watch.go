package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/fairlock/fairlock/queue"
)

// clearScreen moves the cursor home and clears the terminal.
const clearScreen = "\x1b[H\x1b[2J"

// watchMain is the watch command: a live view of the locks of one name,
// redrawn on every hand-over and on a timer, until ctx ends or -for has
// passed.
func watchMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var (
		c          common
		every, dur time.Duration
		idle       bool
	)
	fs := c.flags("watch", "[flags] NAME",
		"Shows the locks called NAME, as inspect does, and redraws them on every\n"+
			"hand-over (it listens to the locks' wake channels, and to those of the\n"+
			"first lock of a MultiLock ticket in line) and every -every. On a Redis\n"+
			"Cluster it redraws on the timer only. When Redis goes away it says so,\n"+
			"keeps trying, and says when it is back. It runs until interrupted, or for\n"+
			"-for. On a terminal it redraws the screen; otherwise it appends views\n"+
			"(with -json, one JSON object a line). A name that nobody holds or waits\n"+
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
	if _, err := queue.For(c.prefix, name); err != nil {
		return c.usageError(stderr, err)
	}
	ctx, d, done, code, ok := c.following(ctx, dur, stderr)
	if !ok {
		return code
	}
	defer done()
	// The subscription is confirmed before the first view, so that no
	// hand-over after it goes unseen.
	wk, err := subscribe(ctx, d, c.prefix, name, c.timeout)
	if err != nil {
		if ctx.Err() != nil {
			return exitOK
		}
		return c.fail(stderr, err)
	}
	defer wk.close()
	w := &watcher{c: &c, d: d, name: name, out: stdout, tty: isTerminal(stdout), every: every, start: time.Now()}
	// The first read is the first view, and without -idle it also tells
	// whether the lock is in use at all.
	v, err := w.read(ctx)
	switch {
	case ctx.Err() != nil:
		return exitOK // interrupted before the first view
	case err != nil && !idle:
		return c.fail(stderr, err)
	case err == nil && !idle && !v.found():
		return c.notFound(stderr, name, "; -idle watches it all the same")
	}
	w.show(v, err, "start")
	wk.track(ctx, v)

	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		why := "timer"
		select {
		case <-ctx.Done():
			return exitOK
		case <-tick.C:
		case <-wk.Heard():
			why = "hand-over"
		case <-wk.Followed():
			why = "follow"
		}
		v, err := w.read(ctx)
		if ctx.Err() != nil {
			return exitOK // the end of the watch, not a failure of Redis
		}
		w.show(v, err, why)
		if err == nil {
			wk.track(ctx, v)
		}
	}
}

// watcher draws the views of one name.
type watcher struct {
	c     *common
	d     *deployment
	name  string
	out   io.Writer
	tty   bool          // redraw the screen rather than append
	every time.Duration // the timer
	start time.Time     // when the watch began, by the watcher's clock
	// last is the server's clock at the last view Redis answered (zero
	// before the first), answered when it was, by the watcher's
	// monotonic clock (the watch's start before the first).
	last, answered time.Time
	down           bool // the last read failed
}

// read reads the view, bounded by -timeout.
func (w *watcher) read(ctx context.Context) (view, error) {
	rctx, cancel := context.WithTimeout(ctx, w.c.bound())
	defer cancel()
	return readView(rctx, w.d.fl, w.name)
}

// show draws v, read for why, or why it could not be read (err).
func (w *watcher) show(v view, err error, why string) {
	since := w.answered
	if since.IsZero() {
		since = w.start
	}
	downFor := time.Since(since)
	if err != nil {
		w.down = true
		if w.c.json {
			writeJSON(w.out, watchJSON{Schema: schemaVersion, Command: "watch", Name: w.name, Why: "error", Locks: []lockJSON{},
				Error: ptr(err.Error()), DownSince: w.lastPtr(), DownForMS: ms(downFor)})
			return
		}
		last := "the watch began"
		if !w.last.IsZero() {
			last = stamp(w.last) + " (server clock, its last answer)"
		}
		w.draw("no answer", "error", fmt.Sprintf("Redis not answering since %s, for %s: %v\nreconnecting (every %s)...\n",
			last, round(downFor), err, w.every))
		return
	}
	j := watchJSON{Schema: schemaVersion, Command: "watch", Name: w.name, Why: why, At: ptr(v.at.UTC()), Locks: locksJSON(v, w.d.masters)}
	reconnected := ""
	if w.down {
		j.Why, j.DownSince, j.DownForMS = "reconnected", w.lastPtr(), ms(downFor)
		reconnected = fmt.Sprintf("reconnected at %s, after %s without an answer from Redis\n", stamp(v.at), round(downFor))
	}
	w.down, w.last, w.answered = false, v.at, time.Now()
	if w.c.json {
		writeJSON(w.out, j)
		return
	}
	w.draw(stamp(v.at), j.Why, reconnected+viewText(v, w.d.masters))
}

// lastPtr is the server's clock at the last answered view, or nil.
func (w *watcher) lastPtr() *time.Time {
	if w.last.IsZero() {
		return nil
	}
	return ptr(w.last.UTC())
}

// draw writes one view with its header: when (the server's clock, or
// that Redis did not answer) and why.
func (w *watcher) draw(when, why, body string) {
	var b strings.Builder
	if w.tty {
		b.WriteString(clearScreen)
	}
	fmt.Fprintf(&b, "fairlock watch %q on %s, prefix %q: %s (%s)\n", w.name, w.c.where(), w.c.prefix, when, why)
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
