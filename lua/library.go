package lua

import (
	"crypto/sha1"
	"encoding/hex"
	"strings"

	"github.com/redis/go-redis/v9"
)

// A Library is one set of scripts as a Redis function library (Redis 7
// and later): lib.lua and qlib.lua once, then each operation built on
// them as a function. Loaded once per server (FUNCTION LOAD), it spares
// every call the definition of the helpers, which an EVAL of a script
// repeats at each run: about half of a call's time on the server (see
// BenchmarkLibraryCost).
//
// Its name holds the SHA1 of its text, as do its functions' names, so
// that two versions of fairlock, or the classic and the sharded set, can
// be loaded on one server side by side, and a function name always means
// one text: "fairlock_<12 hex digits>", and "<library>_<operation>".
//
// The functions have no flags: Redis refuses to start one on a server at
// its maxmemory, or on a replica. The first is no loss: a Runner sends a
// call refused for memory again as an EVAL, whose writes Redis refuses
// one by one, as lib.lua relies on (see allow_full).
type Library struct {
	// Name is the library's name, from its shebang line.
	Name string
	// Source is the text FUNCTION LOAD takes.
	Source string
}

// function returns the name of the library's function of the named
// operation, or "" when the operation is not in the library.
func (l *Library) function(name string) string {
	if !onLib(name) {
		return ""
	}
	return l.Name + "_" + name
}

// libraryName stands for the library's name in its text until the text is
// complete, whose SHA1 then names it.
const libraryName = "@library@"

// newLibrary builds the library of the set whose lib.lua names its publish
// command on the line publish.
func newLibrary(publish string) *Library {
	var b strings.Builder
	b.WriteString("#!lua name=" + libraryName + "\n")
	b.WriteString("-- fairlock's scripts as a function library: the helpers once, each\n")
	b.WriteString("-- operation as a function. KEYS and ARGV are the call's, as in an EVAL.\n")
	b.WriteString("local KEYS, ARGV = nil, nil\n")
	lib := embedded("lib.lua")
	if publish != classicPublish {
		lib = strings.Replace(lib, classicPublish, publish, 1)
	}
	b.WriteString(lib + "\n")
	b.WriteString(embedded("qlib.lua") + "\n")
	for _, name := range libraryOps {
		b.WriteString("local function op_" + name + "()\n" + embedded(name+".lua") + "\nend\n\n")
	}
	b.WriteString("local function entry(op)\n" +
		"  return function(keys, args)\n" +
		"    KEYS, ARGV = keys, args\n" +
		"    begin()\n" +
		"    return op()\n" +
		"  end\nend\n")
	for _, name := range libraryOps {
		b.WriteString("redis.register_function('" + libraryName + "_" + name + "', entry(op_" + name + "))\n")
	}
	text := b.String()
	sum := sha1.Sum([]byte(text))
	name := "fairlock_" + hex.EncodeToString(sum[:])[:12]
	return &Library{Name: name, Source: strings.ReplaceAll(text, libraryName, name)}
}

// An op is one operation of a set: its script, and, for an operation built
// on lib.lua, its function in the set's library.
type op struct {
	script *redis.Script
	fn     string // "" for an operation outside the library
	lib    *Library
}

// call returns a call of the operation with keys and args.
func (o *op) call(keys []string, args []any) Call {
	return Call{Script: o.script, Function: o.fn, Library: o.lib, Keys: keys, Args: args}
}
