package fair

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/fairlock/fairlock/internal/errs"
	"github.com/fairlock/fairlock/lua"
	"github.com/fairlock/fairlock/queue"
)

// The keys of a prefix have one layout (queue.LayoutVersion), which the
// key queue.LayoutKey(prefix) records: the first Client that uses the
// prefix writes it. Before its first script or read of a lock, an engine
// asks for it once (lua.Layout); a version other than its own makes
// every call of the engine fail with errs.ErrLayout, so that a Client
// never misreads keys another layout wrote, nor writes beside them. A
// network error decides nothing: the next call asks again. On a server
// restarted without persistence the key is gone with the locks, and is
// written again by the next Client that asks.

// layout is an engine's answer about the layout of its prefix.
type layout struct {
	ok     atomic.Bool
	bad    atomic.Pointer[error] // the refusal, once found
	asking shared[struct{}]      // the question, while it runs
}

// checkLayout returns nil once the prefix's layout is known to be this
// engine's, the refusal when it is another, or the error of the
// question (which the next call asks again). The question runs as
// wakeMode's does: detached from ctx, bounded by the call timeout,
// joined by the calls that come meanwhile.
func (e *Engine) checkLayout(ctx context.Context) error {
	if e.layout.ok.Load() {
		return nil
	}
	if bad := e.layout.bad.Load(); bad != nil {
		return *bad
	}
	_, err := e.layout.asking.do(e, ctx, func() (struct{}, error) {
		cctx, cancel := e.detached(ctx)
		defer cancel()
		sent := time.Now()
		v, err := lua.ReadLayout(e.run(cctx, lua.Layout(queue.LayoutKey(e.cfg.Prefix), queue.LayoutVersion)))
		e.called(sent, err)
		switch {
		case err != nil:
			return struct{}{}, refusal(err)
		case v != queue.LayoutVersion:
			bad := fmt.Errorf("%w: %s holds layout version %q; this Client writes version %q",
				errs.ErrLayout, queue.LayoutKey(e.cfg.Prefix), v, queue.LayoutVersion)
			e.layout.bad.Store(&bad)
			e.log.Error("fairlock: the keys under the prefix have another layout; every call fails",
				"key", queue.LayoutKey(e.cfg.Prefix), "found", v, "version", queue.LayoutVersion)
			return struct{}{}, bad
		}
		e.layout.ok.Store(true)
		return struct{}{}, nil
	})
	return err
}
