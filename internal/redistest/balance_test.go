package redistest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A cluster whose replicas are unbalanced (one master with two, one with
// none) is balanced again by waitHealthy.
func TestWaitHealthyMovesAnExtraReplicaToAMasterWithout(t *testing.T) {
	Slow(t)
	t.Parallel()
	c, err := StartCluster(3, 1)
	require.NoError(t, err)
	t.Cleanup(c.Stop)
	ctx, cancel := context.WithTimeout(context.Background(), clusterReady)
	defer cancel()

	nodes, _, err := c.liveView(ctx)
	require.NoError(t, err)
	var masters, replicas []clusterNode
	for _, n := range nodes {
		if n.isMaster() {
			masters = append(masters, n)
		} else {
			replicas = append(replicas, n)
		}
	}
	require.Len(t, masters, 3)
	require.Len(t, replicas, 3)
	// Give the replica of one master to another: 2, 0 and 1 replicas.
	moved, to := replicas[0], ""
	for _, m := range masters {
		if m.id != moved.master {
			to = m.id
			break
		}
	}
	require.NoError(t, c.admin[moved.addr].Do(ctx, "CLUSTER", "REPLICATE", to).Err())
	require.Eventually(t, func() bool {
		return errorIsUnbalanced(c.health(ctx, 1))
	}, 10*time.Second, 20*time.Millisecond, "the cluster never looked unbalanced")

	require.NoError(t, c.waitHealthy(ctx, 1))
}

func errorIsUnbalanced(err error) bool {
	return err != nil && errors.Is(err, errUnbalanced)
}
