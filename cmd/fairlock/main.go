package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"time"

	"github.com/fairlock/fairlock/internal/deploy"
	"github.com/fairlock/fairlock/queue"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// Exit statuses.
const (
	exitOK       = 0
	exitNotFound = 1 // inspect, watch: nothing held, nobody waiting; list: no match; unlock: not held; leader: no leader
	exitError    = 2 // bad usage, Redis unreachable or refusing, a refused unlock
)

// defaultRedis is the deployment when no flag names one.
const defaultRedis = "redis://127.0.0.1:6379/0"

// commands are the subcommands by name.
var commands = map[string]func(ctx context.Context, args []string, stdout, stderr io.Writer) int{
	"inspect": inspectMain,
	"leader":  leaderMain,
	"list":    listMain,
	"unlock":  unlockMain,
	"watch":   watchMain,
}

const usage = `Usage: fairlock COMMAND [flags] [arguments]

Commands:
  inspect NAME          the locks called NAME of every kind: holders and line, in order
  list [PATTERN]        the names of the locks held or waited on, with their kinds
  watch NAME            a live view of the locks called NAME, redrawn on every hand-over
  unlock --force NAME   remove a hold of the lock NAME (with --yes)
  leader NAME           the leader of the election NAME and its candidates in line
  leader -watch NAME    every change of the election's leadership, one line each

Run 'fairlock COMMAND -h' for the flags of a command.
`

// run is the command: it runs the subcommand args name and returns the
// exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	quietRedis()
	defer redisLog.to(nil)
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitError
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stderr, usage)
		return exitOK
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "fairlock: unknown command %q\n\n%s", args[0], usage)
		return exitError
	}
	return cmd(ctx, args[1:], stdout, stderr)
}

// common holds the flags every subcommand has.
type common struct {
	name       string // the subcommand, for messages
	spec       deploy.Spec
	masters    []string // -masters: a quorum's masters, host:port or redis:// URLs
	badMasters error    // why -masters is invalid; nil when it is not
	prefix     string
	json       bool
	timeout    time.Duration
	verbose    bool
	stderr     io.Writer // where -v sends the logs of go-redis and of the Client
}

// flags returns the flag set of subcommand name with the common flags.
// synopsis and about make its usage.
func (c *common) flags(name, synopsis, about string, stderr io.Writer) *flag.FlagSet {
	c.name, c.stderr = name, stderr
	fs := flag.NewFlagSet("fairlock "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: fairlock %s %s\n\n%s\nFlags (before or after the arguments):\n", name, synopsis, about)
		fs.PrintDefaults()
	}
	c.spec.Flags(fs, "(default "+defaultRedis+")")
	fs.Var(mastersFlag{&c.masters, &c.badMasters}, "masters", "the `addresses` of a quorum's masters (NewQuorum), host:port or redis://\nURLs, comma-separated, in the order its Clients list them; excludes\n-redis, -cluster and -sentinel")
	fs.StringVar(&c.prefix, "prefix", "fairlock", "the key `prefix` of the locks' Clients (WithPrefix)")
	fs.BoolVar(&c.json, "json", false, "write JSON to stdout (schema "+schemaVersion+", see docs/operations.md)")
	fs.DurationVar(&c.timeout, "timeout", 5*time.Second, "how long to wait for Redis: each connection attempt, and each command;\nwith -masters, each master's answer to each read")
	fs.BoolVar(&c.verbose, "v", false, "log go-redis's and the fairlock Client's messages to stderr")
	return fs
}

// parse parses args with fs, flags before, between and after the
// arguments (all of them after "--"), checks the deployment and returns
// the arguments. ok false means the command ends with status code.
func (c *common) parse(fs *flag.FlagSet, args []string, stderr io.Writer) (pos []string, code int, ok bool) {
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, exitOK, false
			}
			return nil, exitError, false // the flag package said why
		}
		rest := fs.Args()
		if len(rest) == 0 {
			break
		}
		if used := args[:len(args)-len(rest)]; len(used) > 0 && used[len(used)-1] == "--" {
			pos = append(pos, rest...)
			break
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
	if c.verbose {
		redisLog.to(c.stderr)
	}
	if err := c.spec.Validate(); err != nil {
		return nil, c.usageError(stderr, err), false
	}
	if c.badMasters != nil {
		return nil, c.usageError(stderr, c.badMasters), false
	}
	if chosen := c.spec.Chosen(); len(c.masters) > 0 && len(chosen) > 0 {
		return nil, c.usageError(stderr, fmt.Errorf("-masters and %s exclude each other: give one", chosen[0])), false
	}
	if err := queue.ValidatePrefix(c.prefix); err != nil {
		return nil, c.usageError(stderr, fmt.Errorf("-prefix: %w", err)), false
	}
	if c.timeout <= 0 {
		return nil, c.usageError(stderr, fmt.Errorf("-timeout %v: want a positive duration", c.timeout)), false
	}
	if len(c.spec.Chosen()) == 0 && len(c.masters) == 0 {
		c.spec.RedisURL = defaultRedis
	}
	return pos, exitOK, true
}

// usageError reports a usage error and returns its status.
func (c *common) usageError(stderr io.Writer, err error) int {
	fmt.Fprintf(stderr, "fairlock %s: %v\nRun 'fairlock %s -h' for usage.\n", c.name, err, c.name)
	return exitError
}

// notFound reports a lock that nobody holds and nobody waits for, with
// more said after it if not empty, and returns its status.
func (c *common) notFound(stderr io.Writer, name, more string) int {
	fmt.Fprintf(stderr, "fairlock %s: lock %q not found: nobody holds it and nobody waits for it (prefix %q)%s\n", c.name, name, c.prefix, more)
	return exitNotFound
}

// fail reports an error of Redis or of the library and returns its status.
func (c *common) fail(stderr io.Writer, err error) int {
	more := ""
	if errors.Is(err, context.DeadlineExceeded) {
		more = fmt.Sprintf(" (no answer within -timeout %v)", c.timeout)
	}
	fmt.Fprintf(stderr, "fairlock %s: %s: %v%s\n", c.name, c.where(), err, more)
	return exitError
}

// where names the deployment for messages, without credentials.
func (c *common) where() string {
	if len(c.masters) > 0 {
		return quorumString(c.masters)
	}
	return c.spec.String()
}
