package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/fairlock/fairlock"
)

// unlockMain is the unlock command: it removes a hold of one lock,
// whoever owns it, when given --force and --yes.
func unlockMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var (
		c           common
		force, yes  bool
		kind, owner string
	)
	fs := c.flags("unlock", "--force [--yes] [-kind KIND] [-owner OWNER] [flags] NAME",
		"Removes a hold of the lock NAME, whoever owns it, and hands what it frees to\n"+
			"the line: a Mutex's one hold (Mutex.ForceUnlock), an Election's leadership\n"+
			"(Election.ForceResign: the next candidate is elected), or the hold of -owner\n"+
			"on a Semaphore or a RWMutex. Without --yes it only says what it would remove, and\n"+
			"exits with 2. It exits with 1 when there is no such hold. It says whose hold\n"+
			"it removed, as read just before, and how long the former holder may still\n"+
			"act beside the next one: fencing tokens are what stops it.\n", stderr)
	fs.BoolVar(&force, "force", false, "required: remove a hold that this command does not own")
	fs.BoolVar(&yes, "yes", false, "do remove it")
	fs.StringVar(&kind, "kind", "", "the `kind` of the lock, mutex, semaphore, rwmutex or election: needed when\nlocks of several kinds of the name are held")
	fs.StringVar(&owner, "owner", "", "the `owner` id of the hold to remove: required for a Semaphore or a\nRWMutex, which have a hold per owner; for a Mutex or an Election, it\nrefuses unless that owner holds it")
	pos, code, ok := c.parse(fs, args, stderr)
	if !ok {
		return code
	}
	switch {
	case !force:
		return c.usageError(stderr, fmt.Errorf("needs --force: it removes a hold that another process owns"))
	case len(pos) != 1:
		return c.usageError(stderr, fmt.Errorf("want one lock NAME, got %d arguments", len(pos)))
	case kind != "" && !validKind(kind):
		return c.usageError(stderr, fmt.Errorf("-kind %q: want mutex, semaphore, rwmutex or election", kind))
	case kind != "" && kind != string(fairlock.KindMutex) && len(c.masters) > 0:
		return c.usageError(stderr, fmt.Errorf("-kind %s: a quorum's locks are Mutexes", kind))
	}
	name := pos[0]
	d, ctx, done, err := c.session(ctx)
	if err != nil {
		return c.fail(stderr, err)
	}
	defer done()
	v, err := readView(ctx, d.fl, name)
	if err != nil {
		return c.fail(stderr, err)
	}
	u := unlocker{c: &c, name: name, stdout: stdout, stderr: stderr,
		result: unlockJSON{Schema: schemaVersion, Command: "unlock", Name: name, At: ptr(v.at.UTC())}}

	st, code, ok := u.pick(v, fairlock.Kind(kind))
	if !ok {
		return code
	}
	h, code, ok := u.holder(st, owner)
	if !ok {
		return code
	}
	hold := holdText(st, h)
	if !yes {
		fmt.Fprintf(stderr, "fairlock unlock: refused without --yes: it would remove the hold of %s %q (%s); %s\n%s",
			st.Kind, name, hold, nextText(st, h), overlapText(st, h))
		return exitError
	}
	var removed bool
	switch st.Kind {
	case fairlock.KindMutex:
		removed, err = d.fl.Mutex(name).ForceUnlock(ctx)
	case fairlock.KindElection:
		removed, err = d.fl.Election(name).ForceResign(ctx)
	default:
		removed, err = forceWeighted(ctx, d.fl, st, h.Owner)
	}
	if err != nil {
		return c.fail(stderr, err)
	}
	if !removed {
		return u.none(fmt.Sprintf("the hold of owner %s of %s %q is gone already: nothing removed", h.Owner, st.Kind, name))
	}
	u.result.Removed = true
	if c.json {
		writeJSON(stdout, u.result)
	} else {
		fmt.Fprintf(stdout, "removed the hold of %s %q: %s\n%s", st.Kind, name, hold, overlapText(st, h))
	}
	return exitOK
}

