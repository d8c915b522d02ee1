package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock/fairlock/internal/redistest"
)

// BenchmarkClusterAgainstOneServer runs the stress check's default
// workload on 50 locks (-locks 50, 15 s) against a Redis Cluster of 3
// masters with a replica each, then against one server with one replica,
// all started here on loopback, and reports each one's grants/s, Redis
// commands per grant, the CPU all its servers used per grant (INFO cpu,
// replicas included) and the ratio of the two throughputs. It runs the
// pair once, whatever -benchtime says:
//
//	go test -run '^$' -bench ClusterAgainstOneServer -benchtime 1x ./stress
func BenchmarkClusterAgainstOneServer(b *testing.B) {
	cluster, err := redistest.StartCluster(3, 1)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(cluster.Stop)
	primary, err := redistest.Start()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(primary.Stop)
	host, port, _ := strings.Cut(primary.Addr, ":")
	replica, err := redistest.Start("--replicaof", host, port)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(replica.Stop)
	waitInSync(b, replica.Addr)

	load := []string{"-locks", "50", "-duration", "15s", "-json"}
	stress := func(servers []string, target ...string) (report, float64) {
		before := serversCPU(b, servers)
		var out, errs bytes.Buffer
		if code := run(context.Background(), append(target, load...), &out, &errs); code != exitOK {
			b.Fatalf("stress %q: exit %d: %s", target, code, errs.String())
		}
		var r report
		if err := json.Unmarshal(out.Bytes(), &r); err != nil {
			b.Fatal(err)
		}
		grants := r.GrantsPerSec * r.Elapsed
		return r, (serversCPU(b, servers) - before).Seconds() * 1e6 / grants
	}
	for b.Loop() {
		onCluster, clusterCPU := stress(cluster.Addrs(), "-cluster", strings.Join(cluster.Addrs(), ","))
		onOne, oneCPU := stress([]string{primary.Addr, replica.Addr}, "-redis", "redis://"+primary.Addr+"/0")
		b.ReportMetric(clusterCPU, "cluster-server-µs/grant")
		b.ReportMetric(oneCPU, "one-server-µs/grant")
		b.ReportMetric(onCluster.GrantsPerSec, "cluster-grants/s")
		b.ReportMetric(onOne.GrantsPerSec, "one-server-grants/s")
		b.ReportMetric(onCluster.GrantsPerSec/onOne.GrantsPerSec, "cluster/one")
		if onCluster.Commands != nil && onOne.Commands != nil {
			b.ReportMetric(onCluster.Commands.PerGrant, "cluster-cmds/grant")
			b.ReportMetric(onOne.Commands.PerGrant, "one-server-cmds/grant")
		}
	}
}

// serversCPU returns the CPU time the servers at addrs have used, user
// and system, as INFO cpu reports it.
func serversCPU(b *testing.B, addrs []string) time.Duration {
	var total float64
	for _, addr := range addrs {
		rdb := redis.NewClient(&redis.Options{Addr: addr})
		info, err := rdb.Info(context.Background(), "cpu").Result()
		_ = rdb.Close()
		if err != nil {
			b.Fatal(err)
		}
		for _, line := range strings.Split(info, "\r\n") {
			k, v, _ := strings.Cut(line, ":")
			if k == "used_cpu_user" || k == "used_cpu_sys" {
				f, err := strconv.ParseFloat(v, 64)
				if err != nil {
					b.Fatal(err)
				}
				total += f
			}
		}
	}
	return time.Duration(total * float64(time.Second))
}

// waitInSync waits until the replica at addr has its link to its primary up.
func waitInSync(b *testing.B, addr string) {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		info, err := rdb.Info(context.Background(), "replication").Result()
		if err == nil && strings.Contains(info, "master_link_status:up") {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	b.Fatalf("replica %s never came in sync", addr)
}
