package fair

import (
	"errors"
	"fmt"
	"strings"

	"github.com/fairlock/fairlock/internal/errs"
)

// serverReply returns the message of an error reply from the server, and
// false when err is no error reply.
func serverReply(err error) (string, bool) { return errs.Reply(err) }

// refusal wraps an error reply that refuses a command for lack of
// permission with errs.ErrNoPermission; other errors are returned as they
// are. A command sent directly is refused with NOPERM; one a script calls
// (Redis checks each against the user that runs the script) fails the
// script with an ERR reply of its own, which aclRefusedInScript names.
func refusal(err error) error {
	if replyStarts(err, append([]string{"NOPERM"}, aclRefusedInScript...)...) && !errors.Is(err, errs.ErrNoPermission) {
		return fmt.Errorf("%w: %w", errs.ErrNoPermission, err)
	}
	return err
}

// aclRefusedInScript are the starts of the reply of a script that called
// a command, or touched a key or a channel, its user may not: Redis 6 and
// 7.0 say "ERR The user executing the script can't run this command or
// subcommand" (or "can't access at least one of the keys ..."), Redis 7.2
// and later "ERR ACL failure in script: ...".
var aclRefusedInScript = []string{"ERR The user executing the script can't", "ERR ACL failure in script"}

// publishRefused reports whether err is the reply of a script that did
// every write of its state change but whose PUBLISH of a wake message the
// server refused (see lua/lib.lua): the script's own reply was replaced,
// and the waiter it meant to wake learns of its grant at its next poll.
func publishRefused(err error) bool {
	return replyStarts(err, "NOPERM fairlock: state changed")
}

// replyStarts reports whether err is an error reply from the server that
// starts with one of prefixes.
func replyStarts(err error, prefixes ...string) bool {
	msg, ok := serverReply(err)
	if !ok {
		return false
	}
	for _, p := range prefixes {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

// redisError reports whether err is an error reply from the server (a
// script error, WRONGTYPE, NOSCRIPT left unresolved, ...), as opposed to a
// network or client error that may pass.
func redisError(err error) bool {
	_, ok := serverReply(err)
	return ok
}

// transient reports whether err is an error reply that a retry may get
// past: the server is loading its data set, busy with a script, in the
// middle of a failover or of a slot migration, no longer the primary, no
// longer the master of the key's slot (a MOVED or ASK that the client
// library stopped following after its redirect limit: the script did not
// run, and the next call goes where the reloaded slot map says), or full
// (OOM: at its maxmemory, it refuses what would add to a lock, a fresh
// grant or a waiter joining the line, until memory is freed; see
// lua/lib.lua). A waiting Lock keeps its place through these, as through
// network errors.
func transient(err error) bool {
	return replyStarts(err, "LOADING", "BUSY", "TRYAGAIN", "CLUSTERDOWN", "MASTERDOWN", "READONLY", "NOREPLICAS",
		"MOVED", "ASK", "OOM")
}
