package worker

import (
	"bytes"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cloudwego/eino/adk"

	"github.com/turnpike-dev/turnpike/internal/flagenv"
)

func noEnv(string) (string, bool) { return "", false }

func envOf(kv map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := kv[k]; return v, ok }
}

// The environment and flags reach their fields.
func TestLoadConfigNamesTheEnvironment(t *testing.T) {
	t.Parallel()
	env := map[string]string{"TURNPIKE_KAFKA_BROKERS": "k:1", "TURNPIKE_MONGO_URI": "mongodb://m", "TURNPIKE_COMPACT_TOKENS": "900",
		"TURNPIKE_WORKER_GROUP": "g", "TURNPIKE_MAX_ATTEMPTS": "9", "TURNPIKE_HISTORY_V1": "true"}
	c, err := LoadConfig([]string{"-window", "7"}, envOf(env))
	if err != nil {
		t.Fatal(err)
	}
	if c.Brokers[0] != "k:1" || c.MongoURI != "mongodb://m" || c.CompactTokens != 900 || c.GroupID != "g" || c.MaxAttempts != 9 || c.WindowMessages != 7 || !c.HistoryV1 {
		t.Errorf("%+v", c)
	}
	if err := c.Validate(); err != nil {
		t.Error(err)
	}
	c.Ordering = "random"
	if c.Validate() == nil {
		t.Error("Validate accepted Ordering random")
	}
}

// DefaultConfig is what cmd/worker reads without flags or environment,
// and the flags' defaults are DefaultConfig's.
func TestDefaultConfigIsTheCommandLinesDefaults(t *testing.T) {
	t.Parallel()
	for _, goAgent := range []bool{false, true} {
		c, err := loadConfig(nil, noEnv, io.Discard, goAgent)
		if err != nil {
			t.Fatal(err)
		}
		if want := DefaultConfig(); !reflect.DeepEqual(c, want) {
			t.Errorf("Go agent %v: the command line's defaults\n %+v\nDefaultConfig\n %+v", goAgent, c, want)
		}
	}
	if d := DefaultConfig(); d.TraceSampleRatio != 1 || d.Addr != ":8082" || d.Model != "echo" || d.EchoDelay != 20*time.Millisecond {
		t.Errorf("DefaultConfig %+v", d)
	}
}

// noFlag are the fields of Config that no flag sets.
var noFlag = []string{"AgentName", "RetryBackoffMin", "RetryBackoffMax", "CommitInterval"}

// flagArgs sets every flag of fs to a value other than its default.
func flagArgs(t *testing.T, fs *flag.FlagSet) []string {
	t.Helper()
	var args []string
	fs.VisitAll(func(f *flag.Flag) {
		v := "x" + f.Name
		switch d := f.Value.(flag.Getter).Get().(type) {
		case int:
			v = "7"
		case float64:
			v = "0.5"
		case time.Duration:
			v = "7s"
		case bool:
			v = fmt.Sprint(!d)
		}
		args = append(args, fmt.Sprintf("-%s=%s", f.Name, v))
	})
	return args
}

// Every flag reaches its field: with every flag set to a value other than
// its default, every field a flag sets differs from DefaultConfig's, and
// those of the Go agent's binary are the same but for the settings it has
// no flag for.
func TestEveryFlagReachesItsField(t *testing.T) {
	t.Parallel()
	for _, goAgent := range []bool{false, true} {
		c := DefaultConfig()
		set := flagenv.New(flag.NewFlagSet("worker", flag.ContinueOnError), noEnv)
		c.bind(set, goAgent, false)
		args := flagArgs(t, set.FlagSet())
		got, err := loadConfig(args, noEnv, io.Discard, goAgent)
		if err != nil {
			t.Fatal(err)
		}
		keep := noFlag
		if goAgent {
			keep = append(slices.Clip(keep), "Model", "EchoDelay", "OpenAIBaseURL", "OpenAIAPIKey", "OpenAIModel", "Instruction", "AgentFile")
		}
		def, v := reflect.ValueOf(DefaultConfig()), reflect.ValueOf(got)
		for i := range v.NumField() {
			name := v.Type().Field(i).Name
			same := reflect.DeepEqual(v.Field(i).Interface(), def.Field(i).Interface())
			switch {
			case slices.Contains(keep, name) && !same:
				t.Errorf("Go agent %v: %s changed to %v, but no flag sets it", goAgent, name, v.Field(i))
			case !slices.Contains(keep, name) && same:
				t.Errorf("Go agent %v: %s kept its default %v: no flag of %q reached it", goAgent, name, v.Field(i), args)
			}
		}
	}
}

// flagRE finds the flags a comment names.
var flagRE = regexp.MustCompile(`(?:^|[\s(,;])-([a-z][a-z0-9-]*)`)

// documentedFlags returns the flags Config's documentation names: field
// by field (with the comment), and those of the type's own comment.
func documentedFlags(t *testing.T) (byField map[string]string, typeDoc string) {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "config.go", nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	byField = map[string]string{}
	ast.Inspect(f, func(n ast.Node) bool {
		gd, ok := n.(*ast.GenDecl)
		if !ok || gd.Tok != token.TYPE {
			return true
		}
		ts := gd.Specs[0].(*ast.TypeSpec)
		if ts.Name.Name != "Config" {
			return false
		}
		typeDoc = gd.Doc.Text()
		for _, fld := range ts.Type.(*ast.StructType).Fields.List {
			for _, name := range fld.Names {
				byField[name.Name] = fld.Doc.Text()
			}
		}
		return false
	})
	return byField, typeDoc
}

