//go:build !linux

package main

import (
	"os"
	"os/exec"
)

// configureChild does nothing where the process cannot be tied to the
// benchmark's life.
func configureChild(*exec.Cmd) {}

// killChild sends SIGKILL to p (os.Process.Kill).
func killChild(p *os.Process) { _ = p.Kill() }
