package fair

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
)

type countingReloader struct{ n atomic.Int32 }

func (r *countingReloader) ReloadState(context.Context) { r.n.Add(1) }

func TestFailuresThatAMovedMasterExplainsAskForANewMapAtMostSoOften(t *testing.T) {
	for _, tc := range []struct {
		err    error
		reload bool
	}{
		{&net.OpError{Op: "read", Err: errors.New("connection reset")}, true},
		{context.DeadlineExceeded, true},
		{replyError("MOVED 3999 127.0.0.1:6381"), true},
		{replyError("CLUSTERDOWN The cluster is down"), true},
		{replyError("TRYAGAIN Multiple keys request during rehashing of slot"), true},
		{replyError("READONLY You can't write against a read only replica."), true},
		{replyError("WRONGTYPE Operation against a key holding the wrong kind of value"), false},
		{replyError("NOPERM this user has no permissions"), false},
		{context.Canceled, false},
		{redis.ErrClosed, false},
		{nil, false},
	} {
		r := &countingReloader{}
		topo := &topology{reloader: r}
		topo.failed(tc.err)
		topo.failed(tc.err) // at once again: rate-limited
		want := int32(0)
		if tc.reload {
			want = 1
		}
		assert.Equal(t, want, r.n.Load(), "%v", tc.err)
	}

	r := &countingReloader{}
	topo := &topology{reloader: r}
	topo.failed(context.DeadlineExceeded)
	topo.last.Store(time.Now().Add(-reloadEvery).UnixNano())
	topo.failed(context.DeadlineExceeded)
	assert.Equal(t, int32(2), r.n.Load(), "again after the interval")

	var none *topology
	none.failed(context.DeadlineExceeded) // a client without a map: nothing to do
}
