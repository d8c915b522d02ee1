//go:build !linux

package redistest

import (
	"os"
	"os/exec"
)

func configure(*exec.Cmd) {}

func killProcess(p *os.Process) { _ = p.Kill() }
