package worker

import (
	"context"
	"errors"
	"net"
	"syscall"

	einoopenai "github.com/cloudwego/eino-ext/components/model/openai"
	goopenai "github.com/meguminnnnnnnnn/go-openai"

	"github.com/turnpike-dev/turnpike/pkg/bridge"
	"github.com/turnpike-dev/turnpike/pkg/history"
)

// class says what to do with a record whose processing failed. classify is
// the one place that decides it.
type class int

const (
	// classRetry: the infrastructure (MongoDB, Kafka) failed. Retry with
	// backoff for as long as the partition is ours; the conversation waits
	// and nothing is skipped, however long the outage.
	classRetry class = iota
	// classRetryRecord: this record's run failed in a way that may pass
	// (a rate-limited or unreachable model). Retry with backoff up to
	// MaxAttempts, then dead-letter it and complete it failed.
	classRetryRecord
	// classPermanent: retrying cannot help. Dead-letter it now.
	classPermanent
	// classFenced: a newer request of the conversation is committed: this
	// worker lost the partition (a zombie). Drop the record silently; its
	// new owner has it.
	classFenced
	// classAbandoned: the partition was revoked or the worker is stopping
	// before the record finished. Leave it uncommitted for redelivery.
	classAbandoned
)

func classify(err error) class {
	switch {
	case errors.Is(err, errAbandoned), errors.Is(err, bridge.ErrAborted), errors.Is(err, context.Canceled):
		return classAbandoned
	case errors.Is(err, history.ErrFenced):
		return classFenced
	case isPermanent(err):
		return classPermanent
	case errors.Is(err, bridge.ErrModelRetry), errors.As(err, new(retryRecord)):
		return classRetryRecord
	}
	return classRetry
}

// transientModelError says whether a model error that happened before any
// content is worth retrying the request for: timeouts and refused or reset
// connections, errors that say they are temporary, and HTTP 408, 429 and
// 5xx answers of model servers that report a status code.
func transientModelError(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	var temp interface{ Temporary() bool }
	if errors.As(err, &temp) && temp.Temporary() {
		return true
	}
	var retriable interface{ Retriable() bool }
	if errors.As(err, &retriable) && retriable.Retriable() {
		return true
	}
	var status interface{ StatusCode() int }
	if errors.As(err, &status) {
		return transientStatus(status.StatusCode())
	}
	// The OpenAI-compatible client (eino-ext openai) reports an HTTP error
	// answer as an APIError when its body is OpenAI's error JSON, else as
	// go-openai's RequestError; both carry the status in a field.
	var apiErr *einoopenai.APIError
	if errors.As(err, &apiErr) && apiErr.HTTPStatusCode > 0 {
		return transientStatus(apiErr.HTTPStatusCode)
	}
	var reqErr *goopenai.RequestError
	if errors.As(err, &reqErr) && reqErr.HTTPStatusCode > 0 {
		return transientStatus(reqErr.HTTPStatusCode)
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET)
}

// transientStatus says whether an HTTP status of a model server is worth
// a retry: 408, 429 and 5xx.
func transientStatus(c int) bool { return c == 408 || c == 429 || c >= 500 }
