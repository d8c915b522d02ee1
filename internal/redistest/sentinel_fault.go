package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"time"

	"github.com/fairlock/fairlock/internal/pause"
)

// The faults of a sentinel set: a server killed, a failover asked for or
// waited for, a killed server brought back as a replica.

// Kill ends the primary or replica at addr with SIGKILL, as a crash would,
// and waits until it has exited.
func (ss *SentinelSet) Kill(addr string) error {
	s := ss.Server(addr)
	if s == nil {
		return fmt.Errorf("redistest: no server of the sentinel set at %s", addr)
	}
	ss.mu.Lock()
	ss.killed[addr] = true
	ss.mu.Unlock()
	s.kill()
	return nil
}

// KillPrimary ends the primary the sentinels report with SIGKILL and
// returns its address. The sentinels fail over after SentinelDownAfter
// (see WaitFailover).
func (ss *SentinelSet) KillPrimary(ctx context.Context) (string, error) {
	addr, err := ss.Primary(ctx)
	if err != nil {
		return "", err
	}
	return addr, ss.Kill(addr)
}

// Failover asks a sentinel for a graceful failover (SENTINEL FAILOVER)
// and returns the address of the primary it replaces. It does not wait
// for the failover to complete (see WaitFailover).
func (ss *SentinelSet) Failover(ctx context.Context) (string, error) {
	old, err := ss.Primary(ctx)
	if err != nil {
		return "", err
	}
	var errs []error
	for _, s := range ss.sentinels {
		err := ss.watchers[s.Addr].Failover(ctx, SentinelMasterName).Err()
		if err == nil {
			return old, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", s.Addr, err))
	}
	return "", fmt.Errorf("redistest: SENTINEL FAILOVER: %w", errors.Join(errs...))
}

// WaitFailover waits until every sentinel reports the same primary other
// than old, with no failover in progress, and that server answers as a
// master. It returns the new primary's address.
func (ss *SentinelSet) WaitFailover(old string, within time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	for {
		addr, err := ss.settled(ctx)
		if err == nil && addr == old {
			err = fmt.Errorf("the sentinels still report %s", old)
		}
		if err == nil {
			return addr, nil
		}
		if !pause.For(ctx, 50*time.Millisecond) {
			return "", fmt.Errorf("redistest: no new primary within %v: %w", within, err)
		}
	}
}

// Rejoin starts the server at addr again after Kill, on its port and
// empty, as a replica of the primary the sentinels report now, from which
// it copies the dataset; the sentinels, which know it from before, see it
// as that primary's replica. Use it once a failover has moved the primary
// elsewhere (WaitFailover), so that later failovers still find replicas.
// WaitSynced waits for the copy.
func (ss *SentinelSet) Rejoin(ctx context.Context, addr string) error {
	s := ss.Server(addr)
	if s == nil {
		return fmt.Errorf("redistest: no server of the sentinel set at %s", addr)
	}
	primary, err := ss.Primary(ctx)
	if err != nil {
		return err
	}
	if primary == addr {
		return fmt.Errorf("redistest: the sentinels still report %s as the primary", addr)
	}
	host, port, err := net.SplitHostPort(primary)
	if err != nil {
		return fmt.Errorf("redistest: the primary's address %q: %w", primary, err)
	}
	s.args = replicaOf(s.args, host, port)
	if err := s.Restart(); err != nil {
		return err
	}
	ss.mu.Lock()
	delete(ss.killed, addr)
	ss.mu.Unlock()
	return nil
}

// replicaOf returns args with one replicaof directive, naming host and
// port, in place of any it had.
func replicaOf(args []string, host, port string) []string {
	out := slices.Clone(args)
	for i := 0; i < len(out); {
		if out[i] == "--replicaof" && i+2 < len(out) {
			out = slices.Delete(out, i, i+3)
			continue
		}
		i++
	}
	return append(out, "--replicaof", host, port)
}

// WaitSynced waits until the set is settled (every sentinel reports the
// same primary, no failover in progress, and it answers as a master) and
// every other server of the set is live and in sync with it, so that a
// failover can pick any of them, or until ctx ends. It returns the
// primary's address.
func (ss *SentinelSet) WaitSynced(ctx context.Context) (string, error) {
	for {
		primary, err := ss.settled(ctx)
		if err == nil {
			err = ss.replicasInSync(ctx, primary, len(ss.data)-1)
		}
		if err == nil {
			return primary, nil
		}
		if !pause.For(ctx, 50*time.Millisecond) {
			return "", fmt.Errorf("redistest: the sentinel set was not in sync: %w (%w)", err, ctx.Err())
		}
	}
}
