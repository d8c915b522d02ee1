package fairlock

import (
	"time"

	"github.com/fairlock/fairlock/fair"
)

// WithHeartbeat sets the heartbeat of the Client's notify hub (default 1s):
// after one silent heartbeat the hub pings, after two it rebuilds its
// pub/sub connection. Tests shorten it to see a half-open connection
// replaced quickly.
func WithHeartbeat(d time.Duration) Option {
	return clientOption(func(c *config) { c.heartbeat = d })
}

// WithCallTimeout sets the bound of one state-changing call to Redis
// (default 10s). Tests shorten it to see Close's bound quickly.
func WithCallTimeout(d time.Duration) Option {
	return clientOption(func(c *config) { c.callTimeout = d })
}

// SetQuorumSkew makes the scripts of a quorum Client c read master i's
// clock d later than it is: with the keys' expiries on that master
// shortened by d, it is a step of that master's clock (see
// lua/lib.lua, qlib).
func SetQuorumSkew(c *Client, i int, d time.Duration) { c.run.(*fair.Quorum).SetSkew(i, d) }
