package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock/fairlock/internal/redistest"
)

// startMasters starts n redis-servers without persistence (or with the
// extra directives) on free loopback ports, at once, and returns them as
// a quorum's masters. On an error it stops those it started.
func startMasters(n int, extra ...string) (*target, error) {
	servers := make([]*redistest.Server, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range servers {
		wg.Go(func() { servers[i], errs[i] = redistest.Start(extra...) })
	}
	wg.Wait()
	t := &target{started: "redis-servers started on loopback"}
	for _, s := range servers {
		if s != nil {
			t.local = append(t.local, s)
			t.masters = append(t.masters, s.Addr)
		}
	}
	if err := errors.Join(errs...); err != nil {
		t.close()
		return nil, fmt.Errorf("starting %d masters: %w", n, err)
	}
	return t, nil
}

// quorumSums describes a run on a quorum of masters.
type quorumSums struct {
	Masters []string    `json:"masters"`
	Started bool        `json:"started,omitempty"` // the command started them on loopback
	Bakery  bakeryTally `json:"bakery"`
}

// quorumReport sums up a run on t's masters for the report: what the
// check counted.
func quorumReport(t *target, qc *quorumCheck) *quorumSums {
	return &quorumSums{Masters: t.masters, Started: len(t.local) > 0, Bakery: qc.Tally}
}

// write writes the quorum's lines of the text report.
func (q *quorumSums) write(b *strings.Builder) {
	how := ""
	if q.Started {
		how = ", started on loopback"
	}
	fmt.Fprintf(b, "quorum:      %d masters (%s%s)\n", len(q.Masters), strings.Join(q.Masters, ","), how)
	t := q.Bakery
	fmt.Fprintf(b, "bakery:      %d pairs checked (a waiter whose join had reached a majority before another call began), %d passed", t.Pairs, t.Passed)
	if t.AcrossRestart > 0 {
		fmt.Fprintf(b, "; %d pairs left out across a loss of keys", t.AcrossRestart)
	}
	if t.Rejoined > 0 {
		fmt.Fprintf(b, "; %d waiters joined again (their last join counted)", t.Rejoined)
	}
	b.WriteByte('\n')
}

// quietRedis keeps go-redis from logging every failed dial of a server
// that is down, as one is through -restart-master or -chaos, and every
// primary a failover client hears of, in a run on a quorum or with
// faults: the report says when each was down. -v lets them through.
func quietRedis(c config) {
	if (c.quorum() || c.Chaos != "") && !c.Verbose {
		redis.SetLogger(discardRedisLog{})
	}
}

// discardRedisLog is a go-redis logger that writes nothing.
type discardRedisLog struct{}

func (discardRedisLog) Printf(context.Context, string, ...any) {}
