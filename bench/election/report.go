package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// report is everything one invocation measured, as written to -json.
type report struct {
	Redis      string   `json:"redis"`
	Etcd       string   `json:"etcd"`
	Go         string   `json:"go"`
	GOMAXPROCS int      `json:"gomaxprocs"`
	Settings   settings `json:"settings"`
	Rows       []*row   `json:"rows"`
}

// settings are the run's parameters, as the flags gave them.
type settings struct {
	Lease           string `json:"lease"`
	Rounds          int    `json:"rounds"`
	Candidates      int    `json:"candidates"`
	KillRounds      int    `json:"kill_rounds"`
	Observers       int    `json:"observers"`
	ObserverClients int    `json:"observer_clients"`
	ObserverRounds  int    `json:"observer_rounds"`
	OrderCandidates int    `json:"order_candidates"`
	OrderRounds     int    `json:"order_rounds"`
	OrderGap        string `json:"order_gap"`
	Settle          string `json:"settle"`
	EtcdData        string `json:"etcd_data"` // where etcd kept its data: "temporary directory" or the -etcd-dir given
}

// row is one measure: a result per system run, and client-go's figure
// from its documented defaults.
type row struct {
	Key      string      `json:"key"`
	Measure  string      `json:"measure"`
	Fairlock *result     `json:"fairlock,omitempty"`
	Etcd     *result     `json:"etcd,omitempty"`
	ClientGo *documented `json:"client_go,omitempty"`
}

// result is one system's figure for one measure.
type result struct {
	Text    string       `json:"text"`
	Summary *summary     `json:"summary,omitempty"`
	Kill    []killSample `json:"kill,omitempty"`
	Order   *orderResult `json:"order,omitempty"`
}

// documented is client-go's figure for a measure, computed from its
// documented defaults rather than measured (see doc.go).
type documented struct {
	Text  string  `json:"text"`
	MinMS float64 `json:"min_ms,omitempty"`
	MaxMS float64 `json:"max_ms,omitempty"`
	Basis string  `json:"basis"`
}

// The defaults of client-go's leaderelection.LeaderElectionConfig that
// its documentation gives, and the jitter its candidates' polling adds
// (leaderelection.JitterFactor).
const (
	clientGoLeaseDuration = 15 * time.Second
	clientGoRenewDeadline = 10 * time.Second
	clientGoRetryPeriod   = 2 * time.Second
	clientGoJitterFactor  = 1.2
)

// clientGo returns client-go's figure for the measure key, nil for none.
func clientGo(key string) *documented {
	retry := ms(clientGoRetryPeriod)
	lease := ms(clientGoLeaseDuration)
	switch key {
	case keyHandOver:
		return &documented{Text: "0 to 2 s", MinMS: 0, MaxMS: retry,
			Basis: "released (ReleaseOnCancel), the record is taken at a candidate's next poll, RetryPeriod apart"}
	case keyKill:
		return &documented{Text: "15 to 17 s", MinMS: lease, MaxMS: lease + retry,
			Basis: "candidates wait LeaseDuration from the last renewal they observed, then take it at their next poll"}
	case keyKillAfter:
		return &documented{Text: "0 to 2 s", MinMS: 0, MaxMS: retry,
			Basis: "the next poll after LeaseDuration"}
	case keyObserveProclaim:
		return &documented{Text: "no value",
			Basis: "the record has the holder's identity only; nothing to proclaim"}
	case keyObserveLeader:
		return &documented{Text: "0 to 2 s", MinMS: 0, MaxMS: retry,
			Basis: "OnNewLeader runs when a candidate's poll sees a new holder; an observer is a candidate polling every RetryPeriod"}
	case keyOrder, keyOrderGap:
		return &documented{Text: "no order",
			Basis: "whichever candidate polls first after the release or the lease's end"}
	}
	return nil
}

// The measures' keys.
const (
	keyHandOver        = "handover"
	keyKill            = "kill"
	keyKillAfter       = "kill-after-lease"
	keyObserveProclaim = "observe-proclaim"
	keyObserveLeader   = "observe-leader"
	keyOrder           = "order"
	keyOrderGap        = "order-gap"
)

