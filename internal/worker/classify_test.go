package worker

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"

	einoopenai "github.com/cloudwego/eino-ext/components/model/openai"
	goopenai "github.com/meguminnnnnnnnn/go-openai"

	"github.com/turnpike-dev/turnpike/pkg/bridge"
	"github.com/turnpike-dev/turnpike/pkg/echo"
	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
)

type statusErr int

func (e statusErr) Error() string   { return fmt.Sprintf("status %d", int(e)) }
func (e statusErr) StatusCode() int { return int(e) }

func TestClassify(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		err  error
		want class
	}{
		{"an invalid record is permanent", fmt.Errorf("decode: %w", events.ErrInvalid), classPermanent},
		{"a fenced commit is fenced", fmt.Errorf("commit turn: %w", history.ErrFenced), classFenced},
		{"an aborted run is abandoned", bridge.ErrAborted, classAbandoned},
		{"a revoked partition is abandoned", errAbandoned, classAbandoned},
		{"a transient model failure is retried per record", fmt.Errorf("run: %w", bridge.ErrModelRetry), classRetryRecord},
		{"a store outage is retried for as long as it lasts", errors.New("server selection timeout"), classRetry},
	}
	for _, tt := range tests {
		if got := classify(tt.err); got != tt.want {
			t.Errorf("%s: classify(%v) = %d, want %d", tt.name, tt.err, got, tt.want)
		}
	}
}

func TestTransientModelError(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"429 is transient", statusErr(429), true},
		{"503 is transient", fmt.Errorf("openai: %w", statusErr(503)), true},
		{"400 is not", statusErr(400), false},
		{"an OpenAI-compatible server's 429 is transient", fmt.Errorf("[NodeRunError] %w", &einoopenai.APIError{HTTPStatusCode: 429, Message: "slow down"}), true},
		{"an OpenAI-compatible server's 401 is not", &einoopenai.APIError{HTTPStatusCode: 401}, false},
		{"a 503 with a body that is not OpenAI's error JSON is transient", fmt.Errorf("stream: %w", &goopenai.RequestError{HTTPStatusCode: 503}), true},
		{"a 404 with a body that is not OpenAI's error JSON is not", &goopenai.RequestError{HTTPStatusCode: 404}, false},
		{"an error event inside an OpenAI stream (no status) is not", &einoopenai.APIError{Message: "overloaded"}, false},
		{"a refused connection is transient", fmt.Errorf("dial: %w", syscall.ECONNREFUSED), true},
		{"the echo model's injected failure is not", echo.ErrInjectedFailure, false},
		{"a cancelled run is not", context.Canceled, false},
		{"nil is not", nil, false},
	}
	for _, tt := range tests {
		if got := transientModelError(tt.err); got != tt.want {
			t.Errorf("%s: %v", tt.name, got)
		}
	}
}
