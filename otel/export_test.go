package otel

import "time"

// Waiting returns the number of calls whose span o keeps.
func Waiting(o *Observer) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.calls)
}

// SetClock sets the clock of o's age gauges.
func SetClock(o *Observer, now func() time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.now = now
}
