package main

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// etcdSystem is etcd's concurrency.Election on one etcd member: every
// candidate and every group of observers has an etcd client and a
// session of its own.
type etcdSystem struct {
	endpoint string
	prefix   string        // the run's key prefix
	ttl      time.Duration // the sessions' TTL, whole seconds
}

func (s *etcdSystem) name() string { return etcdName }

// key is the election's key prefix.
func (s *etcdSystem) key(election string) string { return s.prefix + "/" + election }

// session returns a new client and session, and a function that closes
// both.
func (s *etcdSystem) session(ctx context.Context) (*concurrency.Session, func(), error) {
	cli, err := newEtcdClient(s.endpoint)
	if err != nil {
		return nil, nil, err
	}
	sess, err := concurrency.NewSession(cli, concurrency.WithTTL(int(s.ttl/time.Second)), concurrency.WithContext(ctx))
	if err != nil {
		_ = cli.Close()
		return nil, nil, err
	}
	return sess, func() {
		_ = sess.Close()
		_ = cli.Close()
	}, nil
}

func (s *etcdSystem) candidate(ctx context.Context, election string) (candidate, error) {
	sess, closeFn, err := s.session(context.Background())
	if err != nil {
		return nil, err
	}
	pfx := s.key(election)
	return &etcdCandidate{
		sess:    sess,
		e:       concurrency.NewElection(sess, pfx),
		key:     fmt.Sprintf("%s/%x", pfx, sess.Lease()),
		closeFn: closeFn,
	}, nil
}

func (s *etcdSystem) observe(ctx context.Context, election string, clients, perClient int, see func(int, string)) (func(), error) {
	return observers(ctx, clients, perClient, see, func() (watcher, func(), error) {
		sess, closeFn, err := s.session(context.Background())
		if err != nil {
			return nil, nil, err
		}
		return func(ctx context.Context, see func(string)) (func(), error) {
			ch := concurrency.NewElection(sess, s.key(election)).Observe(ctx)
			return func() {
				for resp := range ch {
					if len(resp.Kvs) > 0 {
						see(string(resp.Kvs[0].Value))
					}
				}
			}, nil
		}, closeFn, nil
	})
}

func (s *etcdSystem) worker(election string) workerSpec {
	return workerSpec{System: etcdName, Addr: s.endpoint, Prefix: s.prefix, Election: election, Lease: s.ttl}
}

// etcdCandidate is a candidate with a client and a session of its own: its
// key in the election is the session's lease, which etcd's Campaign puts
// before it waits.
type etcdCandidate struct {
	sess    *concurrency.Session
	e       *concurrency.Election
	key     string // the candidate's key: the election's prefix and the lease
	closeFn func()
}

// begin does nothing: queued looks for the candidate's key.
func (ec *etcdCandidate) begin() {}

func (ec *etcdCandidate) campaign(ctx context.Context, value string) error {
	return ec.e.Campaign(ctx, value)
}

// queued polls the candidate's key until it exists: Campaign puts it
// before it waits for the keys created before it to go.
func (ec *etcdCandidate) queued(ctx context.Context) error {
	for {
		resp, err := ec.sess.Client().Get(ctx, ec.key, clientv3.WithCountOnly())
		if err != nil {
			return fmt.Errorf("waiting for a campaign's key: %w", err)
		}
		if resp.Count > 0 {
			return nil
		}
		select {
		case <-time.After(time.Millisecond):
		case <-ctx.Done():
			return fmt.Errorf("waiting for a campaign's key: %w", ctx.Err())
		}
	}
}

func (ec *etcdCandidate) proclaim(ctx context.Context, value string) error {
	return ec.e.Proclaim(ctx, value)
}

func (ec *etcdCandidate) resign(ctx context.Context) error {
	if ec.e.Key() == "" {
		return errNotLeading
	}
	return ec.e.Resign(ctx)
}

func (ec *etcdCandidate) close() { ec.closeFn() }
