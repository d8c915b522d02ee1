// Package fair is fairlock's lock engine: it runs the scripts of package
// lua against Redis, waits in line using the notify hub, and keeps holds
// alive with a watchdog.
//
// It is a building block of fairlock: the root package wraps it in the
// public API (contexts as identities, options, validation) and the stress
// command drives it. Applications use the root package.
//
// An Engine belongs to one fairlock Client. Mutex.Lock takes a lock: one
// attempt first, then, when waiting, a subscription and a poll loop that
// sleeps on the hub's push or the script's hint. A Hold is a grant in this
// process; its context ends when the hold ends. Every goroutine the engine
// starts is stopped and waited for by Close.
package fair
