package cli_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/turnpike-dev/turnpike/internal/cli"
	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/internal/topic"
)

// env is a fake environment, so that the tests never read the process's.
func env(kv ...string) func(string) (string, bool) {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func run(ctx context.Context, lookup func(string) (string, bool), args ...string) (code int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	code = cli.Run(ctx, append([]string{"topics"}, args...), lookup, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestTopicsCreatesTheMissingTopicsAndChecksTheirPartitions(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 60*time.Second)
	kafka := testenv.Kafka(t)
	brokers := strings.Join(kafka, ",")
	prefix := testenv.Name(t, "tp") + "."
	names := topic.NewNames(prefix).All()
	lookup := env("TURNPIKE_KAFKA_BROKERS", brokers, "TURNPIKE_TOPIC_PREFIX", prefix)

	code, out, errOut := run(ctx, lookup, "-partitions", "3")
	if code != 0 {
		t.Fatalf("first run: exit %d\n%s", code, errOut)
	}
	for _, name := range names {
		ids, err := topic.Partitions(ctx, kafka, name)
		if err != nil || len(ids) != 3 {
			t.Errorf("topic %s: partitions %v, err %v; want 3", name, ids, err)
		}
		if !strings.Contains(out, name+"\t3 partitions\n") {
			t.Errorf("output lacks %q:\n%s", name+"\t3 partitions", out)
		}
	}

	// Again, with the partition count from the environment: nothing to do.
	code, out, errOut = run(ctx, env("TURNPIKE_KAFKA_BROKERS", brokers, "TURNPIKE_TOPIC_PREFIX", prefix, "TURNPIKE_PARTITIONS", "3"))
	if code != 0 || strings.Count(out, "\t3 partitions\n") != len(names) {
		t.Fatalf("second run: exit %d, output:\n%s%s", code, out, errOut)
	}

	// Fewer partitions suffice; more cannot be had without moving
	// conversations, so that fails at once, naming the topics.
	if code, _, errOut = run(ctx, lookup, "-partitions", "2"); code != 0 {
		t.Errorf("-partitions 2 on topics of 3: exit %d\n%s", code, errOut)
	}
	start := time.Now()
	code, _, errOut = run(ctx, lookup, "-partitions", "6", "-timeout", "30s")
	if code != 1 || !strings.Contains(errOut, names[0]+" has 3 partitions, fewer partitions than asked (6)") {
		t.Errorf("-partitions 6 on topics of 3: exit %d, want 1 with the reason\n%s", code, errOut)
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Errorf("too few partitions was retried for %v: it is permanent", took)
	}
}

// TestTopicsGivesTheStreamTopicItsOwnPartitionCount: docs/deploy.md
// "Sizing" (the stream topic is sized by the push gateway's replicas, the
// others by the workers'): TURNPIKE_STREAM_PARTITIONS sets the stream
// topic's count, TURNPIKE_PARTITIONS the others', and each is checked
// against its own.
func TestTopicsGivesTheStreamTopicItsOwnPartitionCount(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 60*time.Second)
	kafka := testenv.Kafka(t)
	brokers := strings.Join(kafka, ",")
	prefix := testenv.Name(t, "tps") + "."
	names := topic.NewNames(prefix)
	lookup := env("TURNPIKE_KAFKA_BROKERS", brokers, "TURNPIKE_TOPIC_PREFIX", prefix, "TURNPIKE_PARTITIONS", "2", "TURNPIKE_STREAM_PARTITIONS", "5")

	code, out, errOut := run(ctx, lookup)
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, errOut)
	}
	for _, name := range names.All() {
		want := 2
		if name == names.Stream {
			want = 5
		}
		ids, err := topic.Partitions(ctx, kafka, name)
		if err != nil || len(ids) != want {
			t.Errorf("topic %s: partitions %v, err %v; want %d", name, ids, err, want)
		}
		if line := fmt.Sprintf("%s\t%d partitions\n", name, want); !strings.Contains(out, line) {
			t.Errorf("output lacks %q:\n%s", line, out)
		}
	}

	// The stream topic is checked against its own count, the others
	// against theirs.
	code, _, errOut = run(ctx, env("TURNPIKE_KAFKA_BROKERS", brokers, "TURNPIKE_TOPIC_PREFIX", prefix, "TURNPIKE_PARTITIONS", "2", "TURNPIKE_STREAM_PARTITIONS", "6"))
	if code != 1 || !strings.Contains(errOut, names.Stream+" has 5 partitions, fewer partitions than asked (6)") || strings.Contains(errOut, names.Requests+" has") {
		t.Errorf("-stream-partitions 6 on a stream topic of 5: exit %d, want 1 naming the stream topic only\n%s", code, errOut)
	}
}

func TestTopicsRetriesUntilTheTimeoutWhenKafkaDoesNotAnswer(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	// A port nothing listens on: every dial is refused.
	code, _, errOut := run(ctx, env("TURNPIKE_KAFKA_BROKERS", "127.0.0.1:1"), "-timeout", "1500ms")
	if code != 1 || !strings.Contains(errOut, "kafka not ready in time") || !strings.Contains(errOut, "retrying in") {
		t.Errorf("exit %d, want 1 after retries\n%s", code, errOut)
	}
}

func TestTopicsRejectsBadSettings(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		lookup func(string) (string, bool)
		args   []string
		want   []string
	}{
		{"Without brokers it says where to set them.", env(), nil, []string{"no brokers: pass -kafka-brokers or set TURNPIKE_KAFKA_BROKERS"}},
		{"Zero partitions are refused.", env("TURNPIKE_KAFKA_BROKERS", "127.0.0.1:1"), []string{"-partitions", "0"}, []string{"-partitions 0: want at least 1"}},
		{"A negative stream partition count is refused.", env("TURNPIKE_KAFKA_BROKERS", "127.0.0.1:1", "TURNPIKE_STREAM_PARTITIONS", "-1"), nil, []string{"-stream-partitions -1: want at least 1"}},
		{"A partition count that is not a number in the environment is refused.", env("TURNPIKE_KAFKA_BROKERS", "127.0.0.1:1", "TURNPIKE_PARTITIONS", "twelve"), nil, []string{`TURNPIKE_PARTITIONS="twelve": not an integer`}},
		{"A zero timeout is refused.", env("TURNPIKE_KAFKA_BROKERS", "127.0.0.1:1"), []string{"-timeout", "0s"}, []string{"-timeout 0s: want a positive duration"}},
		{"Arguments after the flags are refused.", env("TURNPIKE_KAFKA_BROKERS", "127.0.0.1:1"), []string{"extra"}, []string{`unexpected arguments ["extra"]`}},
		{"Every problem is reported at once.", env(), []string{"-partitions", "-1", "x"}, []string{"no brokers", "-partitions -1: want at least 1", `unexpected arguments ["x"]`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := testenv.Context(t, 10*time.Second)
			code, out, errOut := run(ctx, tt.lookup, tt.args...)
			if code != 2 || out != "" {
				t.Errorf("exit %d, stdout %q; want exit 2 and no output", code, out)
			}
			for _, w := range tt.want {
				if !strings.Contains(errOut, w) {
					t.Errorf("stderr %q lacks %q", errOut, w)
				}
			}
		})
	}
}

func TestTopicsHelpNeedsNoToken(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 10*time.Second)
	code, _, errOut := run(ctx, env(), "-h")
	if code != 0 || !strings.Contains(errOut, "usage: turnpike topics") || !strings.Contains(errOut, "TURNPIKE_PARTITIONS") {
		t.Errorf("exit %d, stderr:\n%s", code, errOut)
	}
}
