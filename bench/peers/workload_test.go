package main

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"
)

// ctxRecorder is a locker that grants at once and records whether the
// contexts of its lock and unlock calls had a deadline or a Done channel.
type ctxRecorder struct {
	mu    sync.Mutex
	calls int
	// guarded by mu: whether some lock or unlock call's context had a
	// deadline or a Done channel.
	lockDeadline, lockDone, unlockDeadline, unlockDone bool
}

func (c *ctxRecorder) lock(ctx context.Context, _ string) (func(context.Context) error, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls++
	_, d := ctx.Deadline()
	c.lockDeadline = c.lockDeadline || d
	c.lockDone = c.lockDone || ctx.Done() != nil
	return func(ctx context.Context) error {
		c.mu.Lock()
		defer c.mu.Unlock()
		_, d := ctx.Deadline()
		c.unlockDeadline = c.unlockDeadline || d
		c.unlockDone = c.unlockDone || ctx.Done() != nil
		return nil
	}, nil
}

func (c *ctxRecorder) acquire(ctx context.Context, name string, _, _ int) (func(context.Context) error, int64, error) {
	unlock, err := c.lock(ctx, name)
	return unlock, 1, err
}

func (c *ctxRecorder) lockAll(ctx context.Context, names []string) (func(context.Context) error, int64, error) {
	unlock, err := c.lock(ctx, names[0])
	return unlock, 1, err
}

func TestBackgroundWorkloadLocksAndUnlocksWithoutDeadlineOrDone(t *testing.T) {
	for _, key := range []string{"uncontended", "uncontended-bg"} {
		t.Run(key, func(t *testing.T) {
			sel, err := selectWorkloads(key)
			if err != nil {
				t.Fatal(err)
			}
			w := sel.workloads[0]
			rec := &ctxRecorder{}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
			defer cancel()
			tl := drive(ctx, w, []locker{rec}, "test", w.goroutines)
			if tl.grants() == 0 || rec.calls == 0 {
				t.Fatalf("%d grants of %d calls", tl.grants(), rec.calls)
			}
			bg := key == "uncontended-bg"
			if rec.lockDeadline == bg || rec.lockDone == bg {
				t.Errorf("Lock's context: deadline %v, Done %v; want both %v", rec.lockDeadline, rec.lockDone, !bg)
			}
			if rec.unlockDeadline == bg || rec.unlockDone == bg {
				t.Errorf("Unlock's context: deadline %v, Done %v; want both %v", rec.unlockDeadline, rec.unlockDone, !bg)
			}
		})
	}
}

func TestSelectWorkloadsNamesTheFloorAndTheScalePart(t *testing.T) {
	keys := func(ws []workload) []string {
		var k []string
		for _, w := range ws {
			k = append(k, w.key)
		}
		return k
	}
	tests := []struct {
		list                string
		want                []string
		floor, scale, names bool
	}{
		{"", keys(workloads), true, true, false}, // the scale part has the names step
		{"floor", nil, true, false, false},
		{"hold0, hold0-1x16,floor", []string{"hold0", "hold0-1x16"}, true, false, false},
		{"uncontended-bg,scale", []string{"uncontended-bg"}, false, true, false},
		{"names", nil, false, false, true},
	}
	for _, tt := range tests {
		sel, err := selectWorkloads(tt.list)
		if err != nil {
			t.Errorf("selectWorkloads(%q): %v", tt.list, err)
			continue
		}
		if got := keys(sel.workloads); !slices.Equal(got, tt.want) || sel.floor != tt.floor || sel.scale != tt.scale || sel.names != tt.names {
			t.Errorf("selectWorkloads(%q) = %v, floor %v, scale %v, names %v; want %v, %v, %v, %v",
				tt.list, got, sel.floor, sel.scale, sel.names, tt.want, tt.floor, tt.scale, tt.names)
		}
	}
	if _, err := selectWorkloads("hold0,nope"); err == nil {
		t.Errorf("an unknown workload was accepted")
	}
}