// -h lists exactly the flags Config's documentation names, each with the
// environment variable its field's comment names; a Go agent's binary
// lists all but those of the agent built without Go code.
func TestHelpListsExactlyTheDocumentedFlags(t *testing.T) {
	t.Parallel()
	byField, typeDoc := documentedFlags(t)
	documented := map[string]string{} // flag -> its field's comment
	for name, doc := range byField {
		if len(doc) == 0 {
			t.Errorf("field %s has no comment", name)
		}
		for _, m := range flagRE.FindAllStringSubmatch(doc, -1) {
			documented[m[1]] = doc
		}
	}
	for _, m := range flagRE.FindAllStringSubmatch(typeDoc, -1) {
		if _, ok := documented[m[1]]; !ok {
			documented[m[1]] = typeDoc
		}
	}
	goOnly := []string{"model", "echo-delay", "openai-base-url", "openai-api-key", "openai-model", "instruction", "agent-config"}
	for _, goAgent := range []bool{false, true} {
		var help bytes.Buffer
		code := mainWith([]string{"-h"}, noEnv, &help, agentOpts(goAgent))
		if code != 0 {
			t.Fatalf("-h exits %d", code)
		}
		listed := map[string]string{} // flag -> its usage line
		var last string
		for _, line := range strings.Split(help.String(), "\n") {
			if m := regexp.MustCompile(`^  -([a-z][a-z0-9-]*)`).FindStringSubmatch(line); m != nil {
				last = m[1]
				listed[last] = ""
			} else if last != "" {
				listed[last] += line
			}
		}
		for name, doc := range documented {
			_, ok := listed[name]
			if want := !goAgent || !slices.Contains(goOnly, name); ok != want {
				t.Errorf("Go agent %v: -h lists -%s: %v, want %v", goAgent, name, ok, want)
			}
			if env := regexp.MustCompile(`env (TURNPIKE_[A-Z_]+)`).FindStringSubmatch(listed[name]); ok && (env == nil || !strings.Contains(doc, env[1])) {
				t.Errorf("-%s reads %v, which its documentation does not name", name, env)
			}
		}
		for name := range listed {
			if _, ok := documented[name]; !ok {
				t.Errorf("Go agent %v: -h lists -%s, which Config's documentation does not name", goAgent, name)
			}
		}
	}
}

func agentOpts(goAgent bool) []Option {
	if !goAgent {
		return nil
	}
	return []Option{WithAgent(stubAgent{})}
}

// stubAgent is an agent that is never run.
type stubAgent struct{ adk.Agent }

// An agent file given to a binary whose agent is written in Go is a bad
// option, whether by flag or by the environment: it exits 2, as Main's
// documentation says, before anything starts.
func TestAnAgentFileBesideAGoAgentIsABadOption(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		args []string
		env  map[string]string
	}{
		{"The flag is not one of a Go agent's binary.", []string{"-agent-config", "agents.json"}, nil},
		{"The environment variable is refused.", nil, map[string]string{"TURNPIKE_AGENT_CONFIG": "agents.json"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var stderr bytes.Buffer
			if code := mainWith(tt.args, envOf(tt.env), &stderr, agentOpts(true)); code != 2 {
				t.Errorf("exit %d, want 2 (%s)", code, stderr.String())
			}
		})
	}
}

// Validate reports every problem at once.
func TestValidateJoinsEveryProblem(t *testing.T) {
	t.Parallel()
	c := DefaultConfig()
	c.Ordering, c.MaxAttempts, c.Model, c.LogFormat, c.TraceSampleRatio, c.MongoPool = "random", -1, "gpt", "xml", 2, -3
	err := c.Validate()
	for _, want := range []string{"TURNPIKE_KAFKA_BROKERS", "TURNPIKE_MONGO_URI", "Ordering", "MaxAttempts", "TURNPIKE_MODEL",
		"TURNPIKE_LOG_FORMAT", "TURNPIKE_TRACE_SAMPLE_RATIO", "TURNPIKE_MONGO_POOL"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate does not report %s: %v", want, err)
		}
	}
}

// TURNPIKE_TRACE_SAMPLE_RATIO=0 means no new trace sampled: the setting
// keeps its 0 (the tracer samples none: internal/tracing's
// TestSpansAreExportedOverOTLPHTTPSampledByTheRatio), and the default stays 1.
func TestATraceSampleRatioOfZeroIsKept(t *testing.T) {
	t.Parallel()
	c, err := LoadConfig(nil, envOf(map[string]string{"TURNPIKE_TRACE_SAMPLE_RATIO": "0"}))
	if err != nil {
		t.Fatal(err)
	}
	if c.TraceSampleRatio != 0 {
		t.Errorf("TraceSampleRatio %v, want 0", c.TraceSampleRatio)
	}
	w, err := New(withBrokerAndStore(c))
	if err != nil {
		t.Fatal(err)
	}
	if w.cfg.TraceSampleRatio != 0 {
		t.Errorf("New made TraceSampleRatio %v of 0", w.cfg.TraceSampleRatio)
	}
}

func withBrokerAndStore(c Config) Config {
	c.Brokers, c.MongoURI = []string{"127.0.0.1:1"}, "mongodb://127.0.0.1:1"
	return c
}
