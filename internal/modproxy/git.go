package main

import (
	"bytes"
	"fmt"
	"os/exec"
	"path/filepath"
)

// gitFiles returns the files a commit of the git work tree at root would
// hold, tracked or new but not ignored, as clean paths under root, so that
// a build's output or a test binary the work tree ignores is served as a
// tag would serve it: not at all. It returns nil when root is not in a
// git work tree or git is not installed: then every file counts.
func gitFiles(root string) (map[string]bool, error) {
	git, err := exec.LookPath("git")
	if err != nil {
		return nil, nil
	}
	if exec.Command(git, "-C", root, "rev-parse", "--is-inside-work-tree").Run() != nil {
		return nil, nil
	}
	cmd := exec.Command(git, "-C", root, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git ls-files in %s: %w: %s", root, err, bytes.TrimSpace(stderr.Bytes()))
	}
	keep := map[string]bool{}
	for _, name := range bytes.Split(out, []byte{0}) {
		if len(name) > 0 {
			keep[filepath.Join(root, filepath.FromSlash(string(name)))] = true
		}
	}
	return keep, nil
}
