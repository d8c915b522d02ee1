package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// The kill measure starts this test binary again as its worker.
	if spec, ok := os.LookupEnv(workerEnv); ok {
		os.Exit(workerMain(spec, os.Stdin, os.Stdout))
	}
	goleak.VerifyTestMain(m)
}

// needServers skips the test when redis-server or etcd is not on PATH,
// unless CI is "true": the CI script installs both, so there the test
// fails.
func needServers(t *testing.T) {
	t.Helper()
	for bin, pkg := range map[string]string{"redis-server": "redis-server", "etcd": "etcd-server"} {
		if _, err := exec.LookPath(bin); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("%s is not installed, and CI=true requires it (Debian: apt-get install %s): %v", bin, pkg, err)
			}
			t.Skipf("%s is not installed (Debian: apt-get install %s; CI installs it): %v", bin, pkg, err)
		}
	}
}

// TestEveryMeasureOnBothSystems runs every measure briefly on a
// redis-server and an etcd of its own, and checks that each system has a
// figure in every row, that the figures are in range, and that
// candidates who begin once the one before is in line are elected in
// that order.
func TestEveryMeasureOnBothSystems(t *testing.T) {
	needServers(t)
	path := filepath.Join(t.TempDir(), "report.json")
	o, err := parseFlags([]string{
		"-lease", "2s", "-rounds", "5", "-candidates", "3", "-kill-rounds", "1",
		"-observers", "6", "-observer-clients", "2", "-observer-rounds", "2",
		"-order-candidates", "5", "-order-rounds", "2", "-order-gap", "5ms",
		"-settle", "10ms", "-json", path,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out, log bytes.Buffer
	if err := run(ctx, o, &out, &log); err != nil {
		t.Fatalf("run: %v\n%s", err, log.String())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var r report
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	want := []string{keyHandOver, keyKill, keyKillAfter, keyObserveProclaim, keyObserveLeader, keyOrder, keyOrderGap}
	if len(r.Rows) != len(want) {
		t.Fatalf("%d rows, want %d", len(r.Rows), len(want))
	}
	for i, rw := range r.Rows {
		if rw.Key != want[i] {
			t.Errorf("row %d is %q, want %q", i, rw.Key, want[i])
		}
		if rw.ClientGo == nil || rw.ClientGo.Text == "" || rw.ClientGo.Basis == "" {
			t.Errorf("%s: no client-go figure", rw.Key)
		}
		for name, res := range map[string]*result{fairlockName: rw.Fairlock, etcdName: rw.Etcd} {
			if res == nil || res.Text == "" {
				t.Errorf("%s: no %s figure", rw.Key, name)
				continue
			}
			if !strings.Contains(out.String(), res.Text) {
				t.Errorf("%s, %s: %q is not in the table:\n%s", rw.Key, name, res.Text, out.String())
			}
			checkResult(t, rw.Key, name, res, o)
		}
	}
}

// checkResult checks one system's figure for the row key.
func checkResult(t *testing.T, key, name string, res *result, o options) {
	t.Helper()
	lease := ms(o.lease)
	switch key {
	case keyHandOver, keyObserveProclaim, keyObserveLeader:
		n := o.rounds
		if key != keyHandOver {
			n = o.observerRounds
		}
		if res.Summary == nil || res.Summary.N != n {
			t.Errorf("%s, %s: %+v, want %d samples", key, name, res.Summary, n)
		} else if res.Summary.Min <= 0 || res.Summary.Max >= ms(stepTimeout) {
			t.Errorf("%s, %s: samples from %vms to %vms", key, name, res.Summary.Min, res.Summary.Max)
		}
	case keyKill:
		// The leader is killed a few ms after its lease was granted or
		// renewed: the next one is elected about a lease later, etcd's up
		// to half a second more (it looks for expired leases every 500ms).
		if len(res.Kill) != o.killRounds {
			t.Errorf("%s, %s: %d rounds, want %d", key, name, len(res.Kill), o.killRounds)
		}
		for _, k := range res.Kill {
			if ms(k.Elected) < lease*0.8 || ms(k.Elected) > lease+2000 {
				t.Errorf("%s, %s: elected %v after the kill, with a lease of %v", key, name, k.Elected, o.lease)
			}
			if k.LeaseLeft > o.lease || k.LeaseLeft < o.lease/2 {
				t.Errorf("%s, %s: the lease had %v left at the kill, of %v", key, name, k.LeaseLeft, o.lease)
			}
		}
	case keyKillAfter:
		if res.Summary == nil || res.Summary.Min < -50 || res.Summary.Max > 2000 {
			t.Errorf("%s, %s: %+v, want elections within 2s after the lease ran out", key, name, res.Summary)
		}
	case keyOrder, keyOrderGap:
		pairs := o.orderRounds * o.orderCandidates * (o.orderCandidates - 1) / 2
		if res.Order == nil || res.Order.Elected != o.orderRounds*o.orderCandidates || res.Order.Pairs != pairs {
			t.Errorf("%s, %s: %+v, want %d elected and %d pairs", key, name, res.Order, o.orderRounds*o.orderCandidates, pairs)
		} else if key == keyOrder && res.Order.Inversions != 0 {
			t.Errorf("%s, %s: %d pairs elected out of order, though each began once the one before was in line", key, name, res.Order.Inversions)
		}
	}
}
