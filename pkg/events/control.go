package events

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// ControlType names a control record.
type ControlType string

// Control record types.
const (
	// ControlCancel asks workers to cancel requests of a conversation.
	ControlCancel ControlType = "cancel"
	// ControlCompleted tells ingest that a request ended (it keeps the
	// count of queued requests per conversation and tenant).
	ControlCompleted ControlType = "completed"
)

// Control is a record of the control topic (turnpike.control), keyed by
// identity like the other topics.
type Control struct {
	V            int         `json:"v"`
	Type         ControlType `json:"type"`
	Tenant       string      `json:"tenant"`
	User         string      `json:"user"`
	Conversation string      `json:"conversation"`
	// RequestID names one request (a cancel of one request; a completion).
	RequestID string `json:"request_id,omitempty"`
	// Partition and Before, on a cancel without a request id: every
	// request of the conversation whose record is in Partition of the
	// requests topic below offset Before is cancelled.
	Partition int   `json:"partition,omitempty"`
	Before    int64 `json:"before,omitempty"`
	// Status of a completion.
	Status Status    `json:"status,omitempty"`
	At     time.Time `json:"at"`
}

// Identity returns the record's identity triple.
func (c *Control) Identity() Identity {
	return Identity{Tenant: c.Tenant, User: c.User, Conversation: c.Conversation}
}

var controlKeys = map[string]bool{
	"v": true, "type": true, "tenant": true, "user": true, "conversation": true,
	"request_id": true, "partition": true, "before": true, "status": true, "at": true,
}

// Validate checks a control record.
func (c *Control) Validate() error {
	errs := []error{c.Identity().Validate()}
	if c.V != Version {
		errs = append(errs, fmt.Errorf("%w v: %d, want %d", ErrInvalid, c.V, Version))
	}
	if c.RequestID != "" {
		errs = append(errs, ValidateID("request_id", c.RequestID))
	}
	switch c.Type {
	case ControlCancel:
		if c.Partition < 0 || c.Before < 0 {
			errs = append(errs, fmt.Errorf("%w cancel: bad partition %d or offset %d", ErrInvalid, c.Partition, c.Before))
		}
	case ControlCompleted:
		if c.RequestID == "" {
			errs = append(errs, fmt.Errorf("%w completed: no request_id", ErrInvalid))
		}
		errs = append(errs, c.Status.Validate())
	default:
		errs = append(errs, fmt.Errorf("%w control type %q", ErrInvalid, truncate(string(c.Type), 32)))
	}
	return errors.Join(errs...)
}

// DecodeControl strictly decodes and validates a control record.
func DecodeControl(b []byte) (Control, error) {
	var c Control
	if err := checkKeys(b, MaxEventBytes, controlKeys); err != nil {
		return Control{}, err
	}
	if err := decodeStrict(b, MaxEventBytes, &c); err != nil {
		return Control{}, err
	}
	if err := c.Validate(); err != nil {
		return Control{}, err
	}
	return c, nil
}

// EncodeControl encodes c. It does not validate.
func EncodeControl(c Control) ([]byte, error) { return json.Marshal(c) }
