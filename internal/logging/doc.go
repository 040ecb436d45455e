// Package logging builds the services' structured logger from the
// TURNPIKE_LOG_LEVEL and TURNPIKE_LOG_FORMAT settings. It imports no
// package of pkg/, so that every public package may use it. Its functions
// are safe for concurrent use.
package logging
