package redistest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Two nodes that do not know each other, as abandoned handshakes leave
// them, are met again by waitHealthy, well before they would learn of each
// other by themselves (here not within a minute: CLUSTER FORGET keeps a
// node from taking the forgotten one in from the others' gossip that long).
func TestWaitHealthyMeetsNodesThatDoNotKnowEachOther(t *testing.T) {
	Slow(t)
	t.Parallel()
	c, err := StartCluster(3, 1)
	require.NoError(t, err)
	t.Cleanup(c.Stop)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	nodes, _, err := c.liveView(ctx)
	require.NoError(t, err)
	var master, replica clusterNode // a master, and a replica of another
	for _, n := range nodes {
		if n.isMaster() && master.id == "" {
			master = n
		}
	}
	for _, n := range nodes {
		if n.master != "" && n.master != master.id {
			replica = n
		}
	}
	require.NotEmpty(t, master.id)
	require.NotEmpty(t, replica.id)
	require.NoError(t, c.admin[master.addr].Do(ctx, "CLUSTER", "FORGET", replica.id).Err())
	require.NoError(t, c.admin[replica.addr].Do(ctx, "CLUSTER", "FORGET", master.id).Err())
	require.ErrorIs(t, c.health(ctx, 1), errUnjoined)

	require.NoError(t, c.waitHealthy(ctx, 1))
}
