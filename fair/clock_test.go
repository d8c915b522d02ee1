package fair

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The hand-over latency sets the server's clock beside the waiter's at
// the midpoint of the last poll, and is 0 whenever a time is missing.
func TestHandOverLatencyIsEstimatedFromTheLastPoll(t *testing.T) {
	sent := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := serverClock{sent: sent, answered: sent.Add(2 * time.Millisecond), server: 5_000_000}
	// The poll ran at server time 5 s, taken as sent+1ms here. A
	// hand-over 40ms later on the server's clock is at sent+41ms here.
	heard := sent.Add(41*time.Millisecond + 300*time.Microsecond)
	require.Equal(t, 300*time.Microsecond, c.latency(5_040_000, heard))
	require.Equal(t, time.Microsecond, c.latency(5_040_000, sent.Add(30*time.Millisecond)), "never below a µs when known")
	require.Zero(t, c.latency(0, heard), "a push without a time")
	require.Zero(t, serverClock{sent: sent, answered: sent}.latency(5_040_000, heard), "a server that did not say its time")
	require.Zero(t, c.latency(5_040_000, time.Time{}), "nothing heard")
}