// unlocker is one run of unlock.
type unlocker struct {
	c              *common
	name           string
	stdout, stderr io.Writer
	result         unlockJSON
}

// pick returns the lock of v to act on: the one of kind, or when kind is
// "" the only one held. ok false means the command ends with status code.
func (u *unlocker) pick(v view, kind fairlock.Kind) (st fairlock.LockState, code int, ok bool) {
	var held []fairlock.LockState
	var kinds []string
	for _, st := range v.locks {
		if _, ok := firstHolder(st); ok && (kind == "" || st.Kind == kind) {
			held, kinds = append(held, st), append(kinds, "a "+string(st.Kind))
		}
	}
	switch {
	case len(held) == 0 && kind != "":
		return st, u.none(fmt.Sprintf("no %s %q is held (prefix %q): nothing to remove", kind, u.name, u.c.prefix)), false
	case len(held) == 0:
		return st, u.none(fmt.Sprintf("lock %q is not held (prefix %q): nothing to remove", u.name, u.c.prefix)), false
	case len(held) > 1:
		return st, u.c.usageError(u.stderr, fmt.Errorf("lock %q is held as %s: name one with -kind", u.name, join(kinds))), false
	}
	return held[0], exitOK, true
}

// holder returns the hold to remove: the Mutex's or the Election's one,
// or owner's. ok false means the command ends with status code.
func (u *unlocker) holder(st fairlock.LockState, owner string) (h fairlock.Holder, code int, ok bool) {
	u.result.Kind = ptr(string(st.Kind))
	if st.Kind == fairlock.KindMutex || st.Kind == fairlock.KindElection {
		h, _ = firstHolder(st)
		if owner != "" && h.Owner != owner {
			return h, u.none(fmt.Sprintf("%s %q is held by owner %s, not %s: nothing removed", st.Kind, u.name, h.Owner, owner)), false
		}
	} else {
		var owners []string
		found := false
		for _, x := range st.Holders {
			owners = append(owners, fmt.Sprintf("%s (weight %d)", x.Owner, holderWeight(st, x)))
			if x.Owner == owner {
				h, found = x, true
			}
		}
		switch {
		case owner == "":
			return h, u.c.usageError(u.stderr, fmt.Errorf("a %s has a hold per owner: name the one to remove with -owner; %q is held by %s",
				st.Kind, u.name, join(owners))), false
		case !found:
			return h, u.none(fmt.Sprintf("owner %s holds no part of %s %q (held by %s): nothing to remove", owner, st.Kind, u.name, join(owners))), false
		}
	}
	u.result.Holder = ptr(holderOf(st, h))
	u.result.OverlapMaxMS = ms(h.LeaseLeft)
	if len(st.Waiters) > 0 {
		u.result.Next = ptr(waiterOf(st.Waiters[0]))
	}
	return h, exitOK, true
}

// none reports that there is no hold to remove, and returns its status.
func (u *unlocker) none(msg string) int {
	if u.c.json {
		writeJSON(u.stdout, u.result)
	}
	fmt.Fprintf(u.stderr, "fairlock unlock: %s\n", msg)
	return exitNotFound
}

// firstHolder is st's first hold; on a quorum the majority's, or else the
// first a master has (a hold on a minority, which a forced unlock
// removes from every master all the same).
func firstHolder(st fairlock.LockState) (fairlock.Holder, bool) {
	if len(st.Holders) > 0 {
		return st.Holders[0], true
	}
	for _, m := range st.Masters {
		if m.Err == nil && len(m.State.Holders) > 0 {
			return m.State.Holders[0], true
		}
	}
	return fairlock.Holder{}, false
}

