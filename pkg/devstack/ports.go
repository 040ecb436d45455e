package devstack

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"syscall"
)

// port is one address the devstack listens on, and the variable that moves it.
type port struct {
	env, addr string
	keep      *net.Listener // nil: probed and closed again (the part listens itself)
}

// listenAll listens on every port at once, so that all conflicts are
// reported together, each naming the TURNPIKE_*_ADDR variable to change.
// Listeners that are kept are stored through keep; the others are closed
// at once, for their part (the embedded broker and store, pprof) to open.
// On an error every listener is closed.
func listenAll(ports []port) error {
	var problems []string
	var opened []net.Listener
	for _, p := range ports {
		ln, err := net.Listen("tcp", p.addr)
		if err != nil {
			problems = append(problems, portProblem(p, err))
			continue
		}
		if p.keep != nil {
			*p.keep = ln
			opened = append(opened, ln)
		} else {
			ln.Close()
		}
	}
	if len(problems) == 0 {
		return nil
	}
	for _, ln := range opened {
		ln.Close()
	}
	for _, p := range ports {
		if p.keep != nil {
			*p.keep = nil
		}
	}
	return fmt.Errorf("cannot listen: %s", strings.Join(problems, "; "))
}

// portProblem says what is wrong with one port and how to fix it.
func portProblem(p port, err error) string {
	if errors.Is(err, syscall.EADDRINUSE) {
		return fmt.Sprintf("%s=%s is already in use (another devstack?): set %s to a free address", p.env, p.addr, p.env)
	}
	return fmt.Sprintf("%s=%s: %v", p.env, p.addr, err)
}
