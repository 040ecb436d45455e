package worker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"testing"

	einoopenai "github.com/cloudwego/eino-ext/components/model/openai"
	goopenai "github.com/meguminnnnnnnnn/go-openai"
	"github.com/segmentio/kafka-go"

	"github.com/turnpike-dev/turnpike/pkg/bridge"
	"github.com/turnpike-dev/turnpike/pkg/echo"
	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
)

type statusErr int

func (e statusErr) Error() string   { return fmt.Sprintf("status %d", int(e)) }
func (e statusErr) StatusCode() int { return int(e) }

// temporaryErr and retriableErr say whether they may pass.
type temporaryErr bool

func (e temporaryErr) Error() string   { return "temporary?" }
func (e temporaryErr) Temporary() bool { return bool(e) }

type retriableErr bool

func (e retriableErr) Error() string   { return "retriable?" }
func (e retriableErr) Retriable() bool { return bool(e) }

// errCustomTransient is an error only the custom agent's classifier
// (WithTransientErrors) knows is transient.
var errCustomTransient = errors.New("my model is warming up")

// What happens to a record, as classify and the model-error classifier
// decide it (DESIGN.md "Worker"; pkg/worker WithTransientErrors, Permanent).
const (
	retriedPerRecord = "retried up to MaxAttempts, then dead-lettered"
	notRetried       = "not retried: the run ends with a notice"
	retriedInfra     = "retried for as long as the partition is ours"
	deadLettered     = "dead-lettered at once"
	dropped          = "dropped silently (fenced)"
	leftUncommitted  = "left uncommitted for redelivery"
)

// outcome is what happens to a record whose run failed with err: a model
// error before any content (model) is first classified by the worker's
// and the custom agent's classifiers (the bridge's RetryModelError), and
// one worth retrying fails the run with bridge.ErrModelRetry, as the
// bridge does; any other failure goes to classify as it is.
func outcome(w *agents, err error, model bool) string {
	if model {
		if !w.retryModelError(err) {
			return notRetried
		}
		err = fmt.Errorf("run r1: %w", fmt.Errorf("%w: %w", bridge.ErrModelRetry, err))
	}
	switch classify(err) {
	case classRetry:
		return retriedInfra
	case classRetryRecord:
		return retriedPerRecord
	case classPermanent:
		return deadLettered
	case classFenced:
		return dropped
	case classAbandoned:
		return leftUncommitted
	}
	return "unclassified"
}

