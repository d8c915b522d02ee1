package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/fairlock/fairlock"
)

// inspectMain is the inspect command: the state of one lock.
func inspectMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var c common
	fs := c.flags("inspect", "[flags] NAME",
		"Prints the state of the lock NAME: its holder (owner, Client id, levels,\n"+
			"fencing token, lease left) and the waiters in order, with their Client ids\n"+
			"and the time each keeps its place. Exits with 1 when nobody holds it and\n"+
			"nobody waits for it.\n", stderr)
	pos, code, ok := c.parse(fs, args, stderr)
	if !ok {
		return code
	}
	if len(pos) != 1 {
		return c.usageError(stderr, fmt.Errorf("want one lock NAME, got %d arguments", len(pos)))
	}
	fl, ctx, done, err := c.session(ctx)
	if err != nil {
		return c.fail(stderr, err)
	}
	defer done()
	st, err := fl.Inspect(ctx, pos[0])
	if err != nil {
		return c.fail(stderr, err)
	}
	if c.json {
		writeJSON(stdout, stateJSON(st))
	} else if found(st) {
		fmt.Fprint(stdout, stateText(st))
	}
	if !found(st) {
		return c.notFound(stderr, st.Name, "")
	}
	return exitOK
}

// listMain is the list command: the names of the locks in use.
func listMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var c common
	fs := c.flags("list", "[flags] [PATTERN]",
		"Prints the names of the locks held or waited on, one a line, sorted; with\n"+
			"PATTERN (Redis's glob syntax: * ? [abc]) only those that match it. It scans\n"+
			"every server with SCAN, never KEYS. It exits with 1 when none matches.\n", stderr)
	pos, code, ok := c.parse(fs, args, stderr)
	if !ok {
		return code
	}
	if len(pos) > 1 {
		return c.usageError(stderr, fmt.Errorf("want at most one PATTERN, got %d arguments", len(pos)))
	}
	pattern := ""
	if len(pos) == 1 {
		pattern = pos[0]
	}
	fl, ctx, done, err := c.session(ctx)
	if err != nil {
		return c.fail(stderr, err)
	}
	defer done()
	names, err := fl.List(ctx, pattern)
	if err != nil {
		return c.fail(stderr, err)
	}
	if c.json {
		if names == nil {
			names = []string{}
		}
		writeJSON(stdout, names)
	} else {
		for _, n := range names {
			fmt.Fprintln(stdout, n)
		}
	}
	if len(names) == 0 {
		// Like grep: nothing found is status 1, so that a script can
		// tell.
		fmt.Fprintf(stderr, "fairlock: no lock held or waited on matches %q\n", pattern)
		return exitNotFound
	}
	return exitOK
}

// found reports whether anyone holds the lock or waits for it.
func found(st fairlock.LockState) bool { return st.Held || len(st.Waiters) > 0 }

// lockJSON is the JSON form of a LockState; durations in milliseconds.
type lockJSON struct {
	Name    string       `json:"name"`
	At      time.Time    `json:"at"`
	Held    bool         `json:"held"`
	Holder  *holderJSON  `json:"holder"` // null when not held
	Waiters []waiterJSON `json:"waiters"`
}

type holderJSON struct {
	Owner       string `json:"owner"`
	Client      string `json:"client"`                // "" when not known
	ClientName  string `json:"client_name,omitempty"` // the Client's WithName
	Count       int    `json:"count"`
	Token       int64  `json:"token"`
	LeaseLeftMS int64  `json:"lease_left_ms"`
}

type waiterJSON struct {
	Owner      string `json:"owner"`
	Client     string `json:"client"`
	ClientName string `json:"client_name,omitempty"`
	TimeLeftMS int64  `json:"time_left_ms"`
}

func stateJSON(st fairlock.LockState) lockJSON {
	j := lockJSON{Name: st.Name, At: st.At, Held: st.Held, Waiters: []waiterJSON{}}
	if st.Held {
		j.Holder = &holderJSON{Owner: st.Owner, Client: st.Client, ClientName: st.ClientName, Count: st.Count, Token: st.Token, LeaseLeftMS: st.LeaseLeft.Milliseconds()}
	}
	for _, w := range st.Waiters {
		j.Waiters = append(j.Waiters, waiterJSON{Owner: w.Owner, Client: w.Client, ClientName: w.ClientName, TimeLeftMS: w.TimeLeft.Milliseconds()})
	}
	return j
}

// writeJSON writes v as one line of JSON.
func writeJSON(w io.Writer, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		b = fmt.Appendf(nil, `{"error":%q}`, err.Error()) // not reached: plain types
	}
	fmt.Fprintf(w, "%s\n", b)
}

// stateText is the text form of a LockState.
func stateText(st fairlock.LockState) string {
	var b strings.Builder
	fmt.Fprintf(&b, "lock %q at %s (server clock)\n", st.Name, st.At.UTC().Format("2006-01-02 15:04:05.000"))
	if st.Held {
		fmt.Fprintf(&b, "held by owner %s\n", st.Owner)
		fmt.Fprintf(&b, "  client      %s\n", clientText(st.Client, st.ClientName))
		fmt.Fprintf(&b, "  count       %d\n", st.Count)
		fmt.Fprintf(&b, "  token       %d\n", st.Token)
		fmt.Fprintf(&b, "  lease left  %s\n", st.LeaseLeft.Round(time.Millisecond))
	} else {
		b.WriteString("not held\n")
	}
	if len(st.Waiters) == 0 {
		b.WriteString("no waiters\n")
		return b.String()
	}
	fmt.Fprintf(&b, "waiters (%d, in order):\n", len(st.Waiters))
	for i, w := range st.Waiters {
		left := w.TimeLeft.Round(time.Millisecond).String() + " left"
		if w.TimeLeft <= 0 {
			left = "gone, to be dropped"
		}
		fmt.Fprintf(&b, "  %d. owner %s  client %s  %s\n", i+1, w.Owner, clientText(w.Client, w.ClientName), left)
	}
	return b.String()
}

// clientText is a Client's id, with its name when it has one.
func clientText(id, name string) string {
	if name != "" {
		return fmt.Sprintf("%s (%q)", orUnknown(id), name)
	}
	return orUnknown(id)
}

func orUnknown(s string) string {
	if s == "" {
		return "(unknown)"
	}
	return s
}
