package flagenv_test

import (
	"errors"
	"flag"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/turnpike-dev/turnpike/internal/flagenv"
)

// env is a fake environment; lookups never touch the process environment,
// so the tests can run in parallel.
func env(kv map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := kv[k]
		return v, ok
	}
}

type config struct {
	addr    string
	n       int
	delay   time.Duration
	verbose bool
	brokers []string
}

func bind(s *flagenv.Set, c *config) {
	s.String(&c.addr, "addr", "TURNPIKE_ADDR", ":8080", "listen address")
	s.Int(&c.n, "n", "TURNPIKE_N", 5, "a number")
	s.Duration(&c.delay, "delay", "TURNPIKE_DELAY", 20*time.Millisecond, "a delay")
	s.Bool(&c.verbose, "verbose", "TURNPIKE_VERBOSE", false, "verbose output")
	s.List(&c.brokers, "brokers", "TURNPIKE_BROKERS", []string{"localhost:9092"}, "Kafka brokers")
}

func newSet(vars map[string]string) (*flagenv.Set, *config) {
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	s := flagenv.New(fs, env(vars))
	var c config
	bind(s, &c)
	return s, &c
}

func TestEnvironmentAndFlags(t *testing.T) {
	t.Parallel()
	defaults := config{addr: ":8080", n: 5, delay: 20 * time.Millisecond, brokers: []string{"localhost:9092"}}
	allEnv := map[string]string{
		"TURNPIKE_ADDR": ":9000", "TURNPIKE_N": "7", "TURNPIKE_DELAY": "0", "TURNPIKE_VERBOSE": "true",
		"TURNPIKE_BROKERS": "k1:9092, k2:9092",
	}
	tests := []struct {
		name string
		env  map[string]string
		args []string
		want config
	}{
		{"Without environment or flags the code defaults hold.", nil, nil, defaults},
		{"The environment sets every default.", allEnv, nil,
			config{addr: ":9000", n: 7, delay: 0, verbose: true, brokers: []string{"k1:9092", "k2:9092"}}},
		{"A flag wins over the environment.", allEnv,
			[]string{"-addr", ":7000", "-n", "9", "-delay", "1s", "-verbose=false", "-brokers", "x:1"},
			config{addr: ":7000", n: 9, delay: time.Second, verbose: false, brokers: []string{"x:1"}}},
		{"A flag wins over the code default.", nil, []string{"-n=1", "-verbose"},
			config{addr: ":8080", n: 1, delay: 20 * time.Millisecond, verbose: true, brokers: []string{"localhost:9092"}}},
		{"Flags and environment mix per setting.", map[string]string{"TURNPIKE_N": "3"}, []string{"-addr=:1"},
			config{addr: ":1", n: 3, delay: 20 * time.Millisecond, brokers: []string{"localhost:9092"}}},
		{"An empty environment variable counts as unset.", map[string]string{"TURNPIKE_ADDR": "", "TURNPIKE_N": "", "TURNPIKE_BROKERS": ""}, nil, defaults},
		{"An unrelated environment variable changes nothing.", map[string]string{"ADDR": ":1", "TURNPIKE_ADDRESS": ":2"}, nil, defaults},
		{"A list flag given twice keeps the last value.", nil, []string{"-brokers", "a:1", "-brokers", "b:2,c:3"},
			config{addr: ":8080", n: 5, delay: 20 * time.Millisecond, brokers: []string{"b:2", "c:3"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, c := newSet(tt.env)
			if err := s.Parse(tt.args); err != nil {
				t.Fatalf("Parse(%q): %v", tt.args, err)
			}
			if !reflect.DeepEqual(*c, tt.want) {
				t.Fatalf("config = %+v, want %+v", *c, tt.want)
			}
		})
	}
}

func TestParseReportsBadEnvironmentValues(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		env   map[string]string
		args  []string
		wants []string // substrings of the error
	}{
		{"A non-integer is reported with its variable.", map[string]string{"TURNPIKE_N": "seven"}, nil, []string{"TURNPIKE_N", "seven"}},
		{"A duration without a unit is reported.", map[string]string{"TURNPIKE_DELAY": "20"}, nil, []string{"TURNPIKE_DELAY", `"20"`}},
		{"A non-boolean is reported.", map[string]string{"TURNPIKE_VERBOSE": "yes please"}, nil, []string{"TURNPIKE_VERBOSE"}},
		{"Every bad variable is reported at once.", map[string]string{"TURNPIKE_N": "x", "TURNPIKE_DELAY": "y", "TURNPIKE_VERBOSE": "z"}, nil,
			[]string{"TURNPIKE_N", "TURNPIKE_DELAY", "TURNPIKE_VERBOSE"}},
		{"A bad variable is reported even when its flag is given.", map[string]string{"TURNPIKE_N": "x"}, []string{"-n", "3"}, []string{"TURNPIKE_N"}},
		{"A bad variable and a bad flag are reported together.", map[string]string{"TURNPIKE_N": "x"}, []string{"-delay", "soon"},
			[]string{"TURNPIKE_N", "soon"}},
		{"A bad flag alone is reported.", nil, []string{"-n", "many"}, []string{"many"}},
		{"An unknown flag is reported.", nil, []string{"-nope"}, []string{"nope"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, _ := newSet(tt.env)
			err := s.Parse(tt.args)
			if err == nil {
				t.Fatal("Parse = nil, want an error")
			}
			for _, w := range tt.wants {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Parse error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestABadEnvironmentValueLeavesTheCodeDefault(t *testing.T) {
	t.Parallel()
	s, c := newSet(map[string]string{"TURNPIKE_N": "x", "TURNPIKE_DELAY": "y"})
	_ = s.Parse(nil)
	if c.n != 5 || c.delay != 20*time.Millisecond {
		t.Fatalf("n = %d, delay = %v; want the code defaults 5 and 20ms", c.n, c.delay)
	}
}

func TestUsageNamesTheEnvironmentVariable(t *testing.T) {
	t.Parallel()
	s, _ := newSet(nil)
	for name, env := range map[string]string{"addr": "TURNPIKE_ADDR", "n": "TURNPIKE_N", "brokers": "TURNPIKE_BROKERS"} {
		f := s.FlagSet().Lookup(name)
		if f == nil {
			t.Fatalf("flag %s not registered", name)
		}
		if !strings.Contains(f.Usage, env) {
			t.Errorf("usage of -%s = %q, want it to name %s", name, f.Usage, env)
		}
	}
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	var v string
	flagenv.New(fs, env(nil)).String(&v, "plain", "", "d", "no env")
	if u := fs.Lookup("plain").Usage; u != "no env" {
		t.Errorf("usage of a flag without env = %q, want %q", u, "no env")
	}
}

func TestSplitList(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   string
		want []string
	}{
		{"One item is a list of one.", "a:1", []string{"a:1"}},
		{"Items are split on commas.", "a:1,b:2,c:3", []string{"a:1", "b:2", "c:3"}},
		{"Spaces around items are trimmed.", "  a:1 ,\tb:2\n", []string{"a:1", "b:2"}},
		{"Empty items are dropped.", ",a:1,,b:2,", []string{"a:1", "b:2"}},
		{"Blank items are dropped.", "a:1, ,b:2", []string{"a:1", "b:2"}},
		{"The empty string is an empty list.", "", nil},
		{"Only commas make an empty list.", ",,,", nil},
		{"Spaces inside an item are kept.", "a b,c", []string{"a b", "c"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := flagenv.SplitList(tt.in); !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("SplitList(%q) = %#v, want %#v", tt.in, got, tt.want)
			}
		})
	}
}

// Two configurations that share settings bind them on one flag set (the
// devstack: the worker's settings beside ingest's and the push gateway's):
// each shared flag is registered once, and writes both configurations,
// from the first binding's default and environment variable to the value
// given on the command line.
func TestASharedFlagWritesEveryConfigurationThatBindsIt(t *testing.T) {
	t.Parallel()
	allEnv := map[string]string{
		"TURNPIKE_ADDR": ":9000", "TURNPIKE_N": "7", "TURNPIKE_BROKERS": "k1:9092,k2:9092",
	}
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	first := flagenv.New(fs, env(allEnv))
	var a config
	bind(first, &a)
	second := flagenv.New(fs, env(nil)) // another configuration, another lookup
	var b config
	var own string
	bind(second, &b)
	second.String(&own, "own", "TURNPIKE_OWN", "mine", "a setting of the second only")
	if err := second.Err(); err != nil {
		t.Fatalf("binding twice: %v", err)
	}
	want := config{addr: ":9000", n: 7, delay: 20 * time.Millisecond, brokers: []string{"k1:9092", "k2:9092"}}
	if !reflect.DeepEqual(b, want) || !reflect.DeepEqual(a, want) {
		t.Fatalf("before parsing: first %+v, second %+v; want both %+v (the first binding's defaults and environment)", a, b, want)
	}
	if err := first.Parse([]string{"-addr", ":1", "-n=3", "-delay", "1s", "-verbose", "-brokers", "x:1", "-own", "yours"}); err != nil {
		t.Fatal(err)
	}
	want = config{addr: ":1", n: 3, delay: time.Second, verbose: true, brokers: []string{"x:1"}}
	if !reflect.DeepEqual(a, want) || !reflect.DeepEqual(b, want) || own != "yours" {
		t.Fatalf("after parsing: first %+v, second %+v, own %q; want both %+v and yours", a, b, own, want)
	}
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	if n != 6 {
		t.Errorf("%d flags registered, want 6: each shared one once", n)
	}
}

// A setting bound twice with two types is an error of the binding, not a
// panic.
func TestASharedFlagOfAnotherTypeIsReported(t *testing.T) {
	t.Parallel()
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	var s string
	var n int
	flagenv.New(fs, env(nil)).String(&s, "n", "TURNPIKE_N", "x", "a string")
	second := flagenv.New(fs, env(nil))
	second.Int(&n, "n", "TURNPIKE_N", 5, "a number")
	if err := second.Err(); err == nil || !strings.Contains(err.Error(), "-n") {
		t.Fatalf("Err = %v, want the flag named", err)
	}
}

// -h shows a shared flag as any other: its type and its default.
func TestHelpShowsASharedFlagAsAnyOther(t *testing.T) {
	t.Parallel()
	help := func(share bool) string {
		var out strings.Builder
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		fs.SetOutput(&out)
		var a, b config
		bind(flagenv.New(fs, env(nil)), &a)
		if share {
			bind(flagenv.New(fs, env(nil)), &b)
		}
		if err := fs.Parse([]string{"-h"}); !errors.Is(err, flag.ErrHelp) {
			t.Fatalf("-h: %v", err)
		}
		return out.String()
	}
	if alone, shared := help(false), help(true); shared != alone {
		t.Errorf("-h with shared flags:\n%s\nwithout:\n%s", shared, alone)
	}
}
