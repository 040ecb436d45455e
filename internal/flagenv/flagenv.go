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
//
// A flag already registered on the flag set (by another Set over the same
// flag set: another configuration binding a setting they share) is not
// registered twice: the new destination joins it. It starts with the
// flag's value so far (the first binding's default and environment
// variable) and receives every value the flag is set to. Both bindings
// must have the same type.
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
	if attach(s, p, name) {
		return
	}
	if v, ok := s.env(env); ok {
		def = v
	}
	s.fs.StringVar(p, name, def, usage(u, env))
}

// Int binds an int flag.
func (s *Set) Int(p *int, name, env string, def int, u string) {
	if attach(s, p, name) {
		return
	}
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
	if attach(s, p, name) {
		return
	}
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
	if attach(s, p, name) {
		return
	}
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
	if attach(s, p, name) {
		return
	}
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
	if attach(s, p, name) {
		return
	}
	if v, ok := s.env(env); ok {
		def = SplitList(v)
	}
	*p = def
	s.fs.Var(listValue{p}, name, usage(u+" (comma-separated)", env))
}

// listValue is a List flag. Its String is empty, as a flag.Func's is, so
// that -h shows no default for it.
type listValue struct{ p *[]string }

func (v listValue) String() string { return "" }

func (v listValue) Set(s string) error {
	*v.p = SplitList(s)
	return nil
}

func (v listValue) Get() any { return *v.p }

// attach joins p to the flag name if the flag set has it already, and
// reports whether it did (a type mismatch is reported by Parse).
func attach[T any](s *Set, p *T, name string) bool {
	f := s.fs.Lookup(name)
	if f == nil {
		return false
	}
	g, ok := f.Value.(flag.Getter)
	var cur T
	if ok {
		cur, ok = g.Get().(T)
	}
	if !ok {
		s.errs = append(s.errs, fmt.Errorf("flag -%s is bound twice with different types (a %T and a %T)", name, f.Value, p))
		return true
	}
	*p = cur
	sh, isShared := f.Value.(*shared)
	if !isShared {
		if !hasShared(s.fs) {
			// The first shared flag: -h shows the shared flags as their
			// first binding's values, so that it names their types
			// (string, int, duration…) as for any other flag.
			fs, usage := s.fs, s.fs.Usage
			if usage == nil { // a FlagSet's zero value: flag's default usage
				usage = func() {
					fmt.Fprintf(fs.Output(), "Usage of %s:\n", fs.Name())
					fs.PrintDefaults()
				}
			}
			fs.Usage = func() { withFirstBindings(fs, usage) }
		}
		sh = &shared{Getter: g}
		f.Value = sh
	}
	sh.copies = append(sh.copies, func() { *p = sh.Getter.Get().(T) })
	return true
}

// shared is a flag bound by several configurations: Set sets the first
// binding's value and copies it to the others.
type shared struct {
	flag.Getter // the first binding's
	copies      []func()
}

func (v *shared) Set(s string) error {
	if err := v.Getter.Set(s); err != nil {
		return err
	}
	for _, c := range v.copies {
		c()
	}
	return nil
}

// IsBoolFlag lets a shared boolean flag be given without a value.
func (v *shared) IsBoolFlag() bool {
	b, ok := v.Getter.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// String is the first binding's value ("" for the zero shared, which
// flag's PrintDefaults makes to compare a default with).
func (v *shared) String() string {
	if v == nil || v.Getter == nil {
		return ""
	}
	return v.Getter.String()
}

// hasShared reports whether fs has a shared flag.
func hasShared(fs *flag.FlagSet) bool {
	found := false
	fs.VisitAll(func(f *flag.Flag) {
		if _, ok := f.Value.(*shared); ok {
			found = true
		}
	})
	return found
}

// withFirstBindings calls usage with every shared flag of fs showing its
// first binding's value instead.
func withFirstBindings(fs *flag.FlagSet, usage func()) {
	var restore []func()
	fs.VisitAll(func(f *flag.Flag) {
		if sh, ok := f.Value.(*shared); ok {
			f.Value = sh.Getter
			restore = append(restore, func() { f.Value = sh })
		}
	})
	defer func() {
		for _, r := range restore {
			r()
		}
	}()
	usage()
}

// Lookup returns the environment lookup the Set was made with.
func (s *Set) Lookup() func(string) (string, bool) { return s.lookup }

// Fail records err, which Parse and Err report: a binding that failed
// elsewhere (another Set over the same flag set).
func (s *Set) Fail(err error) {
	if err != nil {
		s.errs = append(s.errs, err)
	}
}

// Err reports the environment values and bindings that were refused so
// far (Parse reports them too), for a Set whose flag set someone else
// parses.
func (s *Set) Err() error { return errors.Join(s.errs...) }

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
