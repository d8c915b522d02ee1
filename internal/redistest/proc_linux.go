package redistest

import (
	"os"
	"os/exec"
	"syscall"
)

// configure puts the server in a process group of its own, so that kill
// also ends the children it forks (replication and snapshot children), and
// has Linux kill it when the test binary dies (a panic, a -timeout), so
// that no server outlives the tests.
func configure(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// killProcess sends SIGKILL to the process group of p.
func killProcess(p *os.Process) {
	if err := syscall.Kill(-p.Pid, syscall.SIGKILL); err != nil {
		_ = p.Kill()
	}
}
