package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
)

func TestOnlyConnectionErrorsAreRetriedWhenInspecting(t *testing.T) {
	cases := []struct {
		err  error
		want bool
	}{
		{&net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}, true},
		{fmt.Errorf("inspecting: %w", syscall.ECONNREFUSED), true},
		{io.EOF, true},
		{fmt.Errorf("read: %w", syscall.ECONNRESET), true},
		{redis.ErrClosed, true},
		{errors.New("WRONGTYPE Operation against a key holding the wrong kind of value"), false},
		{redis.Nil, false},
	}
	for _, c := range cases {
		assert.Equal(t, c.want, connectionError(c.err), "%v", c.err)
	}
}
