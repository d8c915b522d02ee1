// Modproxy writes a Go module proxy into a directory, for GOPROXY=file://...,
// that serves every module of a source tree at one version, as the tags of
// a release would serve them: the module at the root of the tree, and each
// module nested in it (a directory with a go.mod of its own).
//
//	go run ./internal/modproxy -version v0.1.0 -out DIR .
//
// For each module it writes, under the module's escaped path, the files the
// go command reads from a proxy: @v/list (the version), @v/VERSION.info,
// @v/VERSION.mod (the module's go.mod) and @v/VERSION.zip. The zip holds
// the module's files, each named module@version/path, without the nested
// modules' directories, the version-control directories (.git, .hg, .svn,
// .bzr), vendor directories and anything that is not a regular file; in a
// git work tree, only the files a commit would hold (tracked, or new and
// not ignored), as they are in the work tree.
//
// .ci/outside builds a program outside the repository against such a
// proxy, to check that the modules resolve for a user of a release.
package main

import (
	"flag"
	"fmt"
	"os"
	"time"
)

func main() {
	version := flag.String("version", "", "the version to serve every module at, e.g. v0.1.0")
	out := flag.String("out", "", "the proxy's directory (created if missing)")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: modproxy -version vX.Y.Z -out DIR [TREE]\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	tree := "."
	switch flag.NArg() {
	case 0:
	case 1:
		tree = flag.Arg(0)
	default:
		flag.Usage()
		os.Exit(2)
	}
	if *out == "" {
		fmt.Fprintln(os.Stderr, "modproxy: -out is required")
		os.Exit(2)
	}
	served, err := write(tree, *out, *version, time.Now().UTC().Truncate(time.Second))
	if err != nil {
		fmt.Fprintln(os.Stderr, "modproxy:", err)
		os.Exit(1)
	}
	for _, m := range served {
		fmt.Printf("%s@%s\t%s\n", m.path, *version, m.dir)
	}
}
