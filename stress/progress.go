package main

import (
	"fmt"
	"io"
	"os"
	"time"
)

// progress keeps a live status line on a terminal while the run goes on.
type progress struct {
	out  io.Writer
	quit chan struct{} // closed by stop
	done chan struct{} // closed when the goroutine has exited
}

// startProgress starts the status line when stderr is a terminal; on
// anything else it does nothing.
func startProgress(stderr io.Writer, h *history, cfg config, started time.Time) *progress {
	f, ok := stderr.(*os.File)
	if !ok {
		return nil
	}
	if fi, err := f.Stat(); err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		return nil
	}
	p := &progress{out: f, quit: make(chan struct{}), done: make(chan struct{})}
	go p.loop(h, cfg, started) // owned by p: stop waits for it
	return p
}

func (p *progress) loop(h *history, cfg config, started time.Time) {
	defer close(p.done)
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-p.quit:
			fmt.Fprint(p.out, "\r\x1b[K")
			return
		case <-t.C:
			fmt.Fprint(p.out, "\r"+statusLine(h, cfg, time.Since(started))+"\x1b[K")
		}
	}
}

// statusLine describes the run so far.
func statusLine(h *history, cfg config, elapsed time.Duration) string {
	goal := "/" + cfg.Duration.String()
	if cfg.Ops > 0 {
		goal = fmt.Sprintf(" (%d attempts to make)", cfg.Ops)
	}
	var total int64
	for _, o := range outcomes {
		total += h.Count(o)
	}
	granted := h.Count(outGranted)
	return fmt.Sprintf("%5.1fs%s  %d attempts: %d granted (%.0f/s), %d gave up, %d try failed, %d errors",
		elapsed.Seconds(), goal, total, granted, float64(granted)/max(elapsed.Seconds(), 1e-3),
		h.Count(outGaveUp), h.Count(outTryFailed), h.Count(outFailed))
}

// stop clears the status line and waits for its goroutine. It does nothing
// on a nil progress.
func (p *progress) stop() {
	if p == nil {
		return
	}
	close(p.quit)
	<-p.done
}
