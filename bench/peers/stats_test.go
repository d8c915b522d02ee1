package main

import (
	"math"
	"testing"
	"time"
)

func TestJainIsOneForEqualSharesAndOneOverNForAMonopoly(t *testing.T) {
	tests := []struct {
		name   string
		counts []int64
		want   float64
	}{
		{"equal shares", []int64{7, 7, 7, 7}, 1},
		{"one goroutine", []int64{3}, 1},
		{"monopoly of one in four", []int64{0, 12, 0, 0}, 0.25},
		{"half served equally", []int64{5, 5, 0, 0}, 0.5},
		{"uneven", []int64{1, 2, 3}, 36.0 / (3 * 14)},
		{"nobody served", []int64{0, 0, 0}, 0},
		{"no goroutines", nil, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := jain(tt.counts); math.Abs(got-tt.want) > 1e-12 {
				t.Errorf("jain(%v) = %v, want %v", tt.counts, got, tt.want)
			}
		})
	}
}

func TestPercentileIsTheNearestRank(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	hundred := make([]time.Duration, 100)
	for i := range hundred {
		hundred[i] = ms(i + 1)
	}
	tests := []struct {
		name   string
		sorted []time.Duration
		p      float64
		want   time.Duration
	}{
		{"median of 1..100", hundred, 50, ms(50)},
		{"p99 of 1..100", hundred, 99, ms(99)},
		{"max of 1..100", hundred, 100, ms(100)},
		{"tiny p is the minimum", hundred, 0.001, ms(1)},
		{"median of an odd count", []time.Duration{ms(1), ms(2), ms(9)}, 50, ms(2)},
		{"p99 of two", []time.Duration{ms(1), ms(2)}, 99, ms(2)},
		{"one value", []time.Duration{ms(4)}, 50, ms(4)},
		{"empty", nil, 99, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := percentile(tt.sorted, tt.p); got != tt.want {
				t.Errorf("percentile(p=%v) = %v, want %v", tt.p, got, tt.want)
			}
		})
	}
}

func TestSummarizeWaitsMergesEveryGoroutine(t *testing.T) {
	waits := [][]time.Duration{
		{3 * time.Millisecond, 1 * time.Millisecond},
		nil,
		{2 * time.Millisecond, 40 * time.Millisecond},
	}
	got := summarizeWaits(waits)
	want := waitStats{P50: 2 * time.Millisecond, P99: 40 * time.Millisecond, Max: 40 * time.Millisecond}
	if got != want {
		t.Errorf("summarizeWaits = %+v, want %+v", got, want)
	}
	if (summarizeWaits(nil) != waitStats{}) {
		t.Errorf("summarizeWaits(nil) is not zero")
	}
}

func TestTallyCountsGrantsAttemptsAndStarvedGoroutines(t *testing.T) {
	tl := newTally(3)
	if got := tl.attemptsPerGrant(); got != 0 {
		t.Errorf("attempts per grant with no grant = %v, want 0", got)
	}
	tl.grant(0, time.Millisecond, 1)
	tl.grant(0, time.Millisecond, 4)
	tl.grant(2, time.Millisecond, 1)
	if got := tl.grants(); got != 3 {
		t.Errorf("grants = %d, want 3", got)
	}
	if got := tl.starved(); got != 1 {
		t.Errorf("starved = %d, want 1", got)
	}
	if got := tl.attemptsPerGrant(); got != 2 {
		t.Errorf("attempts per grant = %v, want 2: 6 attempts over 3 grants", got)
	}
}

func TestGroupSeparatesThousands(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", 1234567: "1,234,567"} {
		if got := group(n); got != want {
			t.Errorf("group(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestParseInfoReadsFieldsAndSkipsHeaders(t *testing.T) {
	text := "# CPU\r\nused_cpu_sys:1.500000\r\nused_cpu_user:0.250000\r\n\r\n# Commandstats\r\n" +
		"cmdstat_evalsha:calls=4,usec=10,usec_per_call=2.50\r\n"
	got := parseInfo(text)
	if got["used_cpu_sys"] != "1.500000" || got["cmdstat_evalsha"] != "calls=4,usec=10,usec_per_call=2.50" {
		t.Errorf("parseInfo = %v", got)
	}
	if _, ok := got["# CPU"]; ok {
		t.Errorf("parseInfo kept a section header")
	}
}

func TestCommandCallsSumsEveryCommandButTheBenchmarksOwn(t *testing.T) {
	info := parseInfo("# Commandstats\r\n" +
		"cmdstat_evalsha:calls=4,usec=10,usec_per_call=2.50,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_incr:calls=4,usec=2,usec_per_call=0.50,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_publish:calls=3,usec=6,usec_per_call=2.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_client|setinfo:calls=2,usec=1,usec_per_call=0.50,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_info:calls=2,usec=90,usec_per_call=45.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_config|resetstat:calls=1,usec=9,usec_per_call=9.00,rejected_calls=0,failed_calls=0\r\n" +
		"# CPU\r\nused_cpu_sys:1.500000\r\n")
	if got := commandCalls(info); got != 13 {
		t.Errorf("commandCalls = %d, want 13: 4 + 4 + 3 + 2, without info and config", got)
	}
	if got := cmdstat(info["cmdstat_evalsha"], "usec"); got != 10 {
		t.Errorf("cmdstat usec = %d, want 10", got)
	}
	if got := commandCalls(parseInfo("# Commandstats\r\n")); got != 0 {
		t.Errorf("commandCalls of no commands = %d, want 0", got)
	}
}
