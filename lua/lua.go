// Package lua holds fairlock's Redis scripts, one file per operation, and
// embeds them. Each operation's source is lib.lua (the helpers every script
// shares) followed by the operation's own file, so that each script is one
// self-contained EVAL body.
//
// The scripts come in two sets that differ only in the command that sends
// wake messages: Classic publishes with PUBLISH, Sharded with SPUBLISH
// (Redis 7 sharded pub/sub, for a Redis Cluster). The sharded sources are
// the classic ones with that one line of lib.lua changed, so the two sets
// can never drift apart; they have different SHA1s, so both can be loaded
// on one server.
//
// It is a building block of fairlock; the fair package runs the scripts.
package lua

import (
	"embed"
	"strings"

	"github.com/redis/go-redis/v9"
)

//go:embed *.lua
var files embed.FS

// Script names, one per operation file.
const (
	Acquire     = "acquire"
	Release     = "release"
	Renew       = "renew"
	Cancel      = "cancel"
	ForceUnlock = "forceunlock"
	// Version is no operation: it answers the server's version
	// (redis.REDIS_VERSION), or nil before Redis 7. It needs none of the
	// helpers.
	Version = "version"
)

// The line of lib.lua that names the publish command, as written and in
// the sharded set.
const (
	classicPublish = "local publish_command = 'PUBLISH'\n"
	shardedPublish = "local publish_command = 'SPUBLISH'\n"
)

// source returns the full source of the named operation script in the
// classic set: lib.lua followed by <name>.lua. It panics on an unknown
// name, which is a programming error inside fairlock, never a runtime
// condition.
func source(name string) string {
	op, err := files.ReadFile(name + ".lua")
	if err != nil {
		panic("lua: unknown script " + name)
	}
	if name == Renew || name == Version {
		// renew touches only the hash and publishes nothing; version
		// touches nothing. Neither needs the helpers.
		return string(op)
	}
	lib, err := files.ReadFile("lib.lua")
	if err != nil {
		panic("lua: lib.lua missing")
	}
	return string(lib) + "\n" + string(op)
}

// shardedSource returns the source of the named operation script in the
// sharded set: source(name) with wake messages sent by SPUBLISH. Scripts
// that publish nothing are the same in both sets.
func shardedSource(name string) string {
	src := source(name)
	if !strings.Contains(src, "redis.pcall(publish_command") {
		return src
	}
	if strings.Count(src, classicPublish) != 1 {
		panic("lua: lib.lua must name the publish command on exactly one line: " + strings.TrimSpace(classicPublish))
	}
	return strings.Replace(src, classicPublish, shardedPublish, 1)
}

// Scripts is one set of the operation scripts, ready to run: redis.Script
// sends EVALSHA and falls back to EVAL when the server does not know the
// script (first use, SCRIPT FLUSH, a restart).
type Scripts struct {
	// Command is the command the set's scripts send wake messages with:
	// "PUBLISH" or "SPUBLISH".
	Command     string
	Acquire     *redis.Script
	Release     *redis.Script
	Renew       *redis.Script
	Cancel      *redis.Script
	ForceUnlock *redis.Script
}

func newScripts(command string, source func(string) string) *Scripts {
	return &Scripts{
		Command:     command,
		Acquire:     redis.NewScript(source(Acquire)),
		Release:     redis.NewScript(source(Release)),
		Renew:       redis.NewScript(source(Renew)),
		Cancel:      redis.NewScript(source(Cancel)),
		ForceUnlock: redis.NewScript(source(ForceUnlock)),
	}
}

// The two sets. Classic publishes with PUBLISH, which reaches subscribers
// on every node of a deployment (a Redis Cluster broadcasts it over its
// bus); Sharded publishes with SPUBLISH, which reaches only subscribers on
// the nodes that serve the channel's slot (SSUBSCRIBE). Every fairlock
// Client of one deployment must run the same set.
var (
	Classic = newScripts("PUBLISH", source)
	Sharded = newScripts("SPUBLISH", shardedSource)
)

// The classic set's scripts, by name, and the version probe.
var (
	AcquireScript     = Classic.Acquire
	ReleaseScript     = Classic.Release
	RenewScript       = Classic.Renew
	CancelScript      = Classic.Cancel
	ForceUnlockScript = Classic.ForceUnlock
	VersionScript     = redis.NewScript(source(Version))
)
