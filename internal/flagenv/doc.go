// Package flagenv binds command-line flags to TURNPIKE_* environment
// variables: the environment sets a flag's default, and a flag given on the
// command line wins.
//
// A Set is used from one goroutine while a command starts.
package flagenv
