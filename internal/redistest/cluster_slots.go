package redistest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// A cluster's nodes as CLUSTER NODES lists them, and which of them serves
// a key's slot.

// clusterSlots is the number of hash slots of a Redis Cluster.
const clusterSlots = 16384

// clusterNode is one line of CLUSTER NODES.
type clusterNode struct {
	id, addr string
	flags    []string
	master   string   // id of its master, for a replica
	slots    [][2]int // slot ranges it serves, inclusive
}

func (n clusterNode) has(flag string) bool { return slices.Contains(n.flags, flag) }

func (n clusterNode) isMaster() bool { return n.has("master") }

// failing reports whether the node is flagged as failed, suspected, or not
// yet or no longer reachable.
func (n clusterNode) failing() bool {
	return n.has("fail") || n.has("fail?") || n.has("handshake") || n.has("noaddr")
}

func (n clusterNode) serves(slot int) bool {
	for _, r := range n.slots {
		if slot >= r[0] && slot <= r[1] {
			return true
		}
	}
	return false
}

// parseClusterNodes parses a CLUSTER NODES reply.
func parseClusterNodes(reply string) ([]clusterNode, error) {
	var nodes []clusterNode
	for line := range strings.Lines(reply) {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) < 8 {
			return nil, fmt.Errorf("malformed CLUSTER NODES line %q", line)
		}
		addr, _, _ := strings.Cut(f[1], "@")
		n := clusterNode{id: f[0], addr: addr, flags: strings.Split(f[2], ",")}
		if f[3] != "-" {
			n.master = f[3]
		}
		for _, s := range f[8:] {
			if strings.HasPrefix(s, "[") { // a slot being migrated
				continue
			}
			lo, hi, isRange := strings.Cut(s, "-")
			a, err := strconv.Atoi(lo)
			if err != nil {
				return nil, fmt.Errorf("malformed slot %q in CLUSTER NODES", s)
			}
			b := a
			if isRange {
				if b, err = strconv.Atoi(hi); err != nil {
					return nil, fmt.Errorf("malformed slot %q in CLUSTER NODES", s)
				}
			}
			n.slots = append(n.slots, [2]int{a, b})
		}
		nodes = append(nodes, n)
	}
	return nodes, nil
}

// Slot returns the hash slot of key (CLUSTER KEYSLOT).
func (c *Cluster) Slot(ctx context.Context, key string) (int, error) {
	var errs []error
	for _, s := range c.live() {
		slot, err := c.admin[s.Addr].ClusterKeySlot(ctx, key).Result()
		if err == nil {
			return int(slot), nil
		}
		errs = append(errs, err)
	}
	return 0, fmt.Errorf("redistest: CLUSTER KEYSLOT %q: %w", key, errors.Join(errs...))
}

// MasterOf returns the address of the master that serves key's slot, as a
// live node sees it.
func (c *Cluster) MasterOf(ctx context.Context, key string) (string, error) {
	slot, err := c.Slot(ctx, key)
	if err != nil {
		return "", err
	}
	nodes, seer, err := c.liveView(ctx)
	if err != nil {
		return "", err
	}
	for _, n := range nodes {
		if n.isMaster() && n.serves(slot) {
			return n.addr, nil
		}
	}
	return "", fmt.Errorf("redistest: %s knows no master of slot %d", seer, slot)
}

// MastersOf returns, for each key, the address of the master that serves
// its slot, all as one live node sees the cluster.
func (c *Cluster) MastersOf(ctx context.Context, keys ...string) ([]string, error) {
	nodes, seer, err := c.liveView(ctx)
	if err != nil {
		return nil, err
	}
	p := c.admin[seer].Pipeline()
	slots := make([]*redis.IntCmd, len(keys))
	for i, k := range keys {
		slots[i] = p.ClusterKeySlot(ctx, k)
	}
	if _, err := p.Exec(ctx); err != nil {
		return nil, fmt.Errorf("redistest: CLUSTER KEYSLOT on %s: %w", seer, err)
	}
	out := make([]string, len(keys))
	for i, cmd := range slots {
		for _, n := range nodes {
			if n.isMaster() && n.serves(int(cmd.Val())) {
				out[i] = n.addr
			}
		}
		if out[i] == "" {
			return nil, fmt.Errorf("redistest: %s knows no master of slot %d", seer, cmd.Val())
		}
	}
	return out, nil
}
