package client

import (
	"errors"
	"fmt"
	"testing"
)

func TestWhichFailuresASubscriptionRetries(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		err     error
		refusal bool
	}{
		{"a bad token is final", fmt.Errorf("dial: %w", &APIError{Status: 401, Code: "unauthenticated"}), true},
		{"a foreign origin is final", &APIError{Status: 403, Code: "permission_denied"}, true},
		{"too many connects passes", &APIError{Status: 429, Code: "rate_limited"}, false},
		{"a gateway that is not ready passes", &APIError{Status: 503, Code: "unavailable"}, false},
		{"a bad conversation is final", &SubscribeError{Code: "invalid_argument"}, true},
		{"a replica behind the cursor passes", &SubscribeError{Code: "unavailable"}, false},
		{"too many subscribes passes", &SubscribeError{Code: "rate_limited"}, false},
		{"a network failure passes", errors.New("connection refused"), false},
	}
	for _, tt := range tests {
		if got := isRefusal(tt.err); got != tt.refusal {
			t.Errorf("%s: isRefusal = %v", tt.name, got)
		}
	}
}
