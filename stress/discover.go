package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"

	"github.com/redis/go-redis/v9"
)

// discover returns the addresses of the deployment's servers, true for
// the primaries: the one server of a URL, the nodes a cluster node lists,
// or the primary the sentinels name and the replicas they know, or the
// masters of a quorum.
func (s *sampler) discover(ctx context.Context) (map[string]bool, error) {
	ctx, cancel := context.WithTimeout(ctx, sampleDial+sampleRead)
	defer cancel()
	switch {
	case s.tgt.quorum():
		found := map[string]bool{}
		for _, addr := range s.tgt.masters {
			found[addr] = true
		}
		return found, nil
	case len(s.sentinels) > 0:
		var errs []error
		for i, sc := range s.sentinels {
			found, err := sentinelNodes(ctx, sc.c, s.tgt.spec.Master)
			if err == nil {
				s.sentinels[0], s.sentinels[i] = sc, s.sentinels[0]
				return found, nil
			}
			errs = append(errs, fmt.Errorf("%s: %w", sc.addr, err))
			_ = sc.c.Close()
			sc.c = s.sentinel(sc.addr)
		}
		return nil, fmt.Errorf("asking the sentinels for the servers: %w", errors.Join(errs...))
	case len(s.tgt.spec.Cluster) > 0:
		// Any node knows the cluster: ask those found before, then the
		// seeds. A seed is not read for its counters: it may be a node
		// found under another name.
		var errs []error
		for _, addr := range slices.Sorted(maps.Keys(s.view)) {
			n := s.nodes[addr]
			if n.down {
				continue
			}
			text, err := n.rdb.ClusterNodes(ctx).Result()
			if err == nil {
				return clusterNodes(text), nil
			}
			errs = append(errs, fmt.Errorf("%s: %w", addr, err))
			s.failed(n)
		}
		for _, addr := range s.tgt.spec.Cluster {
			c := s.client(addr)
			text, err := c.ClusterNodes(ctx).Result()
			_ = c.Close()
			if err == nil {
				return clusterNodes(text), nil
			}
			errs = append(errs, fmt.Errorf("%s: %w", addr, err))
		}
		return nil, fmt.Errorf("CLUSTER NODES: %w", errors.Join(errs...))
	}
	opt, err := redis.ParseURL(s.tgt.spec.RedisURL)
	if err != nil {
		return nil, err
	}
	return map[string]bool{opt.Addr: true}, nil
}

// sentinelNodes asks one sentinel for the primary named master and its
// replicas.
func sentinelNodes(ctx context.Context, c *redis.SentinelClient, master string) (map[string]bool, error) {
	p, err := c.GetMasterAddrByName(ctx, master).Result()
	if err != nil {
		return nil, err
	}
	if len(p) != 2 {
		return nil, fmt.Errorf("SENTINEL GET-MASTER-ADDR-BY-NAME %s: %q", master, p)
	}
	replicas, err := c.Replicas(ctx, master).Result()
	if err != nil {
		return nil, err
	}
	found := map[string]bool{net.JoinHostPort(p[0], p[1]): true}
	for _, r := range replicas {
		if r["ip"] != "" && r["port"] != "" {
			found[net.JoinHostPort(r["ip"], r["port"])] = false
		}
	}
	return found, nil
}

// clusterNodes returns the addresses of the nodes a CLUSTER NODES reply
// lists, true for the masters; nodes without an address are left out.
func clusterNodes(text string) map[string]bool {
	found := map[string]bool{}
	for l := range strings.Lines(text) {
		f := strings.Fields(l)
		if len(f) < 3 {
			continue
		}
		// ip:port@cport[,hostname]
		addr, _, _ := strings.Cut(f[1], "@")
		flags := strings.Split(f[2], ",")
		host, port, err := net.SplitHostPort(addr)
		if err != nil || host == "" || port == "0" || slices.Contains(flags, "noaddr") || slices.Contains(flags, "handshake") {
			continue
		}
		found[addr] = slices.Contains(flags, "master")
	}
	return found
}
