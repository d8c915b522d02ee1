package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/fairlock/fairlock"
	"github.com/redis/go-redis/v9"
)

// fairlockSystem is fairlock's Election on one Redis server: every
// candidate and every group of observers has a go-redis client and a
// fairlock Client of its own.
type fairlockSystem struct {
	addr   string        // the Redis server's address
	prefix string        // the run's key prefix
	lease  time.Duration // WithLease of every Client
}

func (s *fairlockSystem) name() string { return fairlockName }

// client returns a new fairlock Client on a go-redis client of its own,
// and a function that closes both.
func (s *fairlockSystem) client(opts ...fairlock.Option) (*fairlock.Client, func(), error) {
	rdb := redis.NewClient(&redis.Options{Addr: s.addr})
	c, err := fairlock.New(rdb, append([]fairlock.Option{fairlock.WithPrefix(s.prefix), fairlock.WithLease(s.lease)}, opts...)...)
	if err != nil {
		_ = rdb.Close()
		return nil, nil, err
	}
	return c, func() {
		_ = c.Close()
		_ = rdb.Close()
	}, nil
}

func (s *fairlockSystem) candidate(ctx context.Context, election string) (candidate, error) {
	fc := &fairlockCandidate{calls: map[string]bool{}, changed: make(chan struct{}, 1)}
	c, closeFn, err := s.client(fairlock.WithObserver(fairlock.ObserverFunc(fc.event)))
	if err != nil {
		return nil, err
	}
	fc.e, fc.closeFn = c.Election(election), closeFn
	return fc, nil
}

func (s *fairlockSystem) observe(ctx context.Context, election string, clients, perClient int, see func(int, string)) (func(), error) {
	return observers(ctx, clients, perClient, see, func() (watcher, func(), error) {
		c, closeFn, err := s.client()
		if err != nil {
			return nil, nil, err
		}
		e := c.Election(election)
		return func(ctx context.Context, see func(string)) (func(), error) {
			ch, err := e.Observe(ctx)
			if err != nil {
				return nil, err
			}
			return func() {
				for l := range ch {
					see(l.Value)
				}
			}, nil
		}, closeFn, nil
	})
}

func (s *fairlockSystem) worker(election string) workerSpec {
	return workerSpec{System: fairlockName, Addr: s.addr, Prefix: s.prefix, Election: election, Lease: s.lease}
}

// fairlockCandidate is a candidate on a Client of its own, whose Observer
// tells when its Campaign joined the line.
type fairlockCandidate struct {
	e       *fairlock.Election
	closeFn func()
	lead    context.Context // the leadership's context; nil when not leading

	mu      sync.Mutex
	begun   int             // guarded by mu: campaigns begun
	calls   map[string]bool // guarded by mu: the calls seen in line or granted
	changed chan struct{}   // capacity 1: calls grew
}

// event is the Client's Observer: it counts the calls that joined the line
// or were granted.
func (fc *fairlockCandidate) event(_ context.Context, ev fairlock.Event) {
	if ev.Kind != fairlock.EventQueued && ev.Kind != fairlock.EventGranted {
		return
	}
	fc.mu.Lock()
	fc.calls[ev.Call] = true
	fc.mu.Unlock()
	select {
	case fc.changed <- struct{}{}:
	default:
	}
}

func (fc *fairlockCandidate) begin() {
	fc.mu.Lock()
	fc.begun++
	fc.mu.Unlock()
}

func (fc *fairlockCandidate) campaign(ctx context.Context, value string) error {
	lead, err := fc.e.Campaign(ctx, value)
	if err != nil {
		return err
	}
	fc.lead = lead
	return nil
}

func (fc *fairlockCandidate) queued(ctx context.Context) error {
	for {
		fc.mu.Lock()
		done := len(fc.calls) >= fc.begun
		fc.mu.Unlock()
		if done {
			return nil
		}
		select {
		case <-fc.changed:
		case <-ctx.Done():
			return fmt.Errorf("waiting for a campaign to join the line: %w", ctx.Err())
		}
	}
}

func (fc *fairlockCandidate) proclaim(_ context.Context, value string) error {
	if fc.lead == nil {
		return errNotLeading
	}
	return fc.e.Proclaim(fc.lead, value)
}

func (fc *fairlockCandidate) resign(context.Context) error {
	if fc.lead == nil {
		return errNotLeading
	}
	lead := fc.lead
	fc.lead = nil
	return fc.e.Resign(lead)
}

func (fc *fairlockCandidate) close() { fc.closeFn() }

// errNotLeading is returned by proclaim and resign of a candidate that
// does not lead.
var errNotLeading = errors.New("the candidate does not lead")

// The systems' names, as the report's columns have them.
const (
	fairlockName = "fairlock"
	etcdName     = "etcd"
)
