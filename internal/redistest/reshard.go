package redistest

import (
	"context"
	"fmt"
	"net"
	"slices"
	"time"

	"github.com/fairlock/fairlock/internal/pause"
)

// SlotMove is a slot on its way from one master to another, as a
// resharding moves it (see Cluster.MoveSlot).
type SlotMove struct {
	c        *Cluster
	slot     int
	from, to string
	toID     string
}

// MoveSlot starts moving the slot of key from master from to master to the
// way a resharding does: it marks the slot importing on to and migrating on
// from, then moves every key of the slot with MIGRATE. Until Finish, from
// answers the slot's commands with ASK.
func (c *Cluster) MoveSlot(ctx context.Context, key, from, to string) (*SlotMove, error) {
	slot, err := c.Slot(ctx, key)
	if err != nil {
		return nil, err
	}
	src, dst := c.admin[from], c.admin[to]
	if src == nil || dst == nil {
		return nil, fmt.Errorf("redistest: no master of the cluster at %s or %s", from, to)
	}
	fromID, err := src.ClusterMyID(ctx).Result()
	if err != nil {
		return nil, err
	}
	toID, err := dst.ClusterMyID(ctx).Result()
	if err != nil {
		return nil, err
	}
	if err := dst.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", fromID).Err(); err != nil {
		return nil, fmt.Errorf("redistest: CLUSTER SETSLOT %d IMPORTING on %s: %w", slot, to, err)
	}
	if err := src.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", toID).Err(); err != nil {
		return nil, fmt.Errorf("redistest: CLUSTER SETSLOT %d MIGRATING on %s: %w", slot, from, err)
	}
	host, port, err := net.SplitHostPort(to)
	if err != nil {
		return nil, err
	}
	for {
		keys, err := src.ClusterGetKeysInSlot(ctx, slot, 100).Result()
		if err != nil {
			return nil, err
		}
		if len(keys) == 0 {
			break
		}
		args := []any{"MIGRATE", host, port, "", 0, 5000, "KEYS"}
		for _, k := range keys {
			args = append(args, k)
		}
		if err := src.Do(ctx, args...).Err(); err != nil {
			return nil, fmt.Errorf("redistest: MIGRATE from %s to %s: %w", from, to, err)
		}
	}
	return &SlotMove{c: c, slot: slot, from: from, to: to, toID: toID}, nil
}

// Finish hands the slot to its new master, as the last step of a
// resharding does (CLUSTER SETSLOT ... NODE on the new master, then the old
// one, then every other master; replicas learn it from their masters), and
// waits until a live node sees the new master serve it.
func (m *SlotMove) Finish(ctx context.Context) error {
	masters, err := m.c.Masters(ctx)
	if err != nil {
		return err
	}
	others := slices.DeleteFunc(masters, func(a string) bool { return a == m.from || a == m.to })
	for _, addr := range append([]string{m.to, m.from}, others...) {
		if err := m.c.admin[addr].Do(ctx, "CLUSTER", "SETSLOT", m.slot, "NODE", m.toID).Err(); err != nil {
			return fmt.Errorf("redistest: CLUSTER SETSLOT %d NODE on %s: %w", m.slot, addr, err)
		}
	}
	for {
		nodes, _, err := m.c.liveView(ctx)
		if err == nil && slices.ContainsFunc(nodes, func(n clusterNode) bool {
			return n.addr == m.to && n.isMaster() && n.serves(m.slot)
		}) {
			return nil
		}
		if !pause.For(ctx, 20*time.Millisecond) {
			return fmt.Errorf("redistest: slot %d not seen on %s: %w", m.slot, m.to, ctx.Err())
		}
	}
}
