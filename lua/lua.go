// Package lua is fairlock's script protocol: the Redis scripts, one file
// per operation, embedded, and their Go bindings, which build each call's
// KEYS and ARGV and read its reply. What each script does is written
// once more in plain Go as the reference model of package queue, whose
// types (Keys, Reply, the acquire modes) the bindings use; queue's tests
// run these bindings against the model.
//
// Each operation's source is lib.lua (the helpers every script shares),
// for a quorum lock's scripts qlib.lua, and the operation's own file, so
// that each script is one self-contained EVAL body.
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
	"errors"
	"strings"

	"github.com/redis/go-redis/v9"
)

//go:embed *.lua
var files embed.FS

// Script names, one per operation file.
const (
	acquireName      = "acquire"
	releaseName      = "release"
	renewName        = "renew"
	cancelName       = "cancel"
	forceUnlockName  = "forceunlock"
	multiAcquireName = "multiacquire"
	// The scripts of weighted locks (a Semaphore, a RWMutex).
	wAcquireName = "wacquire"
	wReleaseName = "wrelease"
	wCancelName  = "wcancel"
	wResizeName  = "wresize"
	wForceName   = "wforce"
	wRenewName   = "wrenew"
	// The scripts of a quorum lock, run on each of its masters.
	qTryName     = "qtry"
	qJoinName    = "qjoin"
	qCancelName  = "qcancel"
	qReleaseName = "qrelease"
	qRenewName   = "qrenew"
	qCommitName  = "qcommit"
	qForceName   = "qforce"
	// versionName is no operation: it answers the server's version
	// (redis.REDIS_VERSION), or nil before Redis 7. It needs none of the
	// helpers.
	versionName = "version"
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
	if name == renewName || name == versionName || name == qRenewName {
		// renew and qrenew touch only the hash (and read the counter)
		// and publish nothing; version touches nothing. None needs the
		// helpers.
		return string(op)
	}
	lib, err := files.ReadFile("lib.lua")
	if err != nil {
		panic("lua: lib.lua missing")
	}
	if strings.HasPrefix(name, "q") {
		// A quorum lock's scripts have helpers of their own, which the
		// scripts of a lock of one server do not carry.
		qlib, err := files.ReadFile("qlib.lua")
		if err != nil {
			panic("lua: qlib.lua missing")
		}
		return string(lib) + "\n" + string(qlib) + "\n" + string(op)
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

// Scripts is one set of the operation scripts; its methods build the
// calls of the scripts that publish.
type Scripts struct {
	// Command is the command the set's scripts send wake messages with:
	// "PUBLISH" or "SPUBLISH".
	Command      string
	acquire      *redis.Script
	release      *redis.Script
	cancel       *redis.Script
	forceUnlock  *redis.Script
	multiAcquire *redis.Script
	wAcquire     *redis.Script
	wRelease     *redis.Script
	wCancel      *redis.Script
	wResize      *redis.Script
	wForce       *redis.Script
	qTry         *redis.Script
	qJoin        *redis.Script
	qCancel      *redis.Script
	qRelease     *redis.Script
	qForce       *redis.Script
}

func newScripts(command string, source func(string) string) *Scripts {
	return &Scripts{
		Command:      command,
		acquire:      redis.NewScript(source(acquireName)),
		release:      redis.NewScript(source(releaseName)),
		cancel:       redis.NewScript(source(cancelName)),
		forceUnlock:  redis.NewScript(source(forceUnlockName)),
		multiAcquire: redis.NewScript(source(multiAcquireName)),
		wAcquire:     redis.NewScript(source(wAcquireName)),
		wRelease:     redis.NewScript(source(wReleaseName)),
		wCancel:      redis.NewScript(source(wCancelName)),
		wResize:      redis.NewScript(source(wResizeName)),
		wForce:       redis.NewScript(source(wForceName)),
		qTry:         redis.NewScript(source(qTryName)),
		qJoin:        redis.NewScript(source(qJoinName)),
		qCancel:      redis.NewScript(source(qCancelName)),
		qRelease:     redis.NewScript(source(qReleaseName)),
		qForce:       redis.NewScript(source(qForceName)),
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

// The scripts that are the same in both sets: wrenew publishes nothing,
// so its classic source serves a Cluster too.
var (
	renewScript   = redis.NewScript(source(renewName))
	wRenewScript  = redis.NewScript(source(wRenewName))
	versionScript = redis.NewScript(source(versionName))
	qRenewScript  = redis.NewScript(source(qRenewName))
	qCommitScript = redis.NewScript(source(qCommitName))
)

// Version is version.lua: it answers the server's version as the scripts
// see it. Read its reply with ReadVersion.
func Version() Call { return Call{Script: versionScript} }

// ReadVersion reads the reply of a Version call: the version, or "" from
// a server before Redis 7, which does not tell its scripts.
func ReadVersion(cmd *redis.Cmd) (string, error) {
	v, err := cmd.Text()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	return v, err
}
