package worker

import (
	"flag"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/turnpike-dev/turnpike/internal/flagenv"
	"github.com/turnpike-dev/turnpike/internal/service"
)

// Every field of Config reaches the service's configuration and comes
// back: a field forgotten in one direction fails here.
func TestConfigRoundTrip(t *testing.T) {
	var c Config
	v := reflect.ValueOf(&c).Elem()
	for i := range v.NumField() {
		f := v.Field(i)
		switch f.Kind() {
		case reflect.String:
			f.SetString("s" + v.Type().Field(i).Name)
		case reflect.Int:
			f.SetInt(int64(100 + i))
		case reflect.Int64: // time.Duration
			f.SetInt(int64(time.Duration(i+1) * time.Second))
		case reflect.Float64:
			f.SetFloat(0.5)
		case reflect.Slice:
			f.Set(reflect.ValueOf([]string{"b" + v.Type().Field(i).Name}))
		default:
			t.Fatalf("field %s of kind %s: extend the test", v.Type().Field(i).Name, f.Kind())
		}
	}
	if got := fromService(c.service(nil)); !reflect.DeepEqual(got, c) {
		t.Errorf("round trip:\n got %+v\nwant %+v", got, c)
	}
}

// The environment and flags reach their fields.
func TestLoadConfigNamesTheEnvironment(t *testing.T) {
	env := map[string]string{"TURNPIKE_KAFKA_BROKERS": "k:1", "TURNPIKE_MONGO_URI": "mongodb://m", "TURNPIKE_COMPACT_TOKENS": "900",
		"TURNPIKE_WORKER_GROUP": "g", "TURNPIKE_MAX_ATTEMPTS": "9"}
	c, err := LoadConfig([]string{"-window", "7"}, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatal(err)
	}
	if c.Brokers[0] != "k:1" || c.MongoURI != "mongodb://m" || c.CompactTokens != 900 || c.GroupID != "g" || c.MaxAttempts != 9 || c.WindowMessages != 7 {
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

// Every flag of cmd/worker has its field: a flag set to a value other than
// its default reaches the service's configuration through LoadConfig as
// it does when parsed directly. (auth-secret is bound for every service,
// but the worker reads no token.)
func TestLoadConfigKeepsEveryFlag(t *testing.T) {
	var args []string
	var probe service.WorkerConfig
	set := flagenv.New(flag.NewFlagSet("worker", flag.ContinueOnError), func(string) (string, bool) { return "", false })
	probe.Bind(set)
	set.FlagSet().VisitAll(func(f *flag.Flag) {
		if f.Name == "auth-secret" {
			return
		}
		v := "x" + f.Name
		if _, err := strconv.ParseFloat(f.DefValue, 64); err == nil {
			v = "7"
		} else if _, err := time.ParseDuration(f.DefValue); err == nil {
			v = "7s"
		}
		args = append(args, fmt.Sprintf("-%s=%s", f.Name, v))
	})
	var want service.WorkerConfig
	direct := flagenv.New(flag.NewFlagSet("worker", flag.ContinueOnError), func(string) (string, bool) { return "", false })
	direct.FlagSet().SetOutput(io.Discard)
	want.Bind(direct)
	if err := direct.Parse(args); err != nil {
		t.Fatal(err)
	}
	c, err := loadConfig(args, func(string) (string, bool) { return "", false }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.service(nil); !reflect.DeepEqual(got, want) {
		t.Errorf("LoadConfig(%q) lost a setting:\n got %+v\nwant %+v", args, got, want)
	}
}
