package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"text/tabwriter"

	"github.com/fairlock/fairlock"
)

// inspectMain is the inspect command: the state of the locks of one name.
func inspectMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var c common
	fs := c.flags("inspect", "[flags] NAME",
		"Prints the state of every lock called NAME that is in use (a Mutex, a\n"+
			"Semaphore, a RWMutex, an Election): its kind, its capacity and use, its\n"+
			"holders in the order of their grants (owner, Client id and name, weight,\n"+
			"count, fencing token, time held, lease left; an election's leader, its\n"+
			"token the term, with its value) and its waiters in the order they are\n"+
			"served (kind, owner, Client, weight, time waited, time left, a MultiLock\n"+
			"ticket's other locks, a candidate's value). With -masters, each master's\n"+
			"view besides the majority's. Exits with 1 when nobody holds it and nobody\n"+
			"waits for it.\n", stderr)
	pos, code, ok := c.parse(fs, args, stderr)
	if !ok {
		return code
	}
	if len(pos) != 1 {
		return c.usageError(stderr, fmt.Errorf("want one lock NAME, got %d arguments", len(pos)))
	}
	d, ctx, done, err := c.session(ctx)
	if err != nil {
		return c.fail(stderr, err)
	}
	defer done()
	v, err := readView(ctx, d.fl, pos[0])
	if err != nil {
		return c.fail(stderr, err)
	}
	if c.json {
		writeJSON(stdout, inspectJSON{Schema: schemaVersion, Command: "inspect", Name: v.name, At: v.at.UTC(), Locks: locksJSON(v, d.masters)})
	} else if v.found() {
		fmt.Fprint(stdout, viewText(v, d.masters))
	}
	if !v.found() {
		return c.notFound(stderr, v.name, "")
	}
	return exitOK
}

// listMain is the list command: the names of the locks in use, with
// their kinds.
func listMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var c common
	fs := c.flags("list", "[flags] [PATTERN]",
		"Prints the locks held or waited on, sorted by name, one line per name and\n"+
			"kind: the name, the kind (mutex, semaphore, rwmutex, election), its use,\n"+
			"and how many hold it and wait for it (an election's leader, and its\n"+
			"candidates in line). With PATTERN (Redis's glob syntax: * ? [abc]) only\n"+
			"the names that match it. It scans every server with SCAN, never KEYS, then\n"+
			"inspects each name found. It exits with 1 when none matches.\n", stderr)
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
	d, ctx, done, err := c.session(ctx)
	if err != nil {
		return c.fail(stderr, err)
	}
	defer done()
	names, err := d.fl.List(ctx, pattern)
	if err != nil {
		return c.fail(stderr, err)
	}
	views, err := readViews(ctx, d.fl, names)
	if err != nil {
		return c.fail(stderr, err)
	}
	if c.json {
		out := listJSON{Schema: schemaVersion, Command: "list", Pattern: pattern, Names: []nameJSON{}}
		for _, v := range views {
			n := nameJSON{Name: v.name, Locks: []summaryJSON{}}
			for _, st := range v.locks {
				n.Locks = append(n.Locks, summaryOf(st))
			}
			out.Names = append(out.Names, n)
		}
		writeJSON(stdout, out)
	} else if len(views) > 0 {
		tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "NAME\tKIND\tUSE\tHOLDERS\tWAITERS")
		for _, v := range views {
			if !v.found() {
				fmt.Fprintf(tw, "%s\t-\tfree by the time it was inspected\t0\t0\n", v.name)
			}
			for _, st := range v.locks {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\n", v.name, st.Kind, listUse(st), len(st.Holders), len(st.Waiters))
			}
		}
		tw.Flush()
	}
	if len(names) == 0 {
		// Like grep: nothing found is status 1, so that a script can
		// tell.
		fmt.Fprintf(stderr, "fairlock: no lock held or waited on matches %q\n", pattern)
		return exitNotFound
	}
	return exitOK
}

// listUse is the use of a lock in list's short form.
func listUse(st fairlock.LockState) string {
	switch {
	case st.Kind == fairlock.KindSemaphore:
		return fmt.Sprintf("%d/%d permits", st.Used, st.Capacity)
	case st.Kind == fairlock.KindRWMutex && st.Writer:
		return "writer"
	case st.Kind == fairlock.KindRWMutex && st.Readers > 0:
		return fmt.Sprintf("%d reader(s)", st.Readers)
	case st.Kind == fairlock.KindElection && len(st.Holders) > 0:
		return "leader"
	case st.Kind == fairlock.KindElection:
		return "no leader"
	case len(st.Holders) > 0:
		return "held"
	}
	return "free"
}

// listWorkers bounds the names list inspects at once.
const listWorkers = 8

// readViews reads the view of each name, a few at once, in the order of
// names.
func readViews(ctx context.Context, fl *fairlock.Client, names []string) ([]view, error) {
	views := make([]view, len(names))
	errs := make([]error, len(names))
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(listWorkers, len(names)) {
		wg.Go(func() {
			for i := range next {
				views[i], errs[i] = readView(ctx, fl, names[i])
			}
		})
	}
	for i := range names {
		next <- i
	}
	close(next)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("inspecting %q: %w", names[i], err)
		}
	}
	return views, nil
}

// join names things in prose: "a", "a and b", "a, b and c".
func join(items []string) string {
	if len(items) < 2 {
		return strings.Join(items, "")
	}
	return strings.Join(items[:len(items)-1], ", ") + " and " + items[len(items)-1]
}
