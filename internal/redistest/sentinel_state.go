package redistest

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/fairlock/fairlock/internal/pause"
)

// waitReplicasInSync waits until the primary at addr has n replicas online
// and every replica's link to it is up.
func (ss *SentinelSet) waitReplicasInSync(ctx context.Context, addr string, n int) error {
	for {
		err := ss.replicasInSync(ctx, addr, n)
		if err == nil {
			return nil
		}
		if !pause.For(ctx, 20*time.Millisecond) {
			return err
		}
	}
}

func (ss *SentinelSet) replicasInSync(ctx context.Context, addr string, n int) error {
	info, err := ss.admin[addr].Info(ctx, "replication").Result()
	if err != nil {
		return fmt.Errorf("primary %s: INFO replication: %w", addr, err)
	}
	online := 0
	for i := range n {
		if strings.Contains(InfoField(info, "slave"+strconv.Itoa(i)), "state=online") {
			online++
		}
	}
	if online != n {
		return fmt.Errorf("primary %s has %d of %d replicas online", addr, online, n)
	}
	for _, s := range ss.data {
		if s.Addr == addr {
			continue
		}
		repl, err := ss.admin[s.Addr].Info(ctx, "replication").Result()
		if err != nil {
			return fmt.Errorf("replica %s: INFO replication: %w", s.Addr, err)
		}
		if st := InfoField(repl, "master_link_status"); st != "up" {
			return fmt.Errorf("replica %s: master_link_status:%s", s.Addr, st)
		}
	}
	return nil
}

// waitKnown waits until every sentinel monitors the primary at addr,
// healthy, and knows its replicas (all in sync) and every other sentinel.
func (ss *SentinelSet) waitKnown(ctx context.Context, addr string, replicas int) error {
	for {
		err := ss.known(ctx, addr, replicas)
		if err == nil {
			return nil
		}
		if !pause.For(ctx, 50*time.Millisecond) {
			return err
		}
	}
}

func (ss *SentinelSet) known(ctx context.Context, addr string, replicas int) error {
	for _, s := range ss.sentinels {
		w := ss.watchers[s.Addr]
		m, err := w.Master(ctx, SentinelMasterName).Result()
		if err != nil {
			return fmt.Errorf("sentinel %s: SENTINEL MASTER: %w", s.Addr, err)
		}
		switch {
		case net.JoinHostPort(m["ip"], m["port"]) != addr:
			return fmt.Errorf("sentinel %s monitors %s:%s, not %s", s.Addr, m["ip"], m["port"], addr)
		case m["flags"] != "master":
			return fmt.Errorf("sentinel %s flags the primary %s", s.Addr, m["flags"])
		case m["num-slaves"] != strconv.Itoa(replicas):
			return fmt.Errorf("sentinel %s knows %s of %d replicas", s.Addr, m["num-slaves"], replicas)
		case m["num-other-sentinels"] != strconv.Itoa(len(ss.sentinels)-1):
			return fmt.Errorf("sentinel %s knows %s of %d other sentinels", s.Addr, m["num-other-sentinels"], len(ss.sentinels)-1)
		}
		rs, err := w.Replicas(ctx, SentinelMasterName).Result()
		if err != nil {
			return fmt.Errorf("sentinel %s: SENTINEL REPLICAS: %w", s.Addr, err)
		}
		for _, r := range rs {
			if r["flags"] != "slave" || r["master-link-status"] != "ok" {
				return fmt.Errorf("sentinel %s sees replica %s:%s with flags %s, link %s",
					s.Addr, r["ip"], r["port"], r["flags"], r["master-link-status"])
			}
		}
	}
	return nil
}

// settled returns the primary when every sentinel reports the same one,
// none has a failover in progress or sees the primary down, and the
// primary answers as a master.
func (ss *SentinelSet) settled(ctx context.Context) (string, error) {
	var primary string
	for _, s := range ss.sentinels {
		m, err := ss.watchers[s.Addr].Master(ctx, SentinelMasterName).Result()
		if err != nil {
			return "", fmt.Errorf("sentinel %s: SENTINEL MASTER: %w", s.Addr, err)
		}
		addr := net.JoinHostPort(m["ip"], m["port"])
		switch {
		case m["flags"] != "master":
			return "", fmt.Errorf("sentinel %s flags the primary %s %s", s.Addr, addr, m["flags"])
		case primary == "":
			primary = addr
		case addr != primary:
			return "", fmt.Errorf("sentinels disagree on the primary: %s and %s", primary, addr)
		}
	}
	srv := ss.Server(primary)
	if srv == nil {
		return "", fmt.Errorf("the sentinels report %s, which is none of the set", primary)
	}
	info, err := ss.admin[primary].Info(ctx, "replication").Result()
	if err != nil {
		return "", fmt.Errorf("primary %s: INFO replication: %w", primary, err)
	}
	if role := InfoField(info, "role"); role != "master" {
		return "", fmt.Errorf("the sentinels report %s, which answers as %s", primary, role)
	}
	return primary, nil
}
