// Package lua holds fairlock's Redis scripts, one file per operation, and
// embeds them. Each operation's source is lib.lua (the helpers every script
// shares) followed by the operation's own file, so that each script is one
// self-contained EVAL body.
//
// It is a building block of fairlock; the fair package runs the scripts.
package lua

import (
	"embed"

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
)

// Source returns the full source of the named operation script: lib.lua
// followed by <name>.lua. It panics on an unknown name, which is a
// programming error inside fairlock, never a runtime condition.
func Source(name string) string {
	op, err := files.ReadFile(name + ".lua")
	if err != nil {
		panic("lua: unknown script " + name)
	}
	if name == Renew {
		// renew touches only the hash and needs none of the helpers.
		return string(op)
	}
	lib, err := files.ReadFile("lib.lua")
	if err != nil {
		panic("lua: lib.lua missing")
	}
	return string(lib) + "\n" + string(op)
}

// The scripts, ready to run: redis.Script sends EVALSHA and falls back to
// EVAL when the server does not know the script (first use, SCRIPT FLUSH,
// a restart).
var (
	AcquireScript     = redis.NewScript(Source(Acquire))
	ReleaseScript     = redis.NewScript(Source(Release))
	RenewScript       = redis.NewScript(Source(Renew))
	CancelScript      = redis.NewScript(Source(Cancel))
	ForceUnlockScript = redis.NewScript(Source(ForceUnlock))
)
