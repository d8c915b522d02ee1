package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fairlock/fairlock/internal/redistest"
)

// firstRound is when the first round of the table tests is read.
var firstRound = time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)

func sec(s float64) time.Time { return firstRound.Add(time.Duration(s * float64(time.Second))) }

// primary is an answer of a primary at second s whose process run has been
// up for up seconds (-1: not reported) and counted evalsha calls.
func primary(addr, run string, s, up float64, evalsha int64) reading {
	r := reading{Addr: addr, At: sec(s), RunID: run, Primary: true, Uptime: -1, Detailed: true,
		Total: evalsha + 10, Calls: map[string]int64{"evalsha": evalsha, "info": 10}}
	if up >= 0 {
		r.Uptime = time.Duration(up * float64(time.Second))
	}
	return r
}

// replica is like primary, for a replica.
func replica(addr, run string, s, up float64, evalsha int64) reading {
	r := primary(addr, run, s, up, evalsha)
	r.Primary = false
	return r
}

// down is a failed reading; primary is discovery's view.
func down(addr string, s float64, primary bool) reading {
	return reading{Addr: addr, At: sec(s), Err: errors.New("connection refused"), Primary: primary}
}

func TestCommandCountFollowsEachServerProcess(t *testing.T) {
	tests := []struct {
		name   string
		rounds [][]reading // one round every half second from firstRound
		want   int64       // commands counted
		unread []string    // what was not counted
	}{
		{
			name: "a primary throughout",
			rounds: [][]reading{
				{primary("a", "r1", 0, 100, 100)},
				{primary("a", "r1", 0.5, 100, 400)},
				{primary("a", "r1", 1, 100, 1000)},
			},
			want: 900,
		},
		{
			name: "a replica's replicated commands are left out",
			rounds: [][]reading{
				{primary("a", "r1", 0, 100, 100), replica("b", "r2", 0, 100, 50)},
				{primary("a", "r1", 1, 100, 1100), replica("b", "r2", 1, 100, 1050)},
			},
			want: 1000,
		},
		{
			name: "node gone: it keeps its last reading",
			rounds: [][]reading{
				{primary("a", "r1", 0, 100, 100), primary("b", "r2", 0, 100, 100)},
				{primary("a", "r1", 0.5, 100, 300), primary("b", "r2", 0.5, 100, 300)},
				{primary("a", "r1", 1, 100, 500), down("b", 1, true)},
				{primary("a", "r1", 1.5, 100, 700), down("b", 1.5, true)},
			},
			want:   600 + 200,
			unread: []string{"0.5s of b (stopped answering)"},
		},
		{
			name: "node gone a while, back as the same process",
			rounds: [][]reading{
				{primary("a", "r1", 0, 100, 100)},
				{down("a", 0.5, true)},
				{primary("a", "r1", 1, 100, 500)},
			},
			want: 400,
		},
		{
			name: "node restarted with a new run_id: the new process counts from zero",
			rounds: [][]reading{
				{primary("a", "r1", 0, 100, 100)},
				{primary("a", "r1", 0.5, 100, 500)},
				{primary("a", "r2", 1, 0.2, 80)},
				{primary("a", "r2", 1.5, 0.7, 380)},
			},
			want:   400 + 90 + 300, // the new process's 80 evalsha and 10 info, then 300 more
			unread: []string{"0.3s of a (restarted)"},
		},
		{
			name: "node restarted while it could not be read",
			rounds: [][]reading{
				{primary("a", "r1", 0, 100, 100)},
				{down("a", 0.5, true)},
				{primary("a", "r2", 1, 0, 40)},
			},
			want:   50,
			unread: []string{"1.0s of a (restarted)"},
		},
		{
			name: "counters reset by CONFIG RESETSTAT",
			rounds: [][]reading{
				{primary("a", "r1", 0, 100, 100)},
				{primary("a", "r1", 0.5, 100, 500)},
				{primary("a", "r1", 1, 101, 30)},
			},
			want:   400 + 40,
			unread: []string{"0.5s of a (counters reset)"},
		},
		{
			name: "new node appeared, started during the run: all its counts",
			rounds: [][]reading{
				{primary("a", "r1", 0, 100, 100)},
				{primary("a", "r1", 0.5, 100, 100)},
				{primary("a", "r1", 3, 100, 100), primary("c", "r3", 3, 1.5, 70)},
			},
			want: 80,
		},
		{
			name: "new node appeared, up since before the run: from its first reading",
			rounds: [][]reading{
				{primary("a", "r1", 0, 100, 100)},
				{primary("a", "r1", 1, 100, 100), primary("c", "r3", 1, 100, 5000)},
				{primary("a", "r1", 1.5, 100, 100), primary("c", "r3", 1.5, 100, 5300)},
			},
			want:   300,
			unread: []string{"1.0s of c (first read during the run)"},
		},
		{
			name: "new replica appeared: nothing to count, nothing unread",
			rounds: [][]reading{
				{primary("a", "r1", 0, 100, 100)},
				{primary("a", "r1", 1, 100, 300), replica("c", "r3", 1, 100, 5000)},
			},
			want: 200,
		},
		{
			name: "replica promoted after its primary died",
			rounds: [][]reading{
				{primary("p", "r1", 0, 100, 100), replica("r", "r2", 0, 100, 50)},
				{primary("p", "r1", 0.5, 100, 300), replica("r", "r2", 0.5, 100, 150)},
				{down("p", 1, true), replica("r", "r2", 1, 100, 160)},
				{down("p", 1.5, false), primary("r", "r2", 1.5, 100, 200)},
				{down("p", 2, false), primary("r", "r2", 2, 100, 600)},
			},
			want: 200 + 400,
			unread: []string{
				"0.5s of p (stopped answering)",
				"0.5s of r (became the primary)",
			},
		},
		{
			name: "primary handed over to its replica, both alive",
			rounds: [][]reading{
				{primary("p", "r1", 0, 100, 100), replica("r", "r2", 0, 100, 50)},
				{replica("p", "r1", 0.5, 100, 300), primary("r", "r2", 0.5, 100, 150)},
				{replica("p", "r1", 1, 100, 500), primary("r", "r2", 1, 100, 450)},
			},
			want: 300,
			unread: []string{
				"0.5s of p (became a replica)",
				"0.5s of r (became the primary)",
			},
		},
		{
			name: "one process under two addresses is counted once",
			rounds: [][]reading{
				{primary("a", "r1", 0, 100, 100), primary("b", "r1", 0, 100, 100)},
				{primary("a", "r1", 1, 100, 500), primary("b", "r1", 1, 100, 500)},
			},
			want: 400,
		},
		{
			name: "primary that never answered",
			rounds: [][]reading{
				{primary("a", "r1", 0, 100, 100), down("b", 0, true)},
				{primary("a", "r1", 1, 100, 200), down("b", 1, true)},
			},
			want:   100,
			unread: []string{"1.0s of b (never answered)"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCmdCounter()
			var end time.Time
			for _, rs := range tt.rounds {
				end = rs[0].At
				c.round(end, rs)
			}
			got := c.finish(end)
			assert.Equal(t, tt.want, got.Total)
			assert.True(t, got.Detailed)
			var sum int64
			for _, n := range got.Calls {
				assert.Positive(t, n)
				sum += n
			}
			assert.Equal(t, got.Total, sum, "the calls add up to the total")
			var unread []string
			for _, u := range got.Unread {
				unread = append(unread, u.String())
			}
			assert.Equal(t, tt.unread, unread)
		})
	}
}

