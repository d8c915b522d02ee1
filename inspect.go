package fairlock

import (
	"context"
	"time"

	"github.com/fairlock/fairlock/queue"
)

// LockState is the state of one lock as Inspect read it, at one instant
// of the Redis server's clock. It may be stale the moment it is returned.
// A lock that nobody holds and nobody waits for (a free lock, or a name
// never used) has Held false and no Waiters.
type LockState struct {
	Name string
	At   time.Time // the server's clock when the state was read

	Held      bool
	Owner     string        // the holder's owner id
	Count     int           // the levels of the hold (re-entries)
	Token     int64         // the hold's fencing token
	LeaseLeft time.Duration // the hold's remaining lease
	// Client is the ID of the Client whose Lock or TryLock call was
	// granted the hold, "" when not known (a hold of a client that
	// predates Client IDs, or whose owner id is shared by calls that came
	// and went since).
	Client string
	// ClientName is the name of the holder's Client (WithName), "" when
	// it has none or it is not known.
	ClientName string

	Waiters []Waiter // the Lock calls in line, in the order they joined it
}

// Waiter is one Lock call in a lock's line.
type Waiter struct {
	Owner  string // the owner id it waits for
	Client string // the ID of the waiting Client; "" for a client that predates Client IDs
	// ClientName is the name of the waiting Client (WithName), "" when it
	// has none or it is not known.
	ClientName string
	// TimeLeft is how long it keeps its place without polling (a live
	// waiter polls well before); at or below 0, it is gone and will be
	// dropped from the line.
	TimeLeft time.Duration
}

// ID returns the Client's id: 8 hex characters, random per Client, that
// end the waiter id of each of its Lock calls in Redis. Inspect reports
// it for the holder and each waiter, so that an operator can tell which
// process holds a lock or waits for it (log ID at start-up).
func (c *Client) ID() string {
	if c == nil {
		return ""
	}
	return c.run.Tag()
}

// usable returns the error that stops a call of the Client.
func (c *Client) usable(ctx context.Context) error {
	switch {
	case c == nil:
		return errNilClientCall
	case ctx == nil:
		return errNilContext
	case c.engine == nil:
		return errNotOnQuorum("Inspect or List")
	case c.closed():
		return ErrClosed
	}
	return nil
}

// Inspect reads the state of the lock called name: its holder and the
// waiters in line, in one atomic round trip (a MULTI transaction that
// changes nothing), with the remaining times measured by the server's
// clock, and then the names of their Clients (WithName) in one more. It
// returns when ctx ends, with ctx's error, even while Redis does
// not answer. A bad name fails with ErrInvalidName, a Redis user that may
// not run the commands with ErrNoPermission. It is an operator's and a
// debugger's tool: the lock may change the moment it returns, so never
// decide to take or skip a lock by it.
func (c *Client) Inspect(ctx context.Context, name string) (LockState, error) {
	if err := c.usable(ctx); err != nil {
		return LockState{}, err
	}
	keys, err := queue.For(c.cfg.prefix, name)
	if err != nil {
		return LockState{}, err
	}
	s, err := c.engine.Mutex(keys).Inspect(ctx)
	if err != nil {
		return LockState{}, err
	}
	st := LockState{
		Name:      name,
		At:        s.Now,
		Held:      s.Held,
		Owner:     s.Owner,
		Count:     s.Count,
		Token:     s.Token,
		LeaseLeft: s.TTL,
		Client:    s.Tag,
	}
	for _, w := range s.Waiters {
		st.Waiters = append(st.Waiters, Waiter{Owner: w.Owner, Client: w.Tag, TimeLeft: w.Remaining})
	}
	if err := c.nameClients(ctx, &st); err != nil {
		return LockState{}, err
	}
	return st, nil
}

// nameClients fills in the names of the Clients st mentions, read in one
// more round trip (the names live in keys of their own, see WithName).
func (c *Client) nameClients(ctx context.Context, st *LockState) error {
	var tags []string
	seen := map[string]bool{}
	add := func(tag string) {
		if tag != "" && !seen[tag] {
			seen[tag] = true
			tags = append(tags, tag)
		}
	}
	add(st.Client)
	for _, w := range st.Waiters {
		add(w.Client)
	}
	names, err := c.engine.Names(ctx, c.cfg.prefix, tags)
	if err != nil {
		return err
	}
	st.ClientName = names[st.Client]
	for i := range st.Waiters {
		st.Waiters[i].ClientName = names[st.Waiters[i].Client]
	}
	return nil
}

// List returns the names of the locks under the Client's prefix that are
// held or waited on and whose names match the glob pattern (Redis's
// MATCH syntax; "" or "*" for every lock), each once, sorted. It scans
// with SCAN, never KEYS: every master of a Redis Cluster, every live
// shard of a Ring. It returns when ctx ends, with ctx's error, even while
// Redis does not answer; the scan has no other bound. A pattern that
// contains '}' or ends in a lone '\' fails with ErrInvalidName, a Redis
// user that may not run SCAN with ErrNoPermission. Locks may be taken or
// freed while it scans.
func (c *Client) List(ctx context.Context, pattern string) ([]string, error) {
	if err := c.usable(ctx); err != nil {
		return nil, err
	}
	return c.engine.List(ctx, c.cfg.prefix, pattern)
}
