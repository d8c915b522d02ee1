package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock/fairlock"
)

// deployment is what a command talks to: a fairlock Client and the
// go-redis clients under it.
type deployment struct {
	fl *fairlock.Client
	// rdbs is the deployment's go-redis client, or a quorum's: each
	// master's, in the order of -masters.
	rdbs []redis.UniversalClient
	// masters names a quorum's masters for the output (no credentials),
	// in the order of rdbs; nil for other deployments.
	masters []string
}

// quorum reports whether the Client is a quorum's (-masters).
func (d *deployment) quorum() bool { return d.masters != nil }

// cluster reports whether the deployment is a Redis Cluster.
func (d *deployment) cluster() bool {
	_, ok := d.rdbs[0].(*redis.ClusterClient)
	return ok
}

// close closes the Client, then the go-redis clients.
func (d *deployment) close() {
	d.fl.Close()
	for _, rdb := range d.rdbs {
		rdb.Close()
	}
}

// connect returns the deployment the flags name: a Client of New on
// -redis, -cluster or -sentinel, or of NewQuorum on -masters (which asks
// every master, bounded by ctx).
// following connects for a command that follows changes (watch, leader
// -watch) for dur, or until interrupted when dur is 0: it returns the
// context to follow under (ended after dur), the deployment and what to
// call when done; or, when the command cannot go on, ok false and the
// exit status (exitOK when interrupted while connecting).
func (c *common) following(ctx context.Context, dur time.Duration, stderr io.Writer) (context.Context, *deployment, func(), int, bool) {
	stop := func() {}
	if dur > 0 {
		ctx, stop = context.WithTimeout(ctx, dur)
	}
	cctx, cancel := context.WithTimeout(ctx, c.bound())
	d, err := c.connect(cctx)
	cancel()
	if err != nil {
		stop()
		if ctx.Err() != nil {
			return ctx, nil, nil, exitOK, false // interrupted while connecting
		}
		return ctx, nil, nil, c.fail(stderr, err), false
	}
	return ctx, d, func() { d.close(); stop() }, 0, true
}

func (c *common) connect(ctx context.Context) (*deployment, error) {
	opts := []fairlock.Option{fairlock.WithPrefix(c.prefix)}
	if c.verbose {
		opts = append(opts, fairlock.WithLogger(slog.New(slog.NewTextHandler(c.stderr, nil))))
	}
	if len(c.masters) == 0 {
		rdb := c.spec.Client(c.timeout)
		fl, err := fairlock.New(rdb, opts...)
		if err != nil {
			rdb.Close()
			return nil, err
		}
		return &deployment{fl: fl, rdbs: []redis.UniversalClient{rdb}}, nil
	}
	d := &deployment{}
	for _, m := range c.masters {
		opt, err := masterOptions(m)
		if err != nil { // not reached: -masters checked it
			return nil, err
		}
		// A master that does not answer a read within -timeout is
		// shown as not answering, while the others' answers count.
		opt.DialTimeout, opt.ReadTimeout, opt.WriteTimeout = c.timeout, c.timeout, c.timeout
		d.rdbs = append(d.rdbs, redis.NewClient(opt))
		d.masters = append(d.masters, redactAddr(m))
	}
	fl, err := fairlock.NewQuorum(ctx, d.rdbs, opts...)
	if err != nil {
		for _, rdb := range d.rdbs {
			rdb.Close()
		}
		return nil, err
	}
	d.fl = fl
	return d, nil
}

// bound is how long one read of the command may take: -timeout, or on
// a quorum a few times that, since a master that does not answer costs
// -timeout at each of the Client's steps that asks the masters in turn
// (NewQuorum's check, Inspect's read, the look-ups of Client names).
func (c *common) bound() time.Duration {
	if len(c.masters) == 0 {
		return c.timeout
	}
	return time.Duration(3+len(c.masters)) * c.timeout
}

// session connects (see connect) for one command's calls, and bounds
// them by bound: it returns the deployment, the context of its calls,
// and what closes both.
func (c *common) session(ctx context.Context) (*deployment, context.Context, func(), error) {
	ctx, cancel := context.WithTimeout(ctx, c.bound())
	d, err := c.connect(ctx)
	if err != nil {
		cancel()
		return nil, nil, nil, err
	}
	return d, ctx, func() { cancel(); d.close() }, nil
}

// mastersFlag is the flag.Value of -masters: addresses, host:port or
// redis:// URLs, comma-separated. A bad value is kept in err, for parse
// to report: the flag package would repeat the value, password and all.
type mastersFlag struct {
	list *[]string
	err  *error
}

var _ flag.Value = mastersFlag{}

func (m mastersFlag) String() string {
	if m.list == nil || len(*m.list) == 0 {
		return ""
	}
	return quorumString(*m.list)
}

// Set splits v at commas; empty items are skipped, and a list with no
// address, or an item that is neither host:port nor a Redis URL, is an
// error.
func (m mastersFlag) Set(v string) error {
	var l []string
	*m.err = nil
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		if _, err := masterOptions(s); err != nil {
			*m.err = fmt.Errorf("-masters %q: %v", redactAddr(s), err)
			return nil
		}
		l = append(l, s)
	}
	if len(l) == 0 {
		*m.err = fmt.Errorf("-masters %q: no address", v)
	}
	*m.list = l
	return nil
}

// masterOptions returns the go-redis options of one master of -masters.
func masterOptions(addr string) (*redis.Options, error) {
	if strings.Contains(addr, "://") {
		return redis.ParseURL(addr)
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return nil, err
	}
	return &redis.Options{Addr: addr}, nil
}

// redactAddr is a master's address without its password.
func redactAddr(addr string) string {
	if !strings.Contains(addr, "://") {
		return addr
	}
	if u, err := url.Parse(addr); err == nil {
		return u.Redacted()
	}
	return "(a URL that does not parse)"
}

// quorumString names a quorum's masters for messages.
func quorumString(masters []string) string {
	r := make([]string, len(masters))
	for i, m := range masters {
		r[i] = redactAddr(m)
	}
	if len(r) == 1 {
		return "quorum of 1 master " + r[0]
	}
	return fmt.Sprintf("quorum of %d masters %s", len(masters), strings.Join(r, ","))
}
