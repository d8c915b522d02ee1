package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/fairlock/fairlock/queue"
)

// inspectMain is the inspect command: it prints the state of one lock of
// a deployment (its holder, count, token, remaining lease, and the
// waiters in order with their deadlines) and exits: 0 when printed, 2
// when it could not be (bad flags, Redis unreachable).
//
//	stress inspect [-redis URL | -cluster ADDRS | -sentinel ADDRS -master NAME] [-prefix P] NAME
func inspectMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var c config
	fs := flag.NewFlagSet("stress inspect", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: stress inspect [flags] NAME\n\n"+
			"Prints the state of the lock NAME: its holder, count, token and remaining\n"+
			"lease, and the waiters in order with their deadlines.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	c.Spec.Flags(fs, "(one of the three is needed)")
	fs.StringVar(&c.Prefix, "prefix", "fairlock", "the key prefix the lock's Clients use (WithPrefix)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitCannotRun
	}
	name, err := c.inspectArgs(fs)
	if err != nil {
		fmt.Fprintf(stderr, "stress inspect: %v\nRun 'stress inspect -h' for usage.\n", err)
		return exitCannotRun
	}

	tgt, err := openTarget(c)
	if err != nil {
		fmt.Fprintf(stderr, "stress inspect: %v\n", err)
		return exitCannotRun
	}
	defer tgt.close()
	rdb := tgt.client()
	defer rdb.Close()
	s, err := inspect(ctx, rdb, c.Prefix, name)
	if err != nil {
		fmt.Fprintf(stderr, "stress inspect: %v\n", err)
		return exitCannotRun
	}
	fmt.Fprint(stdout, s.String())
	return exitOK
}

// inspectArgs checks the parsed flags and the one argument of the inspect
// command, and returns the lock's name.
func (c *config) inspectArgs(fs *flag.FlagSet) (string, error) {
	if err := c.Spec.Validate(); err != nil {
		return "", err
	}
	switch {
	case len(c.Chosen()) == 0:
		return "", errors.New("needs -redis, -cluster or -sentinel: the embedded Redis exists only during a run")
	case fs.NArg() != 1:
		return "", fmt.Errorf("want one lock NAME, got %d arguments", fs.NArg())
	}
	name := fs.Arg(0)
	if _, err := queue.For(c.Prefix, name); err != nil {
		return "", fmt.Errorf("%q -prefix %q: %v", name, c.Prefix, err)
	}
	return name, nil
}
