package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
)

// link is a scheduler's network link to Redis: the dialer of the go-redis
// client under its fairlock Client. sever cuts it, as a partition or a
// stopped process would: the connections it made are closed, and it
// makes no more. The scheduler's store client does not go through it.
type link struct {
	tls *tls.Config // the Redis URL's, for rediss://; nil otherwise

	mu    sync.Mutex
	cut   bool       // guarded by mu
	conns []net.Conn // guarded by mu
}

var errSevered = errors.New("link to Redis severed")

// dial is a go-redis Dialer.
func (l *link) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	if l.severed() {
		return nil, errSevered
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	if l.tls != nil {
		c = tls.Client(c, l.tls)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cut {
		c.Close()
		return nil, errSevered
	}
	l.conns = append(l.conns, c)
	return c, nil
}

func (l *link) severed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cut
}

// quietSevered is go-redis's logger in this program. go-redis logs every
// dial that fails, and after sever every dial of the link fails, on
// purpose: it drops those lines, and writes the others to w.
type quietSevered struct{ w io.Writer }

func (l quietSevered) Printf(_ context.Context, format string, v ...any) {
	line := strings.TrimSuffix(fmt.Sprintf(format, v...), "\n")
	if !strings.Contains(line, errSevered.Error()) {
		fmt.Fprintln(l.w, "redis: "+line)
	}
}

// sever closes the link's connections, and refuses new ones.
func (l *link) sever() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cut = true
	for _, c := range l.conns {
		c.Close()
	}
	l.conns = nil
}
