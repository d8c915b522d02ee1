package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// etcdServer is one etcd member started for the run: a cluster of one, on
// two free loopback ports (clients and peers), with its data in a
// temporary directory that stop removes.
type etcdServer struct {
	endpoint string // http://127.0.0.1:port, for clients
	version  string // the server's version, as its Status gives it
	dir      string
	cmd      *exec.Cmd
	log      *tail
	exited   chan struct{} // closed when cmd has exited
}

// etcdBinary returns the path of the etcd server on PATH.
func etcdBinary() (string, error) {
	path, err := exec.LookPath("etcd")
	if err != nil {
		return "", fmt.Errorf("etcd not found on PATH (Debian: apt-get install etcd-server): %w", err)
	}
	return path, nil
}

// startEtcd starts an etcd member with its data in a new directory under
// parent (the system's temporary directory when parent is empty), and
// waits until it answers. A port taken meanwhile by another process makes
// it try others.
func startEtcd(ctx context.Context, parent string) (*etcdServer, error) {
	bin, err := etcdBinary()
	if err != nil {
		return nil, err
	}
	var lastErr error
	for range 5 {
		s, err := launchEtcd(ctx, bin, parent)
		if err == nil {
			return s, nil
		}
		lastErr = err
		if ctx.Err() != nil {
			break
		}
	}
	return nil, fmt.Errorf("could not start etcd: %w", lastErr)
}

func launchEtcd(ctx context.Context, bin, parent string) (*etcdServer, error) {
	ports, err := freePorts(2)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(parent, "election-etcd-")
	if err != nil {
		return nil, err
	}
	client := "http://127.0.0.1:" + strconv.Itoa(ports[0])
	peer := "http://127.0.0.1:" + strconv.Itoa(ports[1])
	s := &etcdServer{endpoint: client, dir: dir, log: &tail{}, exited: make(chan struct{})}
	cmd := exec.Command(bin,
		"--name", "bench",
		"--data-dir", dir,
		"--listen-client-urls", client,
		"--advertise-client-urls", client,
		"--listen-peer-urls", peer,
		"--initial-advertise-peer-urls", peer,
		"--initial-cluster", "bench="+peer,
		"--initial-cluster-state", "new",
		"--logger", "zap",
		"--log-outputs", "stderr",
		"--log-level", "warn",
	)
	cmd.Stdout, cmd.Stderr = s.log, s.log
	cmd.WaitDelay = time.Second
	configureChild(cmd)
	if err := cmd.Start(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	s.cmd = cmd
	go func() {
		_ = cmd.Wait()
		close(s.exited)
	}()
	if err := s.waitReady(ctx); err != nil {
		s.stop()
		return nil, err
	}
	return s, nil
}

// waitReady waits until the member answers a Status call on its client
// port, and reads its version there.
func (s *etcdServer) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	cli, err := newEtcdClient(s.endpoint)
	if err != nil {
		return err
	}
	defer cli.Close()
	for {
		select {
		case <-s.exited:
			return fmt.Errorf("etcd exited at start; its log ends:\n%s", s.log)
		default:
		}
		callCtx, callCancel := context.WithTimeout(ctx, time.Second)
		st, err := cli.Status(callCtx, s.endpoint)
		callCancel()
		if err == nil && st.Leader != 0 {
			s.version = st.Version
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("etcd did not answer on %s within 20s (%v); its log ends:\n%s", s.endpoint, err, s.log)
		case <-s.exited:
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// stop kills the member and removes its data.
func (s *etcdServer) stop() {
	if s.cmd != nil && s.cmd.Process != nil {
		select {
		case <-s.exited:
		default:
			killChild(s.cmd.Process)
			<-s.exited
		}
	}
	_ = os.RemoveAll(s.dir)
}

// newEtcdClient returns a client of the etcd at endpoint that logs
// nothing.
func newEtcdClient(endpoint string) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{
		Endpoints:   []string{endpoint},
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
}

// freePorts returns n distinct loopback ports that were free a moment ago.
func freePorts(n int) ([]int, error) {
	var ports []int
	var listeners []net.Listener
	defer func() {
		for _, l := range listeners {
			_ = l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		listeners = append(listeners, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// tail is an io.Writer that keeps the last lines written to it, for error
// messages.
type tail struct {
	mu    sync.Mutex
	lines []string
	part  string
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	text := t.part + string(p)
	lines := strings.Split(text, "\n")
	t.part = lines[len(lines)-1]
	t.lines = append(t.lines, lines[:len(lines)-1]...)
	if len(t.lines) > 20 {
		t.lines = t.lines[len(t.lines)-20:]
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.Join(append(t.lines[:len(t.lines):len(t.lines)], t.part), "\n")
}
