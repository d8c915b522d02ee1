// Package lua is fairlock's script protocol: the Redis scripts, one file
// per operation, embedded, and their Go bindings, which build each call's
// KEYS and ARGV and read its reply. What each script does is written
// once more in plain Go as the reference model of package queue, whose
// types (Keys, Reply, the acquire modes) the bindings use; queue's tests
// run these bindings against the model.
//
// Each operation's source is lib.lua (the helpers every script shares),
// for a quorum lock's scripts qlib.lua, and the operation's own file, so
// that each script is one self-contained EVAL body. On Redis 7 and later
// the same files are loaded once as a function library (library.go), in
// which the helpers are defined at the load instead of at every call, and
// each operation is a function called with FCALL; a Runner (run.go)
// sends each call that way, and by EVALSHA where the server or the user
// cannot run functions.
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
	proclaimName     = "proclaim"
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
	// layoutName reads, or writes once, the layout version of a prefix's
	// keys. It needs none of the helpers either.
	layoutName = "layout"
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
	if !onLib(name) {
		return string(op)
	}
	return helpers(name) + "begin()\n" + string(op)
}

// onLib reports whether the named operation is built on lib.lua. renew
// and qrenew touch only the hash (and read the counter) and publish
// nothing; version and layout read one key at most. None needs the
// helpers, and none is in the function library.
func onLib(name string) bool {
	return name != renewName && name != versionName && name != qRenewName && name != layoutName
}

// helpers returns the helpers the named operation is built on: lib.lua,
// and for a quorum lock's scripts qlib.lua, which the scripts of a lock of
// one server do not carry.
func helpers(name string) string {
	lib := embedded("lib.lua")
	if strings.HasPrefix(name, "q") {
		return lib + "\n" + embedded("qlib.lua") + "\n"
	}
	return lib + "\n"
}

// embedded returns one of the embedded files. A missing one is a
// programming error inside fairlock.
func embedded(file string) string {
	b, err := files.ReadFile(file)
	if err != nil {
		panic("lua: " + file + " missing")
	}
	return string(b)
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
// calls of the scripts that publish, and of the scripts built on lib.lua,
// which the set's function library holds.
type Scripts struct {
	// Command is the command the set's scripts send wake messages with:
	// "PUBLISH" or "SPUBLISH".
	Command string
	// Library is the set's function library: every operation built on
	// lib.lua, as a function.
	Library      *Library
	acquire      *op
	release      *op
	cancel       *op
	forceUnlock  *op
	multiAcquire *op
	proclaim     *op
	wAcquire     *op
	wRelease     *op
	wCancel      *op
	wResize      *op
	wForce       *op
	wRenew       *op
	qTry         *op
	qJoin        *op
	qCancel      *op
	qRelease     *op
	qForce       *op
	qCommit      *op
}

// libraryOps are the operations built on lib.lua, in the order the
// library defines them.
var libraryOps = []string{acquireName, releaseName, cancelName, forceUnlockName, multiAcquireName, proclaimName,
	wAcquireName, wReleaseName, wCancelName, wResizeName, wForceName, wRenewName,
	qTryName, qJoinName, qCancelName, qReleaseName, qForceName, qCommitName}

func newScripts(command string, source func(string) string, publish string) *Scripts {
	lib := newLibrary(publish)
	o := func(name string) *op {
		return &op{script: redis.NewScript(source(name)), fn: lib.function(name), lib: lib}
	}
	return &Scripts{
		Command:      command,
		Library:      lib,
		acquire:      o(acquireName),
		release:      o(releaseName),
		cancel:       o(cancelName),
		forceUnlock:  o(forceUnlockName),
		multiAcquire: o(multiAcquireName),
		proclaim:     o(proclaimName),
		wAcquire:     o(wAcquireName),
		wRelease:     o(wReleaseName),
		wCancel:      o(wCancelName),
		wResize:      o(wResizeName),
		wForce:       o(wForceName),
		wRenew:       o(wRenewName),
		qTry:         o(qTryName),
		qJoin:        o(qJoinName),
		qCancel:      o(qCancelName),
		qRelease:     o(qReleaseName),
		qForce:       o(qForceName),
		qCommit:      o(qCommitName),
	}
}

// The two sets. Classic publishes with PUBLISH, which reaches subscribers
// on every node of a deployment (a Redis Cluster broadcasts it over its
// bus); Sharded publishes with SPUBLISH, which reaches only subscribers on
// the nodes that serve the channel's slot (SSUBSCRIBE). Every fairlock
// Client of one deployment must run the same set.
var (
	Classic = newScripts("PUBLISH", source, classicPublish)
	Sharded = newScripts("SPUBLISH", shardedSource, shardedPublish)
)

// The scripts that are not built on lib.lua, the same in both sets and in
// neither library.
var (
	renewScript   = &op{script: redis.NewScript(source(renewName))}
	versionScript = &op{script: redis.NewScript(source(versionName))}
	qRenewScript  = &op{script: redis.NewScript(source(qRenewName))}
	layoutScript  = &op{script: redis.NewScript(source(layoutName))}
)

// Version is version.lua: it answers the server's version as the scripts
// see it. Read its reply with ReadVersion.
func Version() Call { return versionScript.call(nil, nil) }

// Layout is layout.lua: the layout version of the keys under the prefix
// whose layout key is key (queue.LayoutKey), written as version when it
// holds none. Read its reply with ReadLayout.
func Layout(key, version string) Call {
	return layoutScript.call([]string{key}, []any{version})
}

// ReadLayout reads the reply of a Layout call: the version the key holds.
func ReadLayout(cmd *redis.Cmd) (string, error) { return cmd.Text() }

// ReadVersion reads the reply of a Version call: the version, or "" from
// a server before Redis 7, which does not tell its scripts.
func ReadVersion(cmd *redis.Cmd) (string, error) {
	v, err := cmd.Text()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	return v, err
}
