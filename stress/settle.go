package main

import (
	"context"
	"errors"
	"io"
	"net"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock/fairlock/internal/pause"
	"github.com/fairlock/fairlock/queue"
)

// After a cluster failover the cluster client's map of the slots may still
// name the dead master: go-redis refreshes it in the background, and only
// after a command failed. The end-of-run inspection would then fail with
// connection errors, reported as "error" violations the locks did not
// commit. settle and inspectAfterRun keep that from happening.
const (
	settleWithin   = 10 * time.Second       // how long settle waits for every lock to answer
	settlePoll     = 100 * time.Millisecond // between probes while a lock does not answer
	inspectRetries = 3                      // further inspections after a connection error
)

// settle asks a cluster client to reload its map of the slots, then waits,
// up to settleWithin, until a probe of every lock is answered. Other
// clients need nothing. What still fails after that is left to the
// inspection to report.
func settle(ctx context.Context, rdb redis.UniversalClient, prefix string, names []string) {
	cc, ok := rdb.(*redis.ClusterClient)
	if !ok {
		return
	}
	cc.ReloadState(ctx)
	ctx, cancel := context.WithTimeout(ctx, settleWithin)
	defer cancel()
	for _, name := range names {
		k, err := queue.For(prefix, name)
		if err != nil {
			continue
		}
		for cc.Exists(ctx, k.Lock).Err() != nil {
			cc.ReloadState(ctx)
			if !pause.For(ctx, settlePoll) {
				return
			}
		}
	}
}

// inspectAfterRun inspects one lock on rdb with read, again up to
// inspectRetries times while the inspection fails with a connection
// error.
func inspectAfterRun[S any](ctx context.Context, rdb redis.UniversalClient, read func(context.Context) (S, error)) (S, error) {
	for i := 0; ; i++ {
		s, err := read(ctx)
		if err == nil || i == inspectRetries || !connectionError(err) {
			return s, err
		}
		if cc, ok := rdb.(*redis.ClusterClient); ok {
			cc.ReloadState(ctx)
		}
		if !pause.For(ctx, settlePoll<<i) {
			return s, err
		}
	}
}

// connectionError reports whether err says the server could not be
// reached or the connection broke, rather than what the server answered.
func connectionError(err error) bool {
	var ne net.Error
	var oe *net.OpError
	return errors.As(err, &ne) || errors.As(err, &oe) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, redis.ErrClosed)
}
