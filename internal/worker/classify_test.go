package worker

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"

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
