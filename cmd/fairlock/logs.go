package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// redisLog is go-redis's logger in this process: go-redis has one for
// the whole process, which writes every failed dial to stderr. It
// discards what go-redis logs, unless a command runs with -v: then it
// writes it to that command's stderr.
var redisLog = &switchLog{}

var setRedisLog sync.Once

// quietRedis makes redisLog go-redis's logger, once per process.
func quietRedis() { setRedisLog.Do(func() { redis.SetLogger(redisLog) }) }

// switchLog is a go-redis logger that writes to a writer that may
// change, or discards.
type switchLog struct {
	w atomic.Pointer[io.Writer] // nil: discard
}

// to makes the logger write to w; nil discards.
func (l *switchLog) to(w io.Writer) {
	if w == nil {
		l.w.Store(nil)
		return
	}
	l.w.Store(&w)
}

// Printf is go-redis's logging call.
func (l *switchLog) Printf(_ context.Context, format string, v ...any) {
	if w := l.w.Load(); w != nil {
		fmt.Fprintf(*w, "redis: "+strings.TrimSuffix(format, "\n")+"\n", v...)
	}
}
