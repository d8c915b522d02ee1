package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fairlock/fairlock/internal/pause"
)

// view returns the cluster as the node at addr sees it.
func (c *Cluster) view(ctx context.Context, addr string) ([]clusterNode, error) {
	reply, err := c.admin[addr].ClusterNodes(ctx).Result()
	if err != nil {
		return nil, err
	}
	return parseClusterNodes(reply)
}

// liveView returns the cluster as the first live node that answers sees it.
func (c *Cluster) liveView(ctx context.Context) ([]clusterNode, string, error) {
	var errs []error
	for _, s := range c.live() {
		nodes, err := c.view(ctx, s.Addr)
		if err == nil {
			return nodes, s.Addr, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", s.Addr, err))
	}
	return nil, "", fmt.Errorf("redistest: no live cluster node answered: %w", errors.Join(errs...))
}

// Masters returns the addresses of the masters that serve slots, as a live
// node sees them, sorted.
func (c *Cluster) Masters(ctx context.Context) ([]string, error) {
	nodes, _, err := c.liveView(ctx)
	if err != nil {
		return nil, err
	}
	var addrs []string
	for _, n := range nodes {
		if n.isMaster() && !n.has("fail") && len(n.slots) > 0 {
			addrs = append(addrs, n.addr)
		}
	}
	slices.Sort(addrs)
	return addrs, nil
}

// Replicas returns the addresses of the replicas that are not failed, as a
// live node sees them, sorted.
func (c *Cluster) Replicas(ctx context.Context) ([]string, error) {
	nodes, _, err := c.liveView(ctx)
	if err != nil {
		return nil, err
	}
	var addrs []string
	for _, n := range nodes {
		if n.has("slave") && !n.has("fail") {
			addrs = append(addrs, n.addr)
		}
	}
	slices.Sort(addrs)
	return addrs, nil
}

// WaitHealthy waits until every live node reports cluster_state:ok with
// every slot served, sees the same slot owners and no live node as
// failing, and every live replica is in sync with its master. It returns
// an error that says what was still wrong when ctx ended.
func (c *Cluster) WaitHealthy(ctx context.Context) error {
	if err := c.waitHealthy(ctx, -1); err != nil {
		return fmt.Errorf("redistest: the cluster was not healthy: %w (%w)", err, ctx.Err())
	}
	return nil
}

// WaitFailover waits until the slot of key is served by a live master other
// than old (after Kill(old), one of its replicas), and the cluster is
// healthy as WaitHealthy says. It returns the new master's address.
func (c *Cluster) WaitFailover(key, old string, within time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	var last error
	for {
		owner, err := c.MasterOf(ctx, key)
		switch {
		case err != nil:
			last = err
		case owner == old:
			last = fmt.Errorf("the slot of %q is still served by %s", key, old)
		default:
			if err := c.waitHealthy(ctx, -1); err != nil {
				return "", fmt.Errorf("redistest: no healthy cluster within %v after %s took over from %s: %w",
					within, owner, old, err)
			}
			if again, err := c.MasterOf(ctx, key); err == nil && again == owner {
				return owner, nil
			}
			continue
		}
		if !pause.For(ctx, 50*time.Millisecond) {
			return "", fmt.Errorf("redistest: no new master of %q within %v: %w", key, within, last)
		}
	}
}

// waitHealthy polls the health of the cluster until ctx ends, and returns
// the last reason it was not healthy. wantReplicas >= 0 also requires that
// many replicas per master.
func (c *Cluster) waitHealthy(ctx context.Context, wantReplicas int) error {
	var balanced, met time.Time // when the replicas were last moved, the nodes last met
	for {
		err := c.health(ctx, wantReplicas)
		if err == nil {
			return nil
		}
		if errors.Is(err, errUnjoined) && time.Since(met) > 2*time.Second {
			c.join(ctx)
			met = time.Now()
		}
		if errors.Is(err, errUnbalanced) && time.Since(balanced) > 2*time.Second {
			// A master with a replica too many and one with a replica too
			// few: move one over, and look again.
			c.balance(ctx, wantReplicas)
			balanced = time.Now()
		}
		if !pause.For(ctx, 50*time.Millisecond) {
			return err
		}
	}
}

// errUnbalanced: a master has more or fewer replicas than wanted.
var errUnbalanced = errors.New("replicas unbalanced")

// errUnjoined: a live node does not know another.
var errUnjoined = errors.New("not joined")

// join has each live node meet every live node that it does not know, once
// the nodes have begun to meet (until then redis-cli must be able to set
// each node's config epoch, which a node that knows another refuses). A
// node abandons a handshake that the other side has not answered within
// cluster-node-timeout (a stalled process on a loaded machine), and then
// does not know the other, and may stay unknown to it; neither learns of
// the other from the pings of a node it does not know. redis-cli waits for
// such a cluster to join for ever, and a replica that the other nodes do
// not know is no master's replica to them.
func (c *Cluster) join(ctx context.Context) {
	live := c.live()
	knows := map[string]map[string]bool{} // address -> the other addresses in its view
	begun := false
	for _, s := range live {
		nodes, err := c.view(ctx, s.Addr)
		if err != nil {
			continue
		}
		knows[s.Addr] = map[string]bool{}
		for _, n := range nodes {
			if !n.has("myself") && !n.has("handshake") {
				knows[s.Addr][n.addr] = true
				begun = true
			}
		}
	}
	if !begun {
		return
	}
	for _, a := range live {
		for _, b := range live {
			if a != b && knows[a.Addr] != nil && !knows[a.Addr][b.Addr] {
				host, port, _ := net.SplitHostPort(b.Addr)
				_ = c.admin[a.Addr].ClusterMeet(ctx, host, port).Err()
			}
		}
	}
}

// balance moves one replica of a master with more than want replicas to a
// master with fewer, as the first live node sees them. Best effort: the
// caller looks at the cluster's health again.
func (c *Cluster) balance(ctx context.Context, want int) {
	nodes, _, err := c.liveView(ctx)
	if err != nil {
		return
	}
	replicas := map[string][]clusterNode{} // master id -> its replicas
	var masters []clusterNode
	for _, n := range nodes {
		if n.isMaster() && len(n.slots) > 0 {
			masters = append(masters, n)
		} else if n.master != "" && !n.failing() {
			replicas[n.master] = append(replicas[n.master], n)
		}
	}
	for _, short := range masters {
		if len(replicas[short.id]) >= want {
			continue
		}
		for _, long := range masters {
			if extra := replicas[long.id]; len(extra) > want {
				if a := c.admin[extra[0].addr]; a != nil {
					_ = a.Do(ctx, "CLUSTER", "REPLICATE", short.id).Err()
				}
				return
			}
		}
	}
}

// health returns why the cluster is not healthy yet, or nil.
func (c *Cluster) health(ctx context.Context, wantReplicas int) error {
	live := c.live()
	isLive := map[string]bool{}
	for _, s := range live {
		isLive[s.Addr] = true
	}
	var owners string // the slot owners, as the first node sees them
	for _, s := range live {
		admin := c.admin[s.Addr]
		info, err := admin.ClusterInfo(ctx).Result()
		if err != nil {
			return fmt.Errorf("%s: CLUSTER INFO: %w", s.Addr, err)
		}
		if st := InfoField(info, "cluster_state"); st != "ok" {
			return fmt.Errorf("%s: cluster_state:%s", s.Addr, st)
		}
		if n := InfoField(info, "cluster_slots_ok"); n != strconv.Itoa(clusterSlots) {
			return fmt.Errorf("%s: cluster_slots_ok:%s", s.Addr, n)
		}
		nodes, err := c.view(ctx, s.Addr)
		if err != nil {
			return fmt.Errorf("%s: CLUSTER NODES: %w", s.Addr, err)
		}
		byID := map[string]clusterNode{}
		known := map[string]bool{} // addresses in the view
		var mine string
		for _, n := range nodes {
			byID[n.id] = n
			known[n.addr] = true
			if isLive[n.addr] && n.failing() {
				return fmt.Errorf("%s sees %s as %s", s.Addr, n.addr, strings.Join(n.flags, ","))
			}
			if n.has("myself") {
				mine = n.id
			}
		}
		for _, l := range live {
			if l != s && !known[l.Addr] {
				return fmt.Errorf("%w: %s does not know %s", errUnjoined, s.Addr, l.Addr)
			}
		}
		if o := slotOwners(nodes); owners == "" {
			owners = o
		} else if o != owners {
			return fmt.Errorf("nodes disagree on the slot owners: %s sees %s, %s sees %s", live[0].Addr, owners, s.Addr, o)
		}
		if me := byID[mine]; me.has("slave") {
			if m, ok := byID[me.master]; !ok || !isLive[m.addr] {
				return fmt.Errorf("replica %s follows a master that is not live (%s)", s.Addr, me.master)
			}
			repl, err := admin.Info(ctx, "replication").Result()
			if err != nil {
				return fmt.Errorf("%s: INFO replication: %w", s.Addr, err)
			}
			if st := InfoField(repl, "master_link_status"); st != "up" {
				return fmt.Errorf("replica %s: master_link_status:%s", s.Addr, st)
			}
		}
		if wantReplicas >= 0 {
			for _, n := range nodes {
				if !n.isMaster() || len(n.slots) == 0 {
					continue
				}
				got := 0
				for _, r := range nodes {
					if r.master == n.id && isLive[r.addr] {
						got++
					}
				}
				if got != wantReplicas {
					return fmt.Errorf("%w: %s sees %d replicas of %s, want %d", errUnbalanced, s.Addr, got, n.addr, wantReplicas)
				}
			}
		}
	}
	return nil
}

// slotOwners describes who serves which slots, canonically.
func slotOwners(nodes []clusterNode) string {
	var parts []string
	for _, n := range nodes {
		if n.isMaster() && len(n.slots) > 0 {
			parts = append(parts, fmt.Sprintf("%s%v", n.addr, n.slots))
		}
	}
	slices.Sort(parts)
	return strings.Join(parts, " ")
}

// InfoField returns the value of one "name:value" line of an INFO reply
// (or of CLUSTER INFO), "" when it has none.
func InfoField(info, name string) string {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return ""
}
