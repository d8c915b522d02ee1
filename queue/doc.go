// Package queue is fairlock's wait queue: the Redis keys of a lock, the
// rules for the strings that go into them, and the shape of a queue entry.
//
// It is a building block of fairlock: the fair package and the stress
// command use it, and people studying the algorithm read it. Applications
// use the root package.
package queue
