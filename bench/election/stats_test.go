package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestPercentileIsByNearestRank(t *testing.T) {
	var s []time.Duration
	for i := 1; i <= 10; i++ {
		s = append(s, time.Duration(i)*time.Millisecond)
	}
	for p, want := range map[int]time.Duration{50: 5 * time.Millisecond, 90: 9 * time.Millisecond, 99: 10 * time.Millisecond, 1: time.Millisecond} {
		if got := percentile(s, p); got != want {
			t.Errorf("p%d = %v, want %v", p, got, want)
		}
	}
	if got := percentile(s[:1], 99); got != time.Millisecond {
		t.Errorf("p99 of one sample = %v", got)
	}
}

func TestSummaryFormatsInOneUnit(t *testing.T) {
	s := summarize([]time.Duration{300 * time.Microsecond, 400 * time.Microsecond, 25 * time.Millisecond})
	if got, want := s.percentiles(), "0.40 ms (p90 25.0, p99 25.0)"; got != want {
		t.Errorf("percentiles() = %q, want %q", got, want)
	}
	k := summarize([]time.Duration{5010 * time.Millisecond, 5003 * time.Millisecond, 5490 * time.Millisecond})
	if got, want := k.span(), "5.01 s (5.00 to 5.49)"; got != want {
		t.Errorf("span() = %q, want %q", got, want)
	}
	if summarize(nil) != nil {
		t.Error("summarize(nil) is not nil")
	}
}

func TestFlagsAreChecked(t *testing.T) {
	o, err := parseFlags(nil)
	if err != nil {
		t.Fatal(err)
	}
	if o.lease != 5*time.Second || o.observers != 100 || o.observerClients != 10 || len(o.systems) != 2 || len(o.measures) != len(allMeasures) {
		t.Errorf("defaults: %+v", o)
	}
	for _, args := range [][]string{
		{"-lease", "1500ms"},
		{"-lease", "1s"},
		{"-observers", "15", "-observer-clients", "10"},
		{"-candidates", "1"},
		{"-rounds", "0"},
		{"-systems", "zookeeper"},
		{"-measures", "handover,nothing"},
		{"-order-gap", "0"},
	} {
		if _, err := parseFlags(args); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
	o, err = parseFlags([]string{"-systems", "etcd,fairlock", "-measures", "order,handover"})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(o.systems, ",") != "fairlock,etcd" || strings.Join(o.measures, ",") != "handover,order" {
		t.Errorf("systems %v, measures %v: want the usual order", o.systems, o.measures)
	}
}

// TestClientGoFiguresFollowTheDefaults checks the client-go column against
// the documented defaults it is computed from.
func TestClientGoFiguresFollowTheDefaults(t *testing.T) {
	for _, key := range []string{keyHandOver, keyKill, keyKillAfter, keyObserveProclaim, keyObserveLeader, keyOrder, keyOrderGap} {
		d := clientGo(key)
		if d == nil || d.Text == "" || d.Basis == "" {
			t.Fatalf("%s: %+v", key, d)
		}
	}
	if d := clientGo(keyKill); d.MinMS != 15000 || d.MaxMS != 17000 {
		t.Errorf("kill: %+v, want LeaseDuration to LeaseDuration + RetryPeriod", d)
	}
	if d := clientGo(keyHandOver); d.MinMS != 0 || d.MaxMS != 2000 {
		t.Errorf("hand-over: %+v, want up to RetryPeriod", d)
	}
	var b bytes.Buffer
	r := &report{Settings: settings{Lease: "5s", OrderGap: "2ms", Settle: "150ms"}}
	r.Rows = []*row{{Key: keyHandOver, Measure: "Resign -> new leader", ClientGo: clientGo(keyHandOver), Fairlock: &result{Text: "1 ms"}}}
	r.print(&b)
	if !strings.Contains(b.String(), "Resign -> new leader  1 ms") || !strings.Contains(b.String(), "RetryPeriod 2s") {
		t.Errorf("the table:\n%s", b.String())
	}
}
