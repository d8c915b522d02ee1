// Package notify is fairlock's notify hub: it wakes waiters of a lock when
// the Lua scripts publish on the lock's channel. It is a building block of
// fairlock, exported only for fairlock's own packages; it is not meant for
// direct use.
//
// One Hub serves one fairlock client. It shares a single Redis pub/sub
// connection between every waiter of every lock, reference-counts
// subscriptions per channel (SUBSCRIBE for the first waiter of a channel,
// UNSUBSCRIBE after the last one stops), and routes each message to the
// waiter it names with a send that never blocks.
//
// # Messages
//
// The scripts publish one of two payloads on a lock's channel:
//
//	"<id> <token>"  a grant: the lock was handed to waiter id, with fencing
//	                token <token>, a decimal int64
//	"<id>"          a plain wake for waiter id
//
// Messages naming an id that is not watching the channel are ignored, and so
// are malformed payloads (logged at debug level).
//
// # Guarantees
//
// Watch returns only after Redis has confirmed the subscription: the hub
// follows the SUBSCRIBE with a PING on the same connection and waits for its
// answer, which the server sends after processing the SUBSCRIBE. A PUBLISH
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
// # Concurrency and lifetime
//
// All methods of Hub and Waiter are safe for concurrent use. New opens
// nothing; the first Watch opens the connection and starts the hub's two
// goroutines, a reader and a writer. Close stops both and waits for them.
package notify
