package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"sync"
	"time"
)

// runProcs runs the workers in cfg.Procs worker processes, each a copy of
// this executable, and records the attempts they stream back into rec. It
// returns a violation for every process that failed: crashed, was killed,
// or did not finish its history. The clients are dealt out round robin;
// every process runs at least one.
func runProcs(ctx context.Context, cfg config, tgt *target, rec recorder, stderr io.Writer) []violation {
	exe, err := os.Executable()
	if err != nil {
		return []violation{{Kind: workerDied, Detail: "finding this executable: " + err.Error()}}
	}
	stderr = &lockedWriter{w: stderr}
	n := cfg.Procs
	ids := make([][]int, n)
	for c := range max(cfg.Clients, n) {
		ids[c%n] = append(ids[c%n], c)
	}
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		failures []violation
		cmds     []*exec.Cmd
		idle     = newIdleCount(n) // the election kind's word that every worker is done
	)
	fail := func(proc int, format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		failures = append(failures, violation{Kind: workerDied, At: wall(time.Now()),
			Detail: fmt.Sprintf("worker process p%d: ", proc) + fmt.Sprintf(format, args...)})
	}
	for i := range n {
		wc := cfg
		wc.Proc, wc.ClientIDs, wc.AllClients = i, ids[i], max(cfg.Clients, n)
		tgt.describe(&wc)
		if cfg.Ops > 0 {
			wc.Ops = cfg.Ops / int64(n)
			if int64(i) < cfg.Ops%int64(n) {
				wc.Ops++
			}
		}
		spec, err := json.Marshal(wc)
		if err != nil {
			fail(i, "%v", err)
			continue
		}
		cmd := exec.Command(exe)
		cmd.Env = append(os.Environ(), workerEnv+"="+string(spec))
		cmd.Stderr = stderr
		out, err := cmd.StdoutPipe()
		var in io.WriteCloser
		if err == nil {
			in, err = cmd.StdinPipe()
		}
		if err == nil {
			err = cmd.Start()
		}
		if err != nil {
			fail(i, "starting: %v", err)
			idle.add(nil)
			continue
		}
		cmds = append(cmds, cmd)
		wg.Go(func() {
			var once sync.Once
			done, err := readStream(out, rec, func() { once.Do(func() { idle.add(in) }) })
			once.Do(func() { idle.add(nil) }) // a process that ends holds up no other
			werr := cmd.Wait()                // after the last read of out
			switch {
			case err != nil:
				fail(i, "%v", err)
			case werr != nil:
				fail(i, "%v", werr)
			case !done:
				fail(i, "its history ended early")
			}
		})
	}

	finished := make(chan struct{})
	go func() { // owned by runProcs: it waits for finished below
		wg.Wait()
		close(finished)
	}()
	limit := cfg.Grace + time.Minute
	if cfg.Ops == 0 {
		limit += cfg.Duration
	}
	timeout := time.NewTimer(limit)
	defer timeout.Stop()
	interrupt := ctx.Done()
	for {
		select {
		case <-finished:
			return failures
		case <-interrupt:
			interrupt = nil // the workers stop early, and their checks still count
			for _, c := range cmds {
				_ = c.Process.Signal(os.Interrupt)
			}
		case <-timeout.C:
			for _, c := range cmds {
				_ = c.Process.Kill()
			}
			<-finished
			return append(failures, violation{Kind: workerDied, At: wall(time.Now()),
				Detail: fmt.Sprintf("worker processes still running after %v: killed", limit)})
		}
	}
}

// idleCount gathers the worker processes' word that their workers are
// done (the election kind), and once every process has said so, or ended,
// tells each process still running, on its standard input: its observers
// then wait for the elections' final state, which no candidate of any
// process can change any more.
type idleCount struct {
	mu   sync.Mutex
	left int              // guarded by mu; processes yet to say so
	ins  []io.WriteCloser // guarded by mu; the standard inputs of those that did
}

func newIdleCount(n int) *idleCount { return &idleCount{left: n} }

// add counts one process, whose standard input is in (nil: it ended, or
// never started).
func (c *idleCount) add(in io.WriteCloser) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if in != nil {
		c.ins = append(c.ins, in)
	}
	if c.left--; c.left > 0 {
		return
	}
	for _, w := range c.ins {
		_, _ = io.WriteString(w, "idle\n") // a process that has exited since does not need it
		_ = w.Close()
	}
	c.ins = nil
}

// allIdle returns a channel closed once the parent says, on r, that every
// worker of the run is done, or r ends.
func allIdle(r io.Reader) <-chan struct{} {
	ch := make(chan struct{})
	go func() { // ends with r: a worker process's standard input
		var b [1]byte
		_, _ = r.Read(b[:])
		close(ch)
	}()
	return ch
}

// workerMain is a worker process: it runs its share of the clients, as
// described by spec, and streams their attempts to stdout as JSON lines.
func workerMain(spec string, stdin io.Reader, stdout, stderr io.Writer) int {
	var cfg config
	if err := json.Unmarshal([]byte(spec), &cfg); err != nil {
		fmt.Fprintf(stderr, "stress worker: bad %s: %v\n", workerEnv, err)
		return exitCannotRun
	}
	quietRedis(cfg)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	s := newStream(stdout)
	tgt := remoteTarget(cfg)
	p, err := newPool(cfg, tgt, cfg.ClientIDs, cfg.Ops, s, stderr)
	if err == nil {
		if len(p.viewers) > 0 {
			p.idle, p.allIdle = s.idle, allIdle(stdin)
		}
		p.run(ctx)
	}
	if err := s.finish(err); err != nil {
		fmt.Fprintf(stderr, "stress worker p%d: %v\n", cfg.Proc, err)
		return exitViolations
	}
	return exitOK
}

// lockedWriter serialises writes to w.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer // guarded by mu
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
