package flagenv

import (
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Set registers flags on a flag.FlagSet with defaults from the environment.
type Set struct {
	fs     *flag.FlagSet
	lookup func(string) (string, bool)
	errs   []error
}

// New returns a Set registering on fs; lookup is usually os.LookupEnv.
func New(fs *flag.FlagSet, lookup func(string) (string, bool)) *Set {
	return &Set{fs: fs, lookup: lookup}
}

// FlagSet returns the underlying flag set.
func (s *Set) FlagSet() *flag.FlagSet { return s.fs }

func (s *Set) env(name string) (string, bool) {
	if name == "" {
		return "", false
	}
	v, ok := s.lookup(name)
	return v, ok && v != ""
}

func usage(u, env string) string {
	if env == "" {
		return u
	}
	return u + " (env " + env + ")"
}

// String binds a string flag.
func (s *Set) String(p *string, name, env, def, u string) {
	if v, ok := s.env(env); ok {
		def = v
	}
	s.fs.StringVar(p, name, def, usage(u, env))
}

// Int binds an int flag.
func (s *Set) Int(p *int, name, env string, def int, u string) {
	if v, ok := s.env(env); ok {
		n, err := strconv.Atoi(v)
		if err != nil {
			s.errs = append(s.errs, fmt.Errorf("%s=%q: not an integer", env, v))
		} else {
			def = n
		}
	}
	s.fs.IntVar(p, name, def, usage(u, env))
}

// Float binds a float64 flag.
func (s *Set) Float(p *float64, name, env string, def float64, u string) {
	if v, ok := s.env(env); ok {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			s.errs = append(s.errs, fmt.Errorf("%s=%q: not a number", env, v))
		} else {
			def = f
		}
	}
	s.fs.Float64Var(p, name, def, usage(u, env))
}

// Duration binds a duration flag (Go syntax: 20ms, 5s).
func (s *Set) Duration(p *time.Duration, name, env string, def time.Duration, u string) {
	if v, ok := s.env(env); ok {
		d, err := time.ParseDuration(v)
		if err != nil {
			s.errs = append(s.errs, fmt.Errorf("%s=%q: not a duration", env, v))
		} else {
			def = d
		}
	}
	s.fs.DurationVar(p, name, def, usage(u, env))
}

// Bool binds a boolean flag.
func (s *Set) Bool(p *bool, name, env string, def bool, u string) {
	if v, ok := s.env(env); ok {
		b, err := strconv.ParseBool(v)
		if err != nil {
			s.errs = append(s.errs, fmt.Errorf("%s=%q: not a boolean", env, v))
		} else {
			def = b
		}
	}
	s.fs.BoolVar(p, name, def, usage(u, env))
}

// List binds a comma-separated list flag; empty items are dropped.
func (s *Set) List(p *[]string, name, env string, def []string, u string) {
	if v, ok := s.env(env); ok {
		def = SplitList(v)
	}
	*p = def
	s.fs.Func(name, usage(u+" (comma-separated)", env), func(v string) error {
		*p = SplitList(v)
		return nil
	})
}

// Parse parses args and reports environment and flag errors together.
func (s *Set) Parse(args []string) error {
	err := s.fs.Parse(args)
	return errors.Join(append(s.errs, err)...)
}

// SplitList splits a comma-separated list, trimming spaces and dropping
// empty items.
func SplitList(v string) []string {
	var out []string
	for _, item := range strings.Split(v, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}