func TestCommandCountOfAServerWithoutCommandstats(t *testing.T) {
	plain := func(s float64, n int64) reading {
		return reading{Addr: "m", At: sec(s), Primary: true, Uptime: -1, Total: n}
	}
	c := newCmdCounter()
	for _, r := range []reading{plain(0, 100), plain(0.5, 350), plain(1, 400)} {
		c.round(r.At, []reading{r})
	}
	got := c.finish(sec(1))
	assert.Equal(t, cmdTally{Total: 300, Span: time.Second}, got)
}

func TestCommandFigureSaysWhatItIs(t *testing.T) {
	exact := cmdTally{Detailed: true, Total: 900, Calls: map[string]int64{"evalsha": 600, "hget": 300}, Span: 2 * time.Second}
	partial := exact
	partial.Unread = []unread{{Addr: "127.0.0.1:7001", From: sec(0.5), To: sec(0.9), Why: "restarted"}}
	mostly := exact
	mostly.Unread = []unread{{Addr: "127.0.0.1:7001", From: sec(0), To: sec(1.5), Why: "stopped answering"}}
	tests := []struct {
		name   string
		tally  cmdTally
		grants int
		want   string
	}{
		{"exact", exact, 100, "9.0 commands per grant (INFO commandstats, all clients of the deployment: evalsha 6.00, hget 3.00)"},
		{"lower bound", partial, 100, "at least 9.0 commands per grant (INFO commandstats, all clients of the deployment: evalsha 6.00, hget 3.00; " +
			"not counted: 0.4s of 127.0.0.1:7001 (restarted))"},
		{"plain server", cmdTally{Total: 450, Span: time.Second}, 10, "45.0 commands per grant (INFO commandstats n/a on this server: total_commands_processed, no breakdown)"},
		{"unreadable", cmdTally{Err: errors.New("NOPERM")}, 100, "commands per grant n/a (INFO not readable: NOPERM)"},
		{"nothing granted", exact, 0, "commands per grant n/a (nothing granted)"},
		{"mostly unread", mostly, 100, "commands per grant n/a (the primaries' commands went unread for 1.5s of 2.0s: 1.5s of 127.0.0.1:7001 (stopped answering))"},
		{"nothing counted", cmdTally{Detailed: true, Span: time.Second}, 100, "commands per grant n/a (no command counted)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &report{}
			r.Commands, r.CommandsNA = commands(tt.tally, tt.grants)
			var b strings.Builder
			require.NoError(t, r.write(&b, false))
			assert.Contains(t, b.String(), "\nredis:       "+tt.want+"\n")
			if r.Commands != nil {
				assert.Positive(t, r.Commands.PerGrant)
				assert.Equal(t, len(tt.tally.Unread) > 0, r.Commands.LowerBound)
			}
		})
	}
}

func TestCommandFigureSurvivesARestart(t *testing.T) {
	redistest.Slow(t)
	srv, err := redistest.Start()
	require.NoError(t, err)
	defer srv.Stop()
	done := make(chan cmdResult, 1)
	go func() { // the test waits for done below
		done <- runCmdResult(t, "-redis", "redis://"+srv.Addr+"/0",
			"-duration", "3s", "-locks", "2", "-clients", "2", "-goroutines", "2", "-json")
	}()
	waitFor(t, "the run to get going", func(ctx context.Context) error { return processedAtLeast(ctx, srv.Addr, 1000) })
	require.NoError(t, srv.Restart())
	res := <-done
	waitRedialsEnd(t)
	r := decodeReport(t, res.out)
	t.Logf("exit status %d, %d violations; stderr: %s", res.code, r.ViolationSums.Total, res.errs)

	require.NotNil(t, r.Commands, r.CommandsNA)
	assert.True(t, r.Commands.LowerBound)
	assert.Contains(t, strings.Join(r.Commands.Unread, "; "), srv.Addr+" (restarted)")
	assertSane(t, r.Commands)
}
