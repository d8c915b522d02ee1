// Package notify is fairlock's notify hub: it wakes waiters of a lock when
// the Lua scripts publish on a wake channel of the lock. It is a building block of
// fairlock, exported only for fairlock's own packages; it is not meant for
// direct use.
//
// One Hub serves one fairlock client. It shares one Redis pub/sub
// connection between every waiter of every lock, reference-counts
// subscriptions per channel (SUBSCRIBE for the first waiter of a channel,
// UNSUBSCRIBE after the last one stops, or once it has lingered for
// Options.Linger without a new one), and routes each message to the
// waiter it names with a send that never blocks. Over a *redis.Ring it
// keeps one such connection per shard that has waiters, and subscribes
// each channel on the shard that owns it, the one the ring publishes to.
//
// # Modes
//
// The hub must subscribe the way the scripts publish; Options.Mode tells
// it, once, at the first Watch. In Classic mode (the default) the scripts
// PUBLISH and the hub SUBSCRIBEs, as above. In Sharded mode, for a Redis
// Cluster of Redis 7 or later through a client that is a Cluster (a
// *redis.ClusterClient), the scripts SPUBLISH and the hub SSUBSCRIBEs each
// channel on the master that serves its slot, through one connection per
// master that has waiters, and none on a replica. A channel is subscribed
// again where its slot lives now (regrouped) when the master answers MOVED,
// when the master drops the subscription (Redis 7 does when the slot
// moves away or the master becomes a replica), and when the connection
// fails; the cluster client is asked to reload its slot map first, and the
// channel's waiters are signalled once the new subscription is confirmed.
// The hub never calls into go-redis while holding its lock.
//
// # Messages
//
// The scripts publish one of two payloads on a lock's channel:
//
//	"<id> <token>"  a grant: the lock was handed to waiter id, with fencing
//	                token <token>, a decimal int64, followed by " <µs>",
//	                the server's time of the hand-over, for a waiter that
//	                reads it; a MultiLock ticket's grant carries every
//	                lock's token, joined with commas (Waiter.Tokens)
//	"<id>"          a plain wake for waiter id
//
// Messages naming an id that is not watching the channel are ignored, and so
// are malformed payloads (logged at debug level).
//
// # Guarantees
//
// Watch returns only after Redis has confirmed the subscription: the hub
// follows the SUBSCRIBE (SSUBSCRIBE) with a PING on the same connection and
// waits for its answer, which the server sends after processing the
// SUBSCRIBE. A PUBLISH
// issued after Watch returns therefore reaches the waiter unless the
// connection fails in between.
//
// A notification is only a hint. Signals are coalesced in a channel of
// capacity one, and the connection can fail, so a waiter must still poll the
// lock on a bounded timer; a lost message costs latency, never correctness.
// To keep that latency low the hub signals every affected waiter whenever
// messages may have been lost: after go-redis reconnects and re-subscribes,
// and after the hub rebuilds the connection. The hub sends a PING when the
// connection has been silent for one heartbeat and rebuilds it when a further
// heartbeat passes without any data, which catches half-open connections
// that go-redis does not detect on its own.
//
// When the shard that owns a channel changes (a ring shard went down), the
// channel moves to its new shard at the next Watch of the channel or when
// the old connection fails, whichever comes first (in Sharded mode also
// at once when the master refuses or drops it), and its waiters are
// signalled once the new subscription is confirmed. Until then they rely
// on polling.
//
// A connection can also stay up on a server that no longer receives the
// publications: after a graceful Sentinel failover the old primary stays
// a master, with the hub's subscription, until Sentinel demotes it. For a
// go-redis failover client the hub watches the client's dials through a
// dial hook: when the client dials another address than the one the hub's
// connection reached, in a dial that started after the hub's, the primary
// has moved, and the hub rebuilds its connection through the client,
// which dials the new primary, and signals every waiter; Options.Moved is
// told. Dials of the hub's own connections never count.
//
// The client hears of a switch from the one sentinel it asks, which may
// hear of it seconds after the sentinel that led the failover. So the hub
// of a failover client also follows every sentinel: it learns them, the
// master's name and its configuration epoch from the hellos Sentinel
// publishes on the servers it monitors, and subscribes to +switch-master
// on each. When any of them names a primary of a newer epoch, the hub
// closes the client's connections to every other server, rebuilds its
// own there, tells Options.Moved, and, until every sentinel names the new
// primary, has the client dial it directly (see sentinel.go and
// redirect.go). This needs a connection to each sentinel and one more
// subscription on the primary, opened with the hub's first connection.
//
// Elsewhere (a client whose address is a name that moved, say) the
// waiter's poll notices: a poll that finds the lock already granted to a
// waiter that received no grant message calls Waiter.Missed. Two misses
// within 30 seconds on one connection (one can be a race) make the hub
// rebuild it through the client or, in Sharded mode, regroup its channels
// after reloading the slot map; at most once per 10 seconds per
// connection. A waiter counts one miss at most, and none after the hub
// signalled it because messages may have been lost.
//
// # Errors
//
// Watch fails at once when Redis refuses the SUBSCRIBE, as it does for an
// ACL user without access to the channel: the error names the channel and
// wraps the server's error reply, a redis.Error ("NOPERM ..."). Other
// waiters and channels are not affected, the connection is kept, and a
// later Watch of the channel asks Redis again. A panic of the client (a
// *redis.Ring panics when asked for a subscription without a channel,
// which the hub never does) becomes an error of Watch, never a crash.
//
// # Concurrency and lifetime
//
// All methods of Hub and Waiter are safe for concurrent use. New opens
// nothing; the first Watch that needs a connection opens it and starts its
// two goroutines, a reader and a writer; in Sharded mode the first regroup
// starts one more, which runs until Close. A connection that fails while
// no channel needs it is closed rather than rebuilt, and so is, in Sharded
// mode, one that a regroup leaves without channels. Close stops every
// goroutine and waits for them.
package notify
