package fair

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock/fairlock/internal/shortly"
)

// A Client with a name (Config.Name) writes it under its tag, in the key
// <prefix>:client:<tag>, so that an operator who inspects a lock sees
// which process holds it or waits for it, not only the tag that ends each
// of its waiter ids. The key is written at the Client's first Lock call,
// expires nameTTL after its last write, is written again every nameEvery
// while the Client is open, and is deleted by Close: a named Client keeps
// one small key while it runs, and a minute at most after its process
// died. A server that restarted without its data (or a replica promoted
// before the key reached it) has lost the key: it is written again at
// once when the Client notices, not at the next turn (see rename). A
// name is not put in each waiter entry and hold instead: entries are
// parsed by the scripts of every version of a rolling upgrade, and a name
// there would cost its bytes in every entry, hold and wake message.

const (
	nameTTL   = time.Minute
	nameEvery = 20 * time.Second
)

// naming writes and renews the key of the engine's name.
type naming struct {
	key  string
	name string
	once sync.Once
	kick chan struct{} // capacity 1: write the name now (see rename)
}

func newNaming(key, name string) *naming {
	return &naming{key: key, name: name, kick: make(chan struct{}, 1)}
}

// nameKey is the key a Client with tag writes its name under.
func nameKey(prefix, tag string) string { return prefix + ":client:" + tag }

// announce starts, once, the goroutine that keeps the engine's name in
// Redis. It must be called within an operation of the engine (begin).
func (e *Engine) announce() {
	if e.naming == nil {
		return
	}
	e.naming.once.Do(func() { e.wg.Go(e.keepName) })
}

// rename has the engine's name written again now, once its keeper runs:
// the Client noticed that Redis may have lost it (Redis answers again
// after an outage, a pub/sub connection was rebuilt, a hold's key was
// found gone). It never blocks.
func (e *Engine) rename() {
	if e.naming == nil {
		return
	}
	select {
	case e.naming.kick <- struct{}{}:
	default:
	}
}

// keepName writes the name now, every nameEvery and whenever rename asks,
// until Close, and then deletes it. Failures are logged and tried again
// at the next turn.
func (e *Engine) keepName() {
	n := e.naming
	warned := false
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-e.closing:
			ctx, cancel := e.detached(context.Background())
			defer cancel()
			if err := e.rdb.Del(ctx, n.key).Err(); err != nil {
				e.log.Debug("fairlock: could not delete the Client's name; it expires by itself", "key", n.key, "err", err)
			}
			return
		case <-n.kick:
		case <-t.C:
		}
		ctx, cancel := e.detached(context.Background())
		sent := time.Now()
		err := shortly.Run(ctx, func() error { return e.rdb.Set(ctx, n.key, n.name, nameTTL).Err() })
		cancel()
		e.called(sent, err)
		if err != nil && !warned {
			e.log.Log(context.Background(), failLevel(err), "fairlock: could not write the Client's name; Inspect shows its id only", "key", n.key, "err", err)
		}
		warned = err != nil
		t.Reset(nameEvery)
	}
}

// Names returns the names of the Clients with the given tags under
// prefix, as far as Redis knows them: a tag whose Client has no name, or
// whose name expired, is left out. It returns when ctx ends even while
// Redis does not answer (see read).
func (e *Engine) Names(ctx context.Context, prefix string, tags []string) (map[string]string, error) {
	names := make(map[string]string, len(tags))
	if len(tags) == 0 {
		return names, nil
	}
	return read(e, ctx, func(ctx context.Context) (map[string]string, error) {
		pipe := e.rdb.Pipeline()
		cmds := make([]*redis.StringCmd, len(tags))
		for i, tag := range tags {
			cmds[i] = pipe.Get(ctx, nameKey(prefix, tag))
		}
		_, _ = pipe.Exec(ctx) // each command carries its own outcome
		for i, cmd := range cmds {
			v, err := cmd.Result()
			switch {
			case errors.Is(err, redis.Nil):
			case err != nil:
				return nil, refusal(err)
			default:
				names[tags[i]] = v
			}
		}
		return names, nil
	})
}