// measureObserve is the measure that fills the rows keyObserveProclaim and
// keyObserveLeader.
const measureObserve = "observe"

// writeJSON writes r to the file at path.
func (r *report) writeJSON(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// print writes the report as plain text: what ran, a table with a row
// per measure, and how to read it.
func (r *report) print(w io.Writer) {
	s := r.Settings
	fmt.Fprintf(w, "Leader elections: fairlock, etcd, client-go (documented)\n\n")
	if r.Redis != "" {
		fmt.Fprintf(w, "fairlock: %s\n", r.Redis)
	}
	if r.Etcd != "" {
		fmt.Fprintf(w, "etcd:     %s\n", r.Etcd)
	}
	fmt.Fprintf(w, "Go:       %s, GOMAXPROCS %d\n", r.Go, r.GOMAXPROCS)
	fmt.Fprintf(w, "Lease %s for both: fairlock WithLease, etcd session TTL. Every candidate has a client (and a session) of its own.\n\n", s.Lease)

	cols := [][]string{{"measure", fairlockName, etcdName, "client-go (documented)"}}
	for _, rw := range r.Rows {
		line := []string{rw.Measure, "-", "-", "-"}
		if rw.Fairlock != nil {
			line[1] = rw.Fairlock.Text
		}
		if rw.Etcd != nil {
			line[2] = rw.Etcd.Text
		}
		if rw.ClientGo != nil {
			line[3] = rw.ClientGo.Text
		}
		cols = append(cols, line)
	}
	widths := make([]int, 4)
	for _, line := range cols {
		for i, c := range line {
			widths[i] = max(widths[i], len([]rune(c)))
		}
	}
	for n, line := range cols {
		var b strings.Builder
		for i, c := range line {
			if i < len(line)-1 {
				fmt.Fprintf(&b, "%-*s  ", widths[i], c)
			} else {
				b.WriteString(c)
			}
		}
		fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
		if n == 0 {
			var rule []string
			for _, wd := range widths {
				rule = append(rule, strings.Repeat("-", wd))
			}
			fmt.Fprintln(w, strings.Join(rule, "  "))
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "Resign -> new leader: %d rounds, %d candidates in line; from the Resign call to the next one's Campaign returning; median (p90, p99).\n", s.Rounds, s.Candidates)
	fmt.Fprintf(w, "SIGKILL -> new leader: %d rounds; the leader, a worker process, is killed once a candidate waits behind it, a few ms after its\n"+
		"  lease was granted or renewed; median (smallest to largest). After the lease ran out: the same, less what the lease had left at the kill.\n", s.KillRounds)
	fmt.Fprintf(w, "Observers: %d observers over %d clients (%d each); from the Proclaim or Resign call to the last observer seeing the new value;\n"+
		"  %d rounds of each; median (p90, p99).\n", s.Observers, s.ObserverClients, s.Observers/max(s.ObserverClients, 1), s.ObserverRounds)
	fmt.Fprintf(w, "Every measured Resign or Proclaim comes %s after the change before it.\n", s.Settle)
	fmt.Fprintf(w, "Order: %d rounds of %d candidates each, elected one after the other; pairs elected in the other order than they began to campaign,\n"+
		"  each once the one before was in line, or %s apart (a fresh client for each candidate in the first round).\n", s.OrderRounds, s.OrderCandidates, s.OrderGap)
	fmt.Fprintf(w, "client-go: not run (it needs a Kubernetes API server); figures from its documented defaults, LeaseDuration %v,\n"+
		"  RenewDeadline %v, RetryPeriod %v. Its candidates poll RetryPeriod apart, stretched by up to %.1f× more (JitterFactor),\n"+
		"  so a poll can come up to %v after the last one.\n",
		clientGoLeaseDuration, clientGoRenewDeadline, clientGoRetryPeriod, clientGoJitterFactor,
		time.Duration(float64(clientGoRetryPeriod)*(1+clientGoJitterFactor)))
}
