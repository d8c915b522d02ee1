package main

import (
	"context"
	"fmt"
	"io"
	"time"
)

// unlockMain is the unlock command: it removes the hold of one lock,
// whoever owns it, when given --force and --yes.
func unlockMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var (
		c          common
		force, yes bool
	)
	fs := c.flags("unlock", "--force [--yes] [flags] NAME",
		"Removes the hold of the lock NAME, whoever owns it, and hands the lock to the\n"+
			"next waiter (Mutex.ForceUnlock). Without --yes it only says what it would\n"+
			"remove, and exits with 2. It exits with 1 when the lock is not held. The\n"+
			"holder it names is the one it read just before removing the hold.\n", stderr)
	fs.BoolVar(&force, "force", false, "required: remove a hold that this command does not own")
	fs.BoolVar(&yes, "yes", false, "do remove it")
	pos, code, ok := c.parse(fs, args, stderr)
	if !ok {
		return code
	}
	switch {
	case !force:
		return c.usageError(stderr, fmt.Errorf("needs --force: it removes a hold that another process owns"))
	case len(pos) != 1:
		return c.usageError(stderr, fmt.Errorf("want one lock NAME, got %d arguments", len(pos)))
	}
	name := pos[0]
	fl, ctx, done, err := c.session(ctx)
	if err != nil {
		return c.fail(stderr, err)
	}
	defer done()
	st, err := fl.Inspect(ctx, name)
	if err != nil {
		return c.fail(stderr, err)
	}
	result := unlockJSON{Name: name}
	if !st.Held {
		if c.json {
			writeJSON(stdout, result)
		}
		fmt.Fprintf(stderr, "fairlock unlock: lock %q is not held (prefix %q): nothing to remove\n", name, c.prefix)
		return exitNotFound
	}
	hold := fmt.Sprintf("owner %s, client %s, token %d", st.Owner, orUnknown(st.Client), st.Token)
	if !yes {
		next := "nobody waits for it"
		if len(st.Waiters) > 0 {
			next = fmt.Sprintf("the next waiter (owner %s, client %s) would be granted it", st.Waiters[0].Owner, orUnknown(st.Waiters[0].Client))
		}
		fmt.Fprintf(stderr, "fairlock unlock: refused without --yes: it would remove the hold of lock %q (%s, %d level(s), lease left %s); %s\n",
			name, hold, st.Count, st.LeaseLeft.Round(time.Millisecond), next)
		return exitError
	}
	removed, err := fl.Mutex(name).ForceUnlock(ctx)
	if err != nil {
		return c.fail(stderr, err)
	}
	if !removed {
		if c.json {
			writeJSON(stdout, result)
		}
		fmt.Fprintf(stderr, "fairlock unlock: lock %q is not held any more (prefix %q): nothing removed\n", name, c.prefix)
		return exitNotFound
	}
	result.Removed, result.Owner, result.Client, result.Token = true, st.Owner, st.Client, st.Token
	if c.json {
		writeJSON(stdout, result)
	} else {
		fmt.Fprintf(stdout, "removed the hold of lock %q: %s\n", name, hold)
	}
	return exitOK
}

// unlockJSON is the JSON result of unlock.
type unlockJSON struct {
	Name    string `json:"name"`
	Removed bool   `json:"removed"`
	Owner   string `json:"owner,omitempty"`
	Client  string `json:"client,omitempty"`
	Token   int64  `json:"token,omitempty"`
}
