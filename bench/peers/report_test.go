package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// summaryRows returns the rows of the summary table in out, each split
// into its cells, the heading row first.
func summaryRows(t *testing.T, out string) [][]string {
	t.Helper()
	_, table, ok := strings.Cut(out, "## Summary\n\n")
	if !ok {
		t.Fatalf("no summary in:\n%s", out)
	}
	var rows [][]string
	for i, line := range strings.Split(table, "\n") {
		if !strings.HasPrefix(line, "| ") {
			break
		}
		if i == 1 {
			continue // the alignment row
		}
		cells := strings.Split(strings.Trim(line, "| "), " | ")
		rows = append(rows, cells)
	}
	return rows
}

func TestSummaryHasTheColumnsOfTheWorkloadsThatRanAndTheLibrariesThatRanThem(t *testing.T) {
	libs := libraries(libConfig{ttl: time.Second})
	results := func(workload string, libraries ...string) []result {
		var rs []result
		for _, l := range libraries {
			rs = append(rs, result{Workload: workload, Library: l, Grants: 10, GrantsPerSec: 100, Jain: 1, AttemptsPerGrant: 1, RoundTripsPerGrant: 2})
		}
		return rs
	}
	tests := []struct {
		name    string
		results []result
		floor   *floorResult
		heads   []string // every column's heading, after "library"
		libs    []string // every row's library, the floor's included
	}{
		{
			name:    "semaphore alone",
			results: results(semaphoreKey, "fairlock", "redsync", "redislock"),
			heads:   []string{"semaphore: grants/s", "semaphore: Jain / max wait", "semaphore: attempts / round trips per grant"},
			libs:    []string{"fairlock", "redsync", "redislock"},
		},
		{
			name:    "multi alone",
			results: results(multiKey, "fairlock", "redsync", "redislock", atomicName),
			heads:   []string{"several locks at once: grants/s", "several locks at once: Jain / max wait", "several locks at once: attempts / round trips per grant"},
			libs:    []string{"fairlock", "redsync", "redislock", atomicLabel},
		},
		{
			name:    "hold0 and the floor, fairlock alone",
			results: results(hold0Key, "fairlock"),
			floor:   &floorResult{HandOversPerSec: 1000, RoundTripsPerHand: 1, ServerUsPerHandOver: 50},
			heads:   []string{"hold 0, 4×4: grants/s", "hold 0, 4×4: Jain / max wait", "hold 0, 4×4: round trips per grant", "hold 0, 4×4: server µs per grant"},
			libs:    []string{"fairlock", "cross-process floor"},
		},
		{
			name:    "redlock alone",
			results: results(redlockKey, "fairlock", "redsync"),
			heads:   []string{"RedLock, 3 masters: grants/s", "RedLock, 3 masters: Jain / max wait", "RedLock, 3 masters: round trips per grant", "RedLock, 3 masters: tokens"},
			libs:    []string{"fairlock", "redsync"},
		},
		{
			name:    "uncontended-bg gives the commands column",
			results: results("uncontended-bg", "redsync"),
			heads:   []string{"uncontended Lock+Unlock ops/s, context.Background()", "commands per uncontended Lock+Unlock"},
			libs:    []string{"redsync"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &report{Results: tt.results, Floor: tt.floor, libs: libs}
			var out bytes.Buffer
			r.printSummary(&out)
			rows := summaryRows(t, out.String())
			if got := rows[0][1:]; strings.Join(got, "\n") != strings.Join(tt.heads, "\n") {
				t.Errorf("columns %q, want %q", got, tt.heads)
			}
			var libsGot []string
			for _, row := range rows[1:] {
				libsGot = append(libsGot, row[0])
				if len(row) != len(rows[0]) {
					t.Errorf("row %q has %d cells, the heading %d", row, len(row), len(rows[0]))
				}
				for _, cell := range row[1:] {
					if cell == "—" && row[0] != "cross-process floor" {
						t.Errorf("a dash in row %q", row)
					}
				}
			}
			if strings.Join(libsGot, "\n") != strings.Join(tt.libs, "\n") {
				t.Errorf("rows %q, want %q", libsGot, tt.libs)
			}
		})
	}
}

func TestSummaryIsLeftOutWhenNothingRan(t *testing.T) {
	r := &report{libs: libraries(libConfig{ttl: time.Second})}
	var out bytes.Buffer
	r.printSummary(&out)
	if out.Len() != 0 {
		t.Errorf("printed %q", out.String())
	}
}
