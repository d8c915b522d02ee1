package redistest

import (
	"os/exec"
	"testing"

	"github.com/stretchr/testify/require"
)

// A server whose port another server answers on (it lost the port between
// the check that it was free and its start, and is exiting) fails to
// start, so that the caller tries another port. Taking the other server
// for its own made two nodes of a cluster one: a master with the slots and
// replicas of two, which no balancing could fix.
func TestLaunchFailsWhenAnotherServerAnswersOnItsPort(t *testing.T) {
	t.Parallel()
	other, err := Start()
	require.NoError(t, err)
	t.Cleanup(other.Stop)
	// A process that never answers stands for the server that has not
	// exited yet, so that only the other server can answer.
	sleep, err := exec.LookPath("sleep")
	require.NoError(t, err)
	s := &Server{Addr: other.Addr, port: other.port, args: []string{sleep, "60"}}
	t.Cleanup(s.kill)

	require.ErrorContains(t, s.launch(), "taken by another server")
	select {
	case <-s.exit:
	default:
		t.Fatal("launch left its process running")
	}
	pid, err := processID(other.Addr)
	require.NoError(t, err)
	require.Equal(t, other.cmd.Process.Pid, pid, "the other server still answers")
}
