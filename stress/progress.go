package main

import (
	"fmt"
	"io"
	"os"
	"time"
)

// progress tells how the run goes while it runs: on a terminal, a status
// line kept up to date; on anything else, a line every progressEvery for
// a run planned for longer than a minute, or, for a run of -ops, whose
// length is not known, once it has gone on for a minute.
type progress struct {
	out      io.Writer
	terminal bool          // out is one: the line is written over
	quit     chan struct{} // closed by stop
	done     chan struct{} // closed when the goroutine has exited
}

// Off a terminal, a run longer than progressLong reports its progress
// every progressEvery.
const (
	progressLong  = time.Minute
	progressEvery = 5 * time.Second
)

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// startProgress starts telling the run's progress on out (terminal: it
// is one), if it should: see progress. faults is the run's injector, nil
// when it injects none.
func startProgress(out io.Writer, terminal bool, h *history, cfg config, started time.Time, faults *injector) *progress {
	quiet := time.Duration(0) // before the first line off a terminal
	switch {
	case terminal:
	case cfg.Ops > 0:
		quiet = progressLong
	case cfg.Duration <= progressLong:
		return nil
	}
	p := &progress{out: out, terminal: terminal, quit: make(chan struct{}), done: make(chan struct{})}
	go p.loop(h, cfg, started, quiet, faults) // owned by p: stop waits for it
	return p
}

func (p *progress) loop(h *history, cfg config, started time.Time, quiet time.Duration, faults *injector) {
	defer close(p.done)
	every := progressEvery
	if p.terminal {
		every = 250 * time.Millisecond
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-p.quit:
			if p.terminal {
				fmt.Fprint(p.out, "\r\x1b[K")
			}
			return
		case <-t.C:
			elapsed := time.Since(started)
			switch {
			case p.terminal:
				fmt.Fprint(p.out, "\r"+statusLine(h, cfg, elapsed, faults)+"\x1b[K")
			case elapsed >= quiet:
				fmt.Fprintln(p.out, "stress: "+statusLine(h, cfg, elapsed, faults))
			}
		}
	}
}

// statusLine describes the run so far: its attempts, the faults injected
// (when it injects any), and the verdicts an attempt gives on its own
// (the checks across attempts come once the run is over).
func statusLine(h *history, cfg config, elapsed time.Duration, faults *injector) string {
	goal := "/" + cfg.Duration.String()
	if cfg.Ops > 0 {
		goal = fmt.Sprintf(" (%d attempts to make)", cfg.Ops)
	}
	var total int64
	for _, o := range outcomes {
		total += h.Count(o)
	}
	granted := h.Count(outGranted)
	s := fmt.Sprintf("%5.1fs%s  %d attempts: %d granted (%.0f/s), %d gave up, %d try failed, %d errors",
		elapsed.Seconds(), goal, total, granted, float64(granted)/max(elapsed.Seconds(), 1e-3),
		h.Count(outGaveUp), h.Count(outTryFailed), h.Count(outFailed))
	if faults != nil {
		injected, over := faults.counts()
		s += fmt.Sprintf("; %d faults (%d over)", injected, over)
	}
	return s + fmt.Sprintf("; verdicts so far: %d error, %d lease-lost", h.errs.Load(), h.leases.Load())
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
