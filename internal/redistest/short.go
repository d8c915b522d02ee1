package redistest

import "testing"

// Slow skips t under go test -short. The quick loop runs the model,
// differential and core tests; a test that starts a Cluster, sentinels or
// several servers, waits through a fault, a lease or a failover, or runs
// for more than about a second calls Slow first. Without -short, as CI
// runs the tests, Slow does nothing.
func Slow(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("slow: skipped under -short; CI runs it")
	}
}