// validKind reports whether k names a kind of lock.
func validKind(k string) bool {
	switch fairlock.Kind(k) {
	case fairlock.KindMutex, fairlock.KindSemaphore, fairlock.KindRWMutex, fairlock.KindElection:
		return true
	}
	return false
}

// holdText describes a hold in one line.
func holdText(st fairlock.LockState, h fairlock.Holder) string {
	s := fmt.Sprintf("owner %s, client %s", h.Owner, clientText(h.Client, h.ClientName))
	switch {
	case st.Kind == fairlock.KindSemaphore:
		s += fmt.Sprintf(", %d permit(s)", h.Weight)
	case st.Kind == fairlock.KindRWMutex && h.Write:
		s += ", the writer"
	case st.Kind == fairlock.KindRWMutex:
		s += ", a reader"
	case st.Kind == fairlock.KindElection:
		s += ", the leader, value " + valueText(h.Value)
	}
	return s + fmt.Sprintf(", %d level(s), token %d, held for %s, lease left %s", h.Count, h.Token, round(h.HeldFor), round(h.LeaseLeft))
}

// nextText says who the removal lets in.
func nextText(st fairlock.LockState, h fairlock.Holder) string {
	if len(st.Waiters) == 0 {
		return "nobody waits for it"
	}
	w := st.Waiters[0]
	who := fmt.Sprintf("the first waiter (%s, owner %s, client %s)", w.Kind, w.Owner, orUnknown(w.Client))
	switch st.Kind {
	case fairlock.KindMutex:
		return who + " would be granted it"
	case fairlock.KindElection:
		return fmt.Sprintf("the first candidate (owner %s, client %s, value %s) would be elected", w.Owner, orUnknown(w.Client), valueText(w.Value))
	}
	return who + " would be granted it if what the hold frees is enough"
}

// overlapText is the worst case of the overlap a forced removal of h
// causes: the time the former holder may still act beside the holders
// granted after it.
func overlapText(st fairlock.LockState, h fairlock.Holder) string {
	var b strings.Builder
	b.WriteString("overlap: until the former holder's Client hears of the removal, it may act beside those granted after it")
	switch {
	case st.Kind == fairlock.KindSemaphore:
		fmt.Fprintf(&b, " (the permits in use may exceed the %d by its %d)", st.Capacity, h.Weight)
	case st.Kind == fairlock.KindRWMutex && h.Write:
		b.WriteString(" (it may still write while others read or write)")
	case st.Kind == fairlock.KindRWMutex:
		b.WriteString(" (it may still read while a writer writes)")
	case st.Kind == fairlock.KindElection:
		b.WriteString(" (it may still act as the leader beside the next one)")
	}
	b.WriteString(":\n")
	b.WriteString("  - its Client is told by a revocation message on the lock's wake channel, and cancels the hold's\n" +
		"    context (cause ErrLeaseLost) within that message's latency, milliseconds as a rule;\n")
	if h.HeldFor < time.Second {
		fmt.Fprintf(&b, "  - a hold younger than a second (this one: %s) may be told only about a second after its grant;\n", round(h.HeldFor))
	}
	fmt.Fprintf(&b, "  - should the message be lost, at its next renewal, and at the latest when its lease would have\n"+
		"    ended: in %s. That is the worst case for a holder that stops when the hold's context ends;\n", round(h.LeaseLeft))
	b.WriteString("  - a holder that does not use that context, nor a fencing token, may go on acting for as long as\n" +
		"    its code runs.\n")
	if st.Kind == fairlock.KindElection {
		fmt.Fprintf(&b, "Terms bound it: a store that refuses a term lower than the highest it has seen refuses the former\n"+
			"leader (term %d) once a later leader's (larger) term has reached it.\n", h.Token)
		return b.String()
	}
	fmt.Fprintf(&b, "Fencing tokens bound it: a resource that refuses a token lower than the highest it has seen refuses\n"+
		"the former holder (token %d) once a later holder's (larger) token has reached it.\n", h.Token)
	return b.String()
}
