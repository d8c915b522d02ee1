// Package faultproxy is a TCP proxy on loopback that injects network faults
// between a client and a server, for fairlock's fault tests. A client that
// dials the proxy instead of the server can be made to see:
//
//   - latency: every chunk is delivered a fixed time after it was read
//     (SetLatency);
//   - half-open connections: a frozen connection stays open at both ends
//     but forwards nothing, in either direction, so neither side sees an
//     error (FreezeExisting, FreezeNew, FreezeAll);
//   - a server that went away: open connections are closed and new ones
//     are closed at once (Reject);
//   - a lost reply: the server received the request and acted on it, but
//     its answer never reaches the client (LoseNextReply).
//
// Bytes that a frozen or deaf connection does not forward are read and
// dropped, as a broken network would, so a connection that lost data is
// never healed: it stays broken until one side closes it, and the proxy
// then closes the other side. Heal only changes how later connections and
// later chunks are treated.
//
// It is a test helper; nothing in the library imports it.
package faultproxy
