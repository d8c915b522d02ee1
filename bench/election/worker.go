package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"time"

	"github.com/fairlock/fairlock"
	"github.com/redis/go-redis/v9"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// workerEnv is the environment variable that makes the executable a
// worker: its value is the workerSpec, as JSON.
const workerEnv = "ELECTION_BENCH_WORKER"

// workerSpec tells a worker process which election to lead, and how.
type workerSpec struct {
	System   string        `json:"system"`   // fairlockName or etcdName
	Addr     string        `json:"addr"`     // Redis's address, or etcd's endpoint
	Prefix   string        `json:"prefix"`   // the run's key prefix
	Election string        `json:"election"` // the election's name
	Lease    time.Duration `json:"lease"`    // fairlock's lease, etcd's session TTL
	Value    string        `json:"value"`    // the value to campaign with
}

// workerReport is the line a worker prints once it leads.
type workerReport struct {
	// SinceRenewal is how long before Campaign returned the leader's
	// lease was last granted or renewed: the lease it has left is the
	// lease less this, less the time since.
	SinceRenewal time.Duration `json:"since_renewal"`
	Err          string        `json:"err,omitempty"`
}

// workerMain is a worker process: it campaigns as spec says, prints a
// workerReport line once it leads, and then keeps the leadership (its
// watchdog or keep-alive renewing it) until its standard input closes or
// it is killed.
func workerMain(spec string, stdin io.Reader, stdout io.Writer) int {
	var w workerSpec
	rep := workerReport{}
	err := json.Unmarshal([]byte(spec), &w)
	var stop func()
	if err == nil {
		rep.SinceRenewal, stop, err = lead(context.Background(), w)
	}
	if err != nil {
		rep.Err = err.Error()
	}
	b, _ := json.Marshal(rep)
	fmt.Fprintf(stdout, "%s\n", b)
	if err != nil {
		return 1
	}
	_, _ = io.Copy(io.Discard, stdin)
	stop()
	return 0
}

// lead campaigns in w's election until it leads, and returns how long
// before that its lease was last granted or renewed, and a function that
// resigns and closes the clients.
func lead(ctx context.Context, w workerSpec) (time.Duration, func(), error) {
	switch w.System {
	case fairlockName:
		rdb := redis.NewClient(&redis.Options{Addr: w.Addr})
		c, err := fairlock.New(rdb, fairlock.WithPrefix(w.Prefix), fairlock.WithLease(w.Lease))
		if err != nil {
			return 0, nil, err
		}
		e := c.Election(w.Election)
		leadership, err := e.Campaign(ctx, w.Value)
		if err != nil {
			return 0, nil, err
		}
		// Campaign returns as its grant comes back: the lease was set
		// half a round trip before.
		return 0, func() {
			_ = e.Resign(leadership)
			_ = c.Close()
			_ = rdb.Close()
		}, nil
	case etcdName:
		cli, err := newEtcdClient(w.Addr)
		if err != nil {
			return 0, nil, err
		}
		// The session's lease, kept alive here rather than by the
		// session, so that the first keep-alive, which resets the lease
		// to its whole TTL, is known to have been answered before the
		// campaign: the session only adds itself to this keep-alive.
		grant, err := cli.Grant(ctx, int64(w.Lease/time.Second))
		if err != nil {
			_ = cli.Close()
			return 0, nil, err
		}
		kaCtx, kaCancel := context.WithCancel(ctx)
		ka, err := cli.KeepAlive(kaCtx, grant.ID)
		if err != nil {
			kaCancel()
			_ = cli.Close()
			return 0, nil, err
		}
		if _, ok := <-ka; !ok {
			kaCancel()
			_ = cli.Close()
			return 0, nil, errors.New("the lease's keep-alive ended at once")
		}
		renewed := time.Now()
		go func() {
			for range ka {
			}
		}()
		sess, err := concurrency.NewSession(cli, concurrency.WithLease(grant.ID))
		if err != nil {
			kaCancel()
			_ = cli.Close()
			return 0, nil, err
		}
		e := concurrency.NewElection(sess, w.Prefix+"/"+w.Election)
		if err := e.Campaign(ctx, w.Value); err != nil {
			kaCancel()
			_ = cli.Close()
			return 0, nil, err
		}
		since := time.Since(renewed)
		return since, func() {
			_ = e.Resign(ctx)
			_ = sess.Close()
			kaCancel()
			_ = cli.Close()
		}, nil
	}
	return 0, nil, fmt.Errorf("unknown system %q", w.System)
}

// worker is a worker process the benchmark started, leading an election.
type worker struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stderr *tail
	exited chan struct{} // closed when cmd has exited
	// LeadAt is when the benchmark read that it leads; SinceRenewal is
	// from its report.
	leadAt       time.Time
	sinceRenewal time.Duration
}

// startWorker starts a copy of this executable as a worker that leads the
// election of spec, and returns once it leads.
func startWorker(ctx context.Context, spec workerSpec) (*worker, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("finding this executable: %w", err)
	}
	b, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	w := &worker{stderr: &tail{}, exited: make(chan struct{})}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), workerEnv+"="+string(b))
	cmd.Stderr = w.stderr
	cmd.WaitDelay = time.Second
	configureChild(cmd)
	if w.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	w.cmd = cmd
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		if sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		_, _ = io.Copy(io.Discard, out)
		_ = cmd.Wait()
		close(w.exited)
	}()
	timeout := time.NewTimer(30 * time.Second)
	defer timeout.Stop()
	select {
	case line, ok := <-lines:
		w.leadAt = time.Now()
		if !ok {
			w.kill()
			return nil, fmt.Errorf("worker exited without leading; its stderr ends:\n%s", w.stderr)
		}
		var rep workerReport
		if err := json.Unmarshal([]byte(line), &rep); err != nil {
			w.kill()
			return nil, fmt.Errorf("worker printed %q: %w", line, err)
		}
		if rep.Err != "" {
			w.kill()
			return nil, fmt.Errorf("worker: %s", rep.Err)
		}
		w.sinceRenewal = rep.SinceRenewal
		return w, nil
	case <-timeout.C:
		w.kill()
		return nil, fmt.Errorf("worker did not lead within 30s; its stderr ends:\n%s", w.stderr)
	case <-ctx.Done():
		w.kill()
		return nil, ctx.Err()
	}
}

// kill ends the worker with SIGKILL, as a crash, and waits until it has
// exited.
func (w *worker) kill() {
	select {
	case <-w.exited:
		return
	default:
	}
	killChild(w.cmd.Process)
	<-w.exited
}
