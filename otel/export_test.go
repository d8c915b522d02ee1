package otel

// Waiting returns the number of calls whose span o keeps.
func Waiting(o *Observer) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.calls)
}
