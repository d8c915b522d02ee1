package fairlock_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock/internal/redistest"
)

// The core cases of the end-to-end suite (mutex_test.go), run on the production
// topologies: a Redis Cluster of 3 masters with a replica each, through a
// *redis.ClusterClient, and a primary with 2 replicas under 3 sentinels,
// through a failover client. TestTopologies starts both at once, shares
// them between the cases (parallel subtests) and stops them in its
// cleanup, which runs after every case has ended.

// topology is a Redis deployment the core cases run on.
type topology struct {
	// rdb returns a new client of the deployment, closed when t ends.
	rdb func(t testing.TB) redis.UniversalClient
	// names returns the lock names to run a case on, made from base.
	names func(t *testing.T, base string) []string
	// nodes and dialAs are env's.
	nodes  []string
	dialAs func(t testing.TB, user, password string) redis.UniversalClient
}

func TestTopologies(t *testing.T) {
	redistest.Slow(t)
	t.Parallel()
	var (
		wg                 sync.WaitGroup
		cluster            *redistest.Cluster
		set                *redistest.SentinelSet
		clusterErr, setErr error
		clusterUp, setUp   time.Duration
	)
	start := time.Now()
	wg.Go(func() {
		cluster, clusterErr = redistest.StartCluster(3, 1)
		clusterUp = time.Since(start)
	})
	wg.Go(func() {
		set, setErr = redistest.StartSentinel(2, 3)
		setUp = time.Since(start)
	})
	wg.Wait()
	if cluster != nil {
		t.Cleanup(cluster.Stop)
		t.Logf("cluster of 3 masters and 3 replicas ready in %v", clusterUp)
	}
	if set != nil {
		t.Cleanup(set.Stop)
		t.Logf("primary, 2 replicas and 3 sentinels ready in %v", setUp)
	}

	t.Run("Cluster", func(t *testing.T) {
		t.Parallel()
		require.NoError(t, clusterErr)
		masters, err := cluster.Masters(context.Background())
		require.NoError(t, err)
		require.Len(t, masters, 3)
		runCoreCases(t, topology{
			rdb:   func(t testing.TB) redis.UniversalClient { return cluster.Client(t) },
			nodes: cluster.Addrs(),
			dialAs: func(t testing.TB, user, password string) redis.UniversalClient {
				rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs(), Username: user, Password: password})
				t.Cleanup(func() { _ = rdb.Close() })
				return rdb
			},
			// One name per master: every case runs on every master.
			names: func(t *testing.T, base string) []string {
				byMaster := map[string]string{}
				for i := 0; len(byMaster) < len(masters); i++ {
					require.Less(t, i, 1000, "no names on every master")
					name := fmt.Sprintf("%s-%d", base, i)
					m, err := cluster.MasterOf(context.Background(), "{"+name+"}")
					require.NoError(t, err)
					if _, ok := byMaster[m]; !ok {
						byMaster[m] = name
					}
				}
				var names []string
				for _, m := range masters {
					names = append(names, byMaster[m])
				}
				return names
			},
		})
	})
	t.Run("Sentinel", func(t *testing.T) {
		t.Parallel()
		require.NoError(t, setErr)
		runCoreCases(t, topology{
			rdb:   func(t testing.TB) redis.UniversalClient { return set.Client(t) },
			names: func(_ *testing.T, base string) []string { return []string{base} },
			nodes: set.Addrs(),
			dialAs: func(t testing.TB, user, password string) redis.UniversalClient {
				rdb := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: set.MasterName(), SentinelAddrs: set.SentinelAddrs(),
					Username: user, Password: password})
				t.Cleanup(func() { _ = rdb.Close() })
				return rdb
			},
		})
	})
}

// runCoreCases runs every core case on every name the topology gives, as
// parallel subtests of t.
func runCoreCases(t *testing.T, topo topology) {
	cases := []struct {
		name string
		run  func(t *testing.T, e *env, lock string)
	}{
		{"UncontendedLockAndUnlock", uncontendedLockAndUnlock},
		{"TryLockNeverEnqueuesAndFailsWhileOthersWait", tryLockNeverEnqueuesAndFailsWhileOthersWait},
		{"WaitersAreGrantedInJoinOrder", waitersAreGrantedInJoinOrder},
		{"ConcurrentIncrementsLoseNoUpdate", concurrentIncrementsLoseNoUpdate},
		{"ReentryCountsLevels", reentryCountsLevels},
		{"TokensIncreaseAcrossGrants", tokensIncreaseAcrossGrants},
		{"ForceUnlockHandsOverAndHolderLearnsLeaseLost", forceUnlockHandsOverAndHolderLearnsLeaseLost},
		{"WaiterDeadlineExceededIsReportedAndLeavesNoTrace", waiterDeadlineExceededIsReportedAndLeavesNoTrace},
		{"CloseReturnsErrClosedToWaitersAndReleasesHolds", closeReturnsErrClosedToWaitersAndReleasesHolds},
		{"MultiLockHoldsEveryNameUntilUnlock", multiLockHoldsEveryNameUntilUnlock},
		{"MultiLockTryLockIsAllOrNone", multiLockTryLockIsAllOrNone},
		{"MultiLockThatGivesUpHoldsNothing", multiLockThatGivesUpHoldsNothing},
		{"MultiLockOverlappingSetsNeverDeadlock", multiLockOverlappingSetsNeverDeadlock},
	}
	cases = append(cases, weightedCoreCases...)
	cases = append(cases, familyCases...)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			for _, lock := range topo.names(t, c.name) {
				t.Run(lock, func(t *testing.T) {
					t.Parallel()
					c.run(t, &env{t: t, rdb: topo.rdb(t), prefix: redistest.Prefix(t), dial: topo.rdb, nodes: topo.nodes, dialAs: topo.dialAs}, lock)
				})
			}
		})
	}
}
