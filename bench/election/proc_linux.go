package main

import (
	"os"
	"os/exec"
	"syscall"
)

// configureChild puts a server or worker the benchmark starts in a process
// group of its own, so that killChild ends whatever it forked too, and
// has Linux kill it when the benchmark dies, so that none outlives it.
func configureChild(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// killChild sends SIGKILL to the process group of p.
func killChild(p *os.Process) {
	if err := syscall.Kill(-p.Pid, syscall.SIGKILL); err != nil {
		_ = p.Kill()
	}
}