// Every case the docs name, each in one row, so that any single case
// flipping fails the test: DESIGN.md "Worker" (infrastructure retried for
// as long as the partition is ours; a transient model failure before any
// content up to MaxAttempts; invalid records dead-lettered at once; a
// fenced commit dropped), pkg/worker's WithTransientErrors (timeouts,
// refused and reset connections, Temporary() or Retriable() true, HTTP
// 408, 429 and 5xx of errors with StatusCode() or of the OpenAI client;
// the caller's classifier adds to those) and Permanent (an AgentFactory
// error dead-lettered at once, any other retried like a model error).
func TestRetryClassificationOfEveryDocumentedCase(t *testing.T) {
	t.Parallel()
	w := &agents{transient: func(err error) bool { return errors.Is(err, errCustomTransient) }}
	plain := &agents{}
	permanent := func(err error) error { return fmt.Errorf("%w: %w", events.ErrInvalid, err) } // pkg/worker.Permanent
	tests := []struct {
		name  string
		w     *agents
		err   error
		model bool // a model error before any content
		want  string
	}{
		// Model errors before any content: HTTP statuses.
		{"A model's HTTP 408 is retried.", w, statusErr(408), true, retriedPerRecord},
		{"A model's HTTP 429 is retried.", w, fmt.Errorf("openai: %w", statusErr(429)), true, retriedPerRecord},
		{"A model's HTTP 500 is retried.", w, statusErr(500), true, retriedPerRecord},
		{"A model's HTTP 502 is retried.", w, statusErr(502), true, retriedPerRecord},
		{"A model's HTTP 503 is retried.", w, fmt.Errorf("openai: %w", statusErr(503)), true, retriedPerRecord},
		{"A model's HTTP 504 is retried.", w, statusErr(504), true, retriedPerRecord},
		{"A model's HTTP 400 is not retried.", w, statusErr(400), true, notRetried},
		{"A model's HTTP 401 is not retried.", w, statusErr(401), true, notRetried},
		{"A model's HTTP 403 is not retried.", w, statusErr(403), true, notRetried},
		{"A model's HTTP 404 is not retried.", w, statusErr(404), true, notRetried},
		{"A model's HTTP 409 is not retried.", w, statusErr(409), true, notRetried},
		{"A model's HTTP 413 is not retried.", w, statusErr(413), true, notRetried},
		{"A model's HTTP 422 is not retried.", w, statusErr(422), true, notRetried},
		{"A model's HTTP 499 is not retried.", w, statusErr(499), true, notRetried},
		// The OpenAI-compatible client's errors carry the status in a field.
		{"An OpenAI-compatible server's 408 is retried.", w, &einoopenai.APIError{HTTPStatusCode: 408}, true, retriedPerRecord},
		{"An OpenAI-compatible server's 429 is retried.", w, fmt.Errorf("[NodeRunError] %w", &einoopenai.APIError{HTTPStatusCode: 429, Message: "slow down"}), true, retriedPerRecord},
		{"An OpenAI-compatible server's 500 is retried.", w, &einoopenai.APIError{HTTPStatusCode: 500}, true, retriedPerRecord},
		{"An OpenAI-compatible server's 401 is not retried.", w, &einoopenai.APIError{HTTPStatusCode: 401}, true, notRetried},
		{"An OpenAI-compatible server's 400 is not retried.", w, &einoopenai.APIError{HTTPStatusCode: 400}, true, notRetried},
		{"An error event inside an OpenAI stream (no status) is not retried.", w, &einoopenai.APIError{Message: "overloaded"}, true, notRetried},
		{"A 408 whose body is not OpenAI's error JSON is retried.", w, &goopenai.RequestError{HTTPStatusCode: 408}, true, retriedPerRecord},
		{"A 503 whose body is not OpenAI's error JSON is retried.", w, fmt.Errorf("stream: %w", &goopenai.RequestError{HTTPStatusCode: 503}), true, retriedPerRecord},
		{"A 404 whose body is not OpenAI's error JSON is not retried.", w, &goopenai.RequestError{HTTPStatusCode: 404}, true, notRetried},
		{"A request error without a status is classified by its cause: a reset connection is retried.", w, &goopenai.RequestError{Err: syscall.ECONNRESET}, true, retriedPerRecord},
		{"An OpenAI error without a status does not hide a reset connection beside it.", w, errors.Join(&einoopenai.APIError{Message: "stream cut"}, syscall.ECONNRESET), true, retriedPerRecord},
		// Timeouts and connections.
		{"A network timeout is retried.", w, &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}, true, retriedPerRecord},
		{"A context deadline (a timeout) is retried.", w, fmt.Errorf("model: %w", context.DeadlineExceeded), true, retriedPerRecord},
		{"A refused connection is retried.", w, fmt.Errorf("dial: %w", syscall.ECONNREFUSED), true, retriedPerRecord},
		{"A refused connection inside a net.OpError is retried.", w, &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}, true, retriedPerRecord},
		{"A reset connection is retried.", w, fmt.Errorf("read: %w", syscall.ECONNRESET), true, retriedPerRecord},
		{"A model host that does not resolve is not retried (a network error, but no timeout).", w,
			&net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Err: "no such host", Name: "model.invalid", IsNotFound: true}}, true, notRetried},
		{"An error whose Temporary() is true is retried.", w, temporaryErr(true), true, retriedPerRecord},
		{"An error whose Temporary() is false is not retried.", w, temporaryErr(false), true, notRetried},
		{"An error whose Retriable() is true is retried.", w, retriableErr(true), true, retriedPerRecord},
		{"An error whose Retriable() is false is not retried.", w, retriableErr(false), true, notRetried},
		// Neither retried nor a record failure.
		{"The echo model's injected failure is not retried.", w, echo.ErrInjectedFailure, true, notRetried},
		{"A cancelled run is not retried.", w, context.Canceled, true, notRetried},
		{"A cancelled run is not retried, even when the error also says 503.", w, fmt.Errorf("%w: %w", context.Canceled, statusErr(503)), true, notRetried},
		{"No error is not retried.", w, nil, true, notRetried},
		// The caller's classifier (WithTransientErrors) adds to the worker's.
		{"An error the caller's classifier calls transient is retried.", w, fmt.Errorf("model: %w", errCustomTransient), true, retriedPerRecord},
		{"Without the caller's classifier that error is not retried.", plain, fmt.Errorf("model: %w", errCustomTransient), true, notRetried},
		{"An error the caller's classifier does not know keeps the worker's classification: 429 retried.", w, statusErr(429), true, retriedPerRecord},
		{"An error the caller's classifier does not know keeps the worker's classification: 400 not retried.", w, statusErr(400), true, notRetried},

		// Failures of a record.
		{"A transient model failure counts against MaxAttempts.", w, fmt.Errorf("run r1: %w", fmt.Errorf("%w: %w", bridge.ErrModelRetry, statusErr(503))), false, retriedPerRecord},
		{"A transient model failure whose stream write also failed still counts against MaxAttempts.", w,
			fmt.Errorf("run r1: %w", errors.Join(fmt.Errorf("%w: %w", bridge.ErrModelRetry, statusErr(503)), errors.New("emit: write stream event: broker down"))), false, retriedPerRecord},
		{"An agent factory's error is retried like a model error.", w, fmt.Errorf("build agent: %w", retryRecord{errors.New("tenant config unavailable")}), false, retriedPerRecord},
		{"An agent factory's Permanent error is dead-lettered at once.", w, fmt.Errorf("build agent: %w", retryRecord{permanent(errors.New("unknown tenant"))}), false, deadLettered},
		{"A resume hook's error is retried like a model error.", w, fmt.Errorf("resume r0: %w", retryRecord{errors.New("parser down")}), false, retriedPerRecord},
		{"An invalid record is dead-lettered at once.", w, fmt.Errorf("decode: %w", events.ErrInvalid), false, deadLettered},
		{"A fenced commit is dropped.", w, fmt.Errorf("run r1: %w", fmt.Errorf("commit turn: %w", history.ErrFenced)), false, dropped},
		{"A run whose journal write was fenced (a newer run owns the journal) is dropped.", w,
			fmt.Errorf("run r1: %w", fmt.Errorf("journal tool step: record step: %w", history.ErrFenced)), false, dropped},
		{"A run whose step another run recorded first is retried (its next attempt replays it).", w, fmt.Errorf("run r1: %w", errStepRaced), false, retriedInfra},
		{"A run that diverged from its journal under the fail policy is dead-lettered.", w,
			fmt.Errorf("run r1: %w", Permanent(fmt.Errorf("%w at step m/a/1", errDiverged))), false, deadLettered},
		{"A run whose journal write failed in the store is retried.", w, fmt.Errorf("run r1: journal model step: %w", errors.New("connection reset")), false, retriedInfra},
		{"A fenced commit whose stream write also failed is dropped.", w,
			fmt.Errorf("run r1: %w", errors.Join(fmt.Errorf("commit turn: %w", history.ErrFenced), errors.New("emit: broker down"))), false, dropped},
		{"An aborted run is left for redelivery.", w, fmt.Errorf("run r1: %w", bridge.ErrAborted), false, leftUncommitted},
		{"A revoked partition leaves the record for redelivery.", w, errAbandoned, false, leftUncommitted},
		{"A cancelled context leaves the record for redelivery.", w, fmt.Errorf("start request: %w", context.Canceled), false, leftUncommitted},
		{"A store outage is retried for as long as it lasts.", w, fmt.Errorf("start request: %w", errors.New("server selection timeout")), false, retriedInfra},
		{"A store outage at the commit is retried for as long as it lasts.", w, fmt.Errorf("run r1: %w", fmt.Errorf("commit turn: %w", errors.New("connection reset"))), false, retriedInfra},
		{"A store timeout is infrastructure, not a model attempt.", w, fmt.Errorf("record outcome: %w", context.DeadlineExceeded), false, retriedInfra},
		{"A stream write refused by the broker is retried for as long as it lasts.", w, fmt.Errorf("run r1: write stream event: %w", kafka.PolicyViolation), false, retriedInfra},
		{"A dead-letter write that failed is retried for as long as it lasts.", w, fmt.Errorf("dlq: %w", kafka.NotEnoughReplicas), false, retriedInfra},
	}
	for _, tt := range tests {
		if got := outcome(tt.w, tt.err, tt.model); got != tt.want {
			t.Errorf("%s\n%v: %s, want %s", tt.name, tt.err, got, tt.want)
		}
	}
}
