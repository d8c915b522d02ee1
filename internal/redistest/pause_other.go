//go:build !unix

package redistest

import "errors"

// errNoSignals: stopping a process needs SIGSTOP and SIGCONT.
var errNoSignals = errors.New("redistest: suspending a server needs a Unix system")

// Suspend would stop the server until Resume; it needs a Unix system.
func (s *Server) Suspend() error { return errNoSignals }

// Resume would let a suspended server go on; it needs a Unix system.
func (s *Server) Resume() error { return errNoSignals }
