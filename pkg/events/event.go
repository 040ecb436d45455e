package events

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Type names a stream event.
type Type string

// The stream event types of docs/api.md.
const (
	TypeRunStarted   Type = "run.started"
	TypeToken        Type = "token"
	TypeNotice       Type = "notice"
	TypeRunCompleted Type = "run.completed"
	// TypeAgentTransfer and TypeRunInterrupted extend the contract (docs/api.md):
	// one agent handed the conversation to another; a run stopped to ask
	// the user something.
	TypeAgentTransfer  Type = "agent.transfer"
	TypeRunInterrupted Type = "run.interrupted"
	// TypeStateChanged extends the contract (docs/api.md "state.changed"):
	// the run's committed turn changed session state; it names the keys,
	// never their values.
	TypeStateChanged Type = "state.changed"
	// TypeArtifactSaved extends the contract (docs/api.md
	// "artifact.saved"): a tool of the run saved an artifact, and the
	// version is now published (readable over HTTP).
	TypeArtifactSaved Type = "artifact.saved"
)

// Status is how a request ended, carried by run.completed and by assistant
// messages in history.
type Status string

// The statuses of docs/api.md.
const (
	StatusComplete   Status = "complete"
	StatusIncomplete Status = "incomplete"
	StatusCancelled  Status = "cancelled"
	StatusDiscarded  Status = "discarded"
	StatusRejected   Status = "rejected"
	StatusFailed     Status = "failed"
	// StatusInterrupted is an extension (docs/api.md): the run stopped to ask
	// the user something (run.interrupted says what); its partial answer
	// and the question are persisted, and POST …/resume continues it.
	StatusInterrupted Status = "interrupted"
)

// Persisted reports whether the status means an assistant message (and its
// user message) was persisted for the request.
func (s Status) Persisted() bool {
	return s == StatusComplete || s == StatusIncomplete || s == StatusCancelled || s == StatusInterrupted
}

// Validate reports whether s is a known status.
func (s Status) Validate() error {
	switch s {
	case StatusComplete, StatusIncomplete, StatusCancelled, StatusDiscarded, StatusRejected, StatusFailed, StatusInterrupted:
		return nil
	}
	return fmt.Errorf("%w status %q", ErrInvalid, truncate(string(s), 32))
}

// Size limits of stream event fields. A token event is at most one
// coalesced batch of deltas; producers split longer text over several token
// events. The field limits are chosen so that any event within them encodes
// in at most MaxEventBytes even if every byte is escaped ("\u0001" is 6
// bytes), so what DecodeEvent accepts, AppendEvent re-encodes into something
// DecodeEvent accepts again.
const (
	MaxDeltaBytes  = 8 << 10
	MaxNoticeBytes = 4 << 10
	MaxAgentBytes  = 256
	MaxCursorBytes = 128
	// MaxQuestionBytes bounds the question of an interrupt.
	MaxQuestionBytes = 4 << 10
	MaxEventBytes    = 64 << 10
	maxRoleBytes     = 32
	// MaxStateKeyBytes bounds a session-state key (without its scope
	// prefix): history.MaxStateKeyBytes is this.
	MaxStateKeyBytes = 128
	// MaxStateChangedKeys bounds the keys of one scope a state.changed
	// event lists (a run changes at most history.MaxStateKeys of each).
	MaxStateChangedKeys = 128
	// MaxStateChangedBytes bounds the bytes of all the keys one
	// state.changed event lists; the emitter lists fewer and sets
	// Truncated beyond it.
	MaxStateChangedBytes = 16 << 10
	maxMetaIDFields      = MaxIDLen
	// MaxArtifactNameBytes bounds an artifact's name in artifact.saved
	// ("user:" prefix included): history.MaxArtifactNameBytes is this.
	MaxArtifactNameBytes = 128
	// MaxArtifactMIMEBytes bounds an artifact's MIME type in
	// artifact.saved: history.MaxArtifactMIMEBytes is this.
	MaxArtifactMIMEBytes = 128
)

// Meta holds the fields every stream event carries.
type Meta struct {
	Conversation string
	RequestID    string
	RunID        string
	// Seq is 1, 2, 3 … contiguous over all events of a run, in emission order.
	Seq int64
	// TS is the unix time in nanoseconds when the worker emitted the event.
	TS int64
	// Cursor is set by the push gateway only: the opaque resume position of
	// the event. It is never part of the stream topic record.
	Cursor string
}

// Event is one stream event. The concrete types are *RunStartedEvent,
// *TokenEvent, *NoticeEvent, *RunCompletedEvent, *AgentTransferEvent,
// *RunInterruptedEvent, *StateChangedEvent and *ArtifactSavedEvent.
type Event interface {
	Type() Type
	// Header returns the common fields; callers may modify them.
	Header() *Meta
}

// RunStartedEvent says a worker began (or restarted, with a new run id) a request.
type RunStartedEvent struct {
	Meta
	// Agent, an extension of the contract (docs/api.md), is the agent the
	// run starts from when it is not the root: the conversation was left
	// with a sub-agent that did not hand it back. "" (absent on the wire)
	// for the root.
	Agent string
}

// TokenEvent carries one or more tokens of assistant text.
type TokenEvent struct {
	Meta
	Delta string
	Agent string
	Role  string
}

// NoticeEvent is an ephemeral message for clients (for example an error
// notice). It is never persisted.
type NoticeEvent struct {
	Meta
	Message string
}

// RunCompletedEvent ends every request, exactly once.
type RunCompletedEvent struct {
	Meta
	Status Status
	// Usage is the run's token usage, when the model reported any
	// ("usage" is absent otherwise): an extension, in docs/api.md.
	Usage *Usage
}

// Usage counts the tokens of a run, summed over its model calls.
type Usage struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	TotalTokens      int64 `json:"total_tokens"`
}

// AgentTransferEvent says agent From handed the conversation to agent To
// (an eino adk transfer between a supervisor and its sub-agents).
type AgentTransferEvent struct {
	Meta
	From, To string
}

// RunInterruptedEvent says the run stopped to ask the user something. It
// is followed by run.completed with status interrupted; POST …/resume
// with the user's answer continues the run.
type RunInterruptedEvent struct {
	Meta
	Interrupt Interrupt
}

// StateChangedEvent says the run's turn, now committed, changed session
// state: the keys it set or deleted, by scope, without their values (the
// stream reaches every subscriber of the conversation; GET
// /v1/conversations/{conversation}/state returns the values to the
// identity alone). Only the conversation and the user scopes are listed,
// the ones that GET returns; temp: keys are never saved and tenant: keys
// are not shown. It comes right before run.interrupted or run.completed
// and is never emitted for a run that persisted nothing.
type StateChangedEvent struct {
	Meta
	// Conversation and User are the keys set or deleted (sorted, without
	// their scope prefix; a deleted key is listed as a set one is: GET
	// tells which remain). At least one of the two is non-empty.
	Conversation, User []string
	// Truncated says keys were left out to keep the event within
	// MaxStateChangedBytes: re-read the whole state.
	Truncated bool
}

// ArtifactSavedEvent says a version of an artifact a tool of the run
// saved is published: GET /v1/conversations/{conversation}/artifacts/{name}
// serves it from now on. It is emitted after the commit of the run's turn
// and the publish that follows it, never before, one per published
// version, in save order, right before state.changed (when there is one),
// run.interrupted and run.completed. A redelivered request whose turn is
// committed publishes its manifest again and may emit it again for the
// same version: clients deduplicate by (Artifact.Name, Artifact.Version).
type ArtifactSavedEvent struct {
	Meta
	Artifact ArtifactInfo
}

// ArtifactInfo describes one published version of an artifact.
type ArtifactInfo struct {
	// Name is the artifact's name, "user:" prefix included for one shared
	// by the user's conversations: 1..MaxArtifactNameBytes bytes without
	// control characters.
	Name string `json:"name"`
	// Version is the published version, from 1.
	Version int64 `json:"version"`
	// MIME is the content's media type: 1..MaxArtifactMIMEBytes bytes of
	// printable ASCII.
	MIME string `json:"mime_type"`
	// Size is the content's length in bytes (>= 0).
	Size int64 `json:"size"`
}

// Interrupt describes what an interrupted run waits for.
type Interrupt struct {
	// Agent is the agent that was interrupted.
	Agent string `json:"agent"`
	// Tool is the tool that interrupted ("" when the agent itself did).
	Tool string `json:"tool"`
	// Question is the text to show the user (for example the ask_user
	// tool's question, or what an approval is needed for).
	Question string `json:"question"`
}

func (*RunStartedEvent) Type() Type          { return TypeRunStarted }
func (*TokenEvent) Type() Type               { return TypeToken }
func (*NoticeEvent) Type() Type              { return TypeNotice }
func (*RunCompletedEvent) Type() Type        { return TypeRunCompleted }
func (*AgentTransferEvent) Type() Type       { return TypeAgentTransfer }
func (*RunInterruptedEvent) Type() Type      { return TypeRunInterrupted }
func (*StateChangedEvent) Type() Type        { return TypeStateChanged }
func (*ArtifactSavedEvent) Type() Type       { return TypeArtifactSaved }
func (e *ArtifactSavedEvent) Header() *Meta  { return &e.Meta }
func (e *StateChangedEvent) Header() *Meta   { return &e.Meta }
func (e *AgentTransferEvent) Header() *Meta  { return &e.Meta }
func (e *RunInterruptedEvent) Header() *Meta { return &e.Meta }
func (e *RunStartedEvent) Header() *Meta     { return &e.Meta }
func (e *TokenEvent) Header() *Meta          { return &e.Meta }
func (e *NoticeEvent) Header() *Meta         { return &e.Meta }
func (e *RunCompletedEvent) Header() *Meta   { return &e.Meta }

// AppendEvent appends the JSON encoding of e to dst. "type" comes first,
// then the common fields in a fixed order, then the type's own fields.
// Invalid UTF-8 in strings is replaced by U+FFFD, as encoding/json does.
func AppendEvent(dst []byte, e Event) []byte {
	m := e.Header()
	dst = append(dst, `{"type":"`...)
	dst = append(dst, e.Type()...)
	dst = append(dst, `","conversation":`...)
	dst = appendString(dst, m.Conversation)
	dst = append(dst, `,"request_id":`...)
	dst = appendString(dst, m.RequestID)
	dst = append(dst, `,"run_id":`...)
	dst = appendString(dst, m.RunID)
	dst = append(dst, `,"seq":`...)
	dst = strconv.AppendInt(dst, m.Seq, 10)
	dst = append(dst, `,"ts":`...)
	dst = strconv.AppendInt(dst, m.TS, 10)
	switch e := e.(type) {
	case *TokenEvent:
		dst = append(dst, `,"delta":`...)
		dst = appendString(dst, e.Delta)
		dst = append(dst, `,"agent":`...)
		dst = appendString(dst, e.Agent)
		dst = append(dst, `,"role":`...)
		dst = appendString(dst, e.Role)
	case *NoticeEvent:
		dst = append(dst, `,"message":`...)
		dst = appendString(dst, e.Message)
	case *RunCompletedEvent:
		dst = append(dst, `,"status":`...)
		dst = appendString(dst, string(e.Status))
		if u := e.Usage; u != nil {
			dst = append(dst, `,"usage":{"prompt_tokens":`...)
			dst = strconv.AppendInt(dst, u.PromptTokens, 10)
			dst = append(dst, `,"completion_tokens":`...)
			dst = strconv.AppendInt(dst, u.CompletionTokens, 10)
			dst = append(dst, `,"total_tokens":`...)
			dst = strconv.AppendInt(dst, u.TotalTokens, 10)
			dst = append(dst, '}')
		}
	case *RunStartedEvent:
		if e.Agent != "" {
			dst = append(dst, `,"agent":`...)
			dst = appendString(dst, e.Agent)
		}
	case *AgentTransferEvent:
		dst = append(dst, `,"from":`...)
		dst = appendString(dst, e.From)
		dst = append(dst, `,"to":`...)
		dst = appendString(dst, e.To)
	case *RunInterruptedEvent:
		dst = append(dst, `,"interrupt":{"agent":`...)
		dst = appendString(dst, e.Interrupt.Agent)
		dst = append(dst, `,"tool":`...)
		dst = appendString(dst, e.Interrupt.Tool)
		dst = append(dst, `,"question":`...)
		dst = appendString(dst, e.Interrupt.Question)
		dst = append(dst, '}')
	case *StateChangedEvent:
		dst = append(dst, `,"keys":{"conversation":`...)
		dst = appendStrings(dst, e.Conversation)
		dst = append(dst, `,"user":`...)
		dst = appendStrings(dst, e.User)
		dst = append(dst, '}')
		if e.Truncated {
			dst = append(dst, `,"truncated":true`...)
		}
	case *ArtifactSavedEvent:
		dst = append(dst, `,"artifact":{"name":`...)
		dst = appendString(dst, e.Artifact.Name)
		dst = append(dst, `,"version":`...)
		dst = strconv.AppendInt(dst, e.Artifact.Version, 10)
		dst = append(dst, `,"mime_type":`...)
		dst = appendString(dst, e.Artifact.MIME)
		dst = append(dst, `,"size":`...)
		dst = strconv.AppendInt(dst, e.Artifact.Size, 10)
		dst = append(dst, '}')
	}
	if m.Cursor != "" {
		return AppendCursor(dst, m.Cursor)
	}
	return append(dst, '}')
}

// appendStrings appends ss as a JSON array of strings ([] when empty).
func appendStrings(dst []byte, ss []string) []byte {
	dst = append(dst, '[')
	for i, s := range ss {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendString(dst, s)
	}
	return append(dst, ']')
}

// AppendCursor appends `,"cursor":"…"}` to dst. With dst holding an encoded
// event without its closing brace, this adds a cursor without decoding the
// event; the push gateway uses it to stamp one encoding per event.
func AppendCursor(dst []byte, cursor string) []byte {
	dst = append(dst, `,"cursor":`...)
	dst = appendString(dst, cursor)
	return append(dst, '}')
}

// MarshalEvent returns the JSON encoding of e.
func MarshalEvent(e Event) []byte { return AppendEvent(make([]byte, 0, 192), e) }

const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string, escaping as encoding/json does
// (without HTML escaping) and replacing invalid UTF-8 by U+FFFD.
func appendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		// U+2028 and U+2029 are valid JSON but break JavaScript parsers.
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// wireEvent is the decoding shape of every stream event.
type wireEvent struct {
	Type         Type    `json:"type"`
	Conversation string  `json:"conversation"`
	RequestID    string  `json:"request_id"`
	RunID        string  `json:"run_id"`
	Seq          int64   `json:"seq"`
	TS           int64   `json:"ts"`
	Cursor       *string `json:"cursor"`
	Delta        *string `json:"delta"`
	Agent        *string `json:"agent"`
	Role         *string `json:"role"`
	Message      *string `json:"message"`
	Status       *Status `json:"status"`
	From         *string `json:"from"`
	To           *string `json:"to"`
	// Nested objects are checked as strictly as the event itself.
	Usage     json.RawMessage `json:"usage"`
	Interrupt json.RawMessage `json:"interrupt"`
	Keys      json.RawMessage `json:"keys"`
	Truncated *bool           `json:"truncated"`
	Artifact  json.RawMessage `json:"artifact"`
}

var eventKeys = map[string]bool{
	"type": true, "conversation": true, "request_id": true, "run_id": true, "seq": true, "ts": true,
	"cursor": true, "delta": true, "agent": true, "role": true, "message": true, "status": true,
	"from": true, "to": true, "usage": true, "interrupt": true, "keys": true, "truncated": true,
	"artifact": true,
}

var (
	usageKeys     = map[string]bool{"prompt_tokens": true, "completion_tokens": true, "total_tokens": true}
	interruptKeys = map[string]bool{"agent": true, "tool": true, "question": true}
	stateKeysKeys = map[string]bool{"conversation": true, "user": true}
	artifactKeys  = map[string]bool{"name": true, "version": true, "mime_type": true, "size": true}
)

// isNull reports whether a raw JSON value is absent or null.
func isNull(raw json.RawMessage) bool { return len(raw) == 0 || string(raw) == "null" }

// decodeUsage strictly decodes a usage object: exactly its three counts,
// each an integer >= 0.
func decodeUsage(raw json.RawMessage) (*Usage, error) {
	if err := checkKeys(raw, MaxEventBytes, usageKeys); err != nil {
		return nil, fmt.Errorf("usage: %w", err)
	}
	var w struct {
		PromptTokens     *int64 `json:"prompt_tokens"`
		CompletionTokens *int64 `json:"completion_tokens"`
		TotalTokens      *int64 `json:"total_tokens"`
	}
	if err := decodeStrict(raw, MaxEventBytes, &w); err != nil {
		return nil, fmt.Errorf("usage: %w", err)
	}
	if w.PromptTokens == nil || w.CompletionTokens == nil || w.TotalTokens == nil {
		return nil, fmt.Errorf("%w usage: want prompt_tokens, completion_tokens and total_tokens", ErrInvalid)
	}
	if *w.PromptTokens < 0 || *w.CompletionTokens < 0 || *w.TotalTokens < 0 {
		return nil, fmt.Errorf("%w usage: negative token count", ErrInvalid)
	}
	return &Usage{PromptTokens: *w.PromptTokens, CompletionTokens: *w.CompletionTokens, TotalTokens: *w.TotalTokens}, nil
}

// decodeInterrupt strictly decodes an interrupt object.
func decodeInterrupt(raw json.RawMessage) (Interrupt, error) {
	if err := checkKeys(raw, MaxEventBytes, interruptKeys); err != nil {
		return Interrupt{}, fmt.Errorf("interrupt: %w", err)
	}
	var w struct {
		Agent    *string `json:"agent"`
		Tool     *string `json:"tool"`
		Question *string `json:"question"`
	}
	if err := decodeStrict(raw, MaxEventBytes, &w); err != nil {
		return Interrupt{}, fmt.Errorf("interrupt: %w", err)
	}
	switch {
	case w.Agent == nil || w.Tool == nil || w.Question == nil:
		return Interrupt{}, fmt.Errorf("%w interrupt: want agent, tool and question", ErrInvalid)
	case len(*w.Agent) > MaxAgentBytes || len(*w.Tool) > MaxAgentBytes:
		return Interrupt{}, fmt.Errorf("%w interrupt: agent or tool over %d bytes", ErrInvalid, MaxAgentBytes)
	case len(*w.Question) > MaxQuestionBytes:
		return Interrupt{}, fmt.Errorf("%w interrupt: question over %d bytes", ErrInvalid, MaxQuestionBytes)
	}
	return Interrupt{Agent: *w.Agent, Tool: *w.Tool, Question: *w.Question}, nil
}

// decodeStateKeys strictly decodes state.changed's keys object: both
// lists, each of at most MaxStateChangedKeys distinct keys of
// 1..MaxStateKeyBytes bytes without control characters, at most
// MaxStateChangedBytes of keys in all, and at least one key.
func decodeStateKeys(raw json.RawMessage) (conv, user []string, err error) {
	if err := checkKeys(raw, MaxEventBytes, stateKeysKeys); err != nil {
		return nil, nil, fmt.Errorf("keys: %w", err)
	}
	var w struct {
		Conversation *[]string `json:"conversation"`
		User         *[]string `json:"user"`
	}
	if err := decodeStrict(raw, MaxEventBytes, &w); err != nil {
		return nil, nil, fmt.Errorf("keys: %w", err)
	}
	if w.Conversation == nil || w.User == nil {
		return nil, nil, fmt.Errorf("%w keys: want conversation and user", ErrInvalid)
	}
	size := 0
	for _, scope := range []struct {
		name string
		keys []string
	}{{"conversation", *w.Conversation}, {"user", *w.User}} {
		if len(scope.keys) > MaxStateChangedKeys {
			return nil, nil, fmt.Errorf("%w keys: %s: %d keys, at most %d", ErrInvalid, scope.name, len(scope.keys), MaxStateChangedKeys)
		}
		seen := make(map[string]bool, len(scope.keys))
		for _, k := range scope.keys {
			switch {
			case k == "" || len(k) > MaxStateKeyBytes:
				return nil, nil, fmt.Errorf("%w keys: %s: a key of %d bytes, want 1..%d", ErrInvalid, scope.name, len(k), MaxStateKeyBytes)
			case strings.ContainsFunc(k, func(r rune) bool { return r < 0x20 || r == 0x7f }):
				return nil, nil, fmt.Errorf("%w keys: %s: a key with a control character", ErrInvalid, scope.name)
			case seen[k]:
				return nil, nil, fmt.Errorf("%w keys: %s: key %q listed twice", ErrInvalid, scope.name, k)
			}
			seen[k] = true
			size += len(k)
		}
	}
	if size > MaxStateChangedBytes {
		return nil, nil, fmt.Errorf("%w keys: %d bytes of keys, at most %d", ErrInvalid, size, MaxStateChangedBytes)
	}
	if len(*w.Conversation) == 0 && len(*w.User) == 0 {
		return nil, nil, fmt.Errorf("%w keys: no key", ErrInvalid)
	}
	// An empty list decodes as nil, as the encoder's [] is written from.
	if len(*w.Conversation) > 0 {
		conv = *w.Conversation
	}
	if len(*w.User) > 0 {
		user = *w.User
	}
	return conv, user, nil
}

// decodeArtifact strictly decodes artifact.saved's artifact object: its
// four members, a name of 1..MaxArtifactNameBytes bytes without control
// characters, a version >= 1, a MIME type of 1..MaxArtifactMIMEBytes bytes
// of printable ASCII and a size >= 0.
func decodeArtifact(raw json.RawMessage) (ArtifactInfo, error) {
	if err := checkKeys(raw, MaxEventBytes, artifactKeys); err != nil {
		return ArtifactInfo{}, fmt.Errorf("artifact: %w", err)
	}
	var w struct {
		Name    *string `json:"name"`
		Version *int64  `json:"version"`
		MIME    *string `json:"mime_type"`
		Size    *int64  `json:"size"`
	}
	if err := decodeStrict(raw, MaxEventBytes, &w); err != nil {
		return ArtifactInfo{}, fmt.Errorf("artifact: %w", err)
	}
	switch {
	case w.Name == nil || w.Version == nil || w.MIME == nil || w.Size == nil:
		return ArtifactInfo{}, fmt.Errorf("%w artifact: want name, version, mime_type and size", ErrInvalid)
	case *w.Name == "" || len(*w.Name) > MaxArtifactNameBytes:
		return ArtifactInfo{}, fmt.Errorf("%w artifact: name of %d bytes, want 1..%d", ErrInvalid, len(*w.Name), MaxArtifactNameBytes)
	case strings.ContainsFunc(*w.Name, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return ArtifactInfo{}, fmt.Errorf("%w artifact: a name with a control character", ErrInvalid)
	case *w.Version < 1:
		return ArtifactInfo{}, fmt.Errorf("%w artifact: version %d, want >= 1", ErrInvalid, *w.Version)
	case *w.MIME == "" || len(*w.MIME) > MaxArtifactMIMEBytes:
		return ArtifactInfo{}, fmt.Errorf("%w artifact: mime_type of %d bytes, want 1..%d", ErrInvalid, len(*w.MIME), MaxArtifactMIMEBytes)
	case strings.ContainsFunc(*w.MIME, func(r rune) bool { return r < 0x20 || r >= 0x7f }):
		return ArtifactInfo{}, fmt.Errorf("%w artifact: mime_type is not printable ASCII", ErrInvalid)
	case *w.Size < 0:
		return ArtifactInfo{}, fmt.Errorf("%w artifact: size %d, want >= 0", ErrInvalid, *w.Size)
	}
	return ArtifactInfo{Name: *w.Name, Version: *w.Version, MIME: *w.MIME, Size: *w.Size}, nil
}

// DecodeEvent strictly decodes one stream event, as read from the stream
// topic or from the push gateway's WebSocket (where it carries a cursor).
// Fields of another event type, unknown or duplicated fields, a missing
// field, a bad identifier, invalid UTF-8 or an oversized field are errors.
func DecodeEvent(b []byte) (Event, error) {
	if err := checkKeys(b, MaxEventBytes, eventKeys); err != nil {
		return nil, err
	}
	var w wireEvent
	if err := decodeStrict(b, MaxEventBytes, &w); err != nil {
		return nil, err
	}
	m := Meta{Conversation: w.Conversation, RequestID: w.RequestID, RunID: w.RunID, Seq: w.Seq, TS: w.TS}
	if err := m.validate(); err != nil {
		return nil, fmt.Errorf("%s event: %w", truncate(string(w.Type), 32), err)
	}
	if w.Cursor != nil {
		if *w.Cursor == "" || len(*w.Cursor) > MaxCursorBytes {
			return nil, fmt.Errorf("%w cursor: want 1..%d bytes", ErrInvalid, MaxCursorBytes)
		}
		m.Cursor = *w.Cursor
	}
	// present says which of the type-specific fields the event has; usage
	// is optional (on run.completed only) and checked apart.
	present := map[string]bool{"delta": w.Delta != nil, "agent": w.Agent != nil, "role": w.Role != nil,
		"message": w.Message != nil, "status": w.Status != nil, "from": w.From != nil, "to": w.To != nil,
		"interrupt": !isNull(w.Interrupt), "keys": !isNull(w.Keys), "artifact": !isNull(w.Artifact)}
	allowed := func(fields ...string) error {
		want := make(map[string]bool, len(fields))
		for _, f := range fields {
			want[f] = true
		}
		for _, name := range []string{"delta", "agent", "role", "message", "status", "from", "to", "interrupt", "keys", "artifact"} {
			if present[name] != want[name] {
				if want[name] {
					return fmt.Errorf("%w %s event: missing %s", ErrInvalid, w.Type, name)
				}
				return fmt.Errorf("%w %s event: unexpected field %s", ErrInvalid, w.Type, name)
			}
		}
		if !isNull(w.Usage) && w.Type != TypeRunCompleted {
			return fmt.Errorf("%w %s event: unexpected field usage", ErrInvalid, w.Type)
		}
		if w.Truncated != nil && w.Type != TypeStateChanged {
			return fmt.Errorf("%w %s event: unexpected field truncated", ErrInvalid, w.Type)
		}
		return nil
	}
	switch w.Type {
	case TypeRunStarted:
		// agent is optional here: present only when the run starts from a
		// sub-agent.
		agent := w.Agent
		present["agent"] = false
		if err := allowed(); err != nil {
			return nil, err
		}
		e := &RunStartedEvent{Meta: m}
		if agent != nil {
			if *agent == "" || len(*agent) > MaxAgentBytes {
				return nil, fmt.Errorf("%w run.started event: agent must be 1..%d bytes", ErrInvalid, MaxAgentBytes)
			}
			e.Agent = *agent
		}
		return e, nil
	case TypeToken:
		if err := allowed("delta", "agent", "role"); err != nil {
			return nil, err
		}
		switch {
		case len(*w.Delta) > MaxDeltaBytes:
			return nil, fmt.Errorf("%w token event: delta over %d bytes", ErrInvalid, MaxDeltaBytes)
		case len(*w.Agent) > MaxAgentBytes:
			return nil, fmt.Errorf("%w token event: agent over %d bytes", ErrInvalid, MaxAgentBytes)
		case *w.Role == "" || len(*w.Role) > maxRoleBytes:
			return nil, fmt.Errorf("%w token event: role must be 1..%d bytes", ErrInvalid, maxRoleBytes)
		}
		return &TokenEvent{Meta: m, Delta: *w.Delta, Agent: *w.Agent, Role: *w.Role}, nil
	case TypeNotice:
		if err := allowed("message"); err != nil {
			return nil, err
		}
		if len(*w.Message) > MaxNoticeBytes {
			return nil, fmt.Errorf("%w notice event: message over %d bytes", ErrInvalid, MaxNoticeBytes)
		}
		return &NoticeEvent{Meta: m, Message: *w.Message}, nil
	case TypeRunCompleted:
		if err := allowed("status"); err != nil {
			return nil, err
		}
		if err := w.Status.Validate(); err != nil {
			return nil, fmt.Errorf("run.completed event: %w", err)
		}
		e := &RunCompletedEvent{Meta: m, Status: *w.Status}
		if !isNull(w.Usage) {
			u, err := decodeUsage(w.Usage)
			if err != nil {
				return nil, fmt.Errorf("run.completed event: %w", err)
			}
			e.Usage = u
		}
		return e, nil
	case TypeAgentTransfer:
		if err := allowed("from", "to"); err != nil {
			return nil, err
		}
		if len(*w.From) > MaxAgentBytes || *w.To == "" || len(*w.To) > MaxAgentBytes {
			return nil, fmt.Errorf("%w agent.transfer event: from must be 0..%d bytes, to 1..%d", ErrInvalid, MaxAgentBytes, MaxAgentBytes)
		}
		return &AgentTransferEvent{Meta: m, From: *w.From, To: *w.To}, nil
	case TypeRunInterrupted:
		if err := allowed("interrupt"); err != nil {
			return nil, err
		}
		in, err := decodeInterrupt(w.Interrupt)
		if err != nil {
			return nil, fmt.Errorf("run.interrupted event: %w", err)
		}
		return &RunInterruptedEvent{Meta: m, Interrupt: in}, nil
	case TypeStateChanged:
		if err := allowed("keys"); err != nil {
			return nil, err
		}
		conv, user, err := decodeStateKeys(w.Keys)
		if err != nil {
			return nil, fmt.Errorf("state.changed event: %w", err)
		}
		e := &StateChangedEvent{Meta: m, Conversation: conv, User: user}
		if w.Truncated != nil {
			// One encoding per value: absent, never false.
			if !*w.Truncated {
				return nil, fmt.Errorf("%w state.changed event: truncated is true or absent", ErrInvalid)
			}
			e.Truncated = true
		}
		return e, nil
	case TypeArtifactSaved:
		if err := allowed("artifact"); err != nil {
			return nil, err
		}
		a, err := decodeArtifact(w.Artifact)
		if err != nil {
			return nil, fmt.Errorf("artifact.saved event: %w", err)
		}
		return &ArtifactSavedEvent{Meta: m, Artifact: a}, nil
	case "":
		return nil, fmt.Errorf("%w event: missing type", ErrInvalid)
	}
	return nil, fmt.Errorf("%w event: unknown type %q", ErrInvalid, truncate(string(w.Type), 32))
}

func (m *Meta) validate() error {
	if err := ValidateID("conversation", m.Conversation); err != nil {
		return err
	}
	if err := ValidateID("request_id", m.RequestID); err != nil {
		return err
	}
	if err := ValidateID("run_id", m.RunID); err != nil {
		return err
	}
	if m.Seq < 1 {
		return fmt.Errorf("%w seq: %d, want >= 1", ErrInvalid, m.Seq)
	}
	if m.TS <= 0 {
		return fmt.Errorf("%w ts: %d, want unix nanoseconds > 0", ErrInvalid, m.TS)
	}
	return nil
}

// checkKeys walks the top level of a JSON object and rejects keys outside
// allowed and duplicated keys. encoding/json matches keys case-insensitively
// and keeps the last duplicate; strict decoding allows neither.
func checkKeys(b []byte, max int, allowed map[string]bool) error {
	if len(b) > max {
		return fmt.Errorf("%w record: %w: %d bytes, at most %d allowed", ErrInvalid, ErrTooLarge, len(b), max)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	tok, err := dec.Token()
	if err != nil {
		return fmt.Errorf("%w json: %w", ErrInvalid, err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return fmt.Errorf("%w json: want an object", ErrInvalid)
	}
	seen := make(map[string]bool, len(allowed))
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return fmt.Errorf("%w json: %w", ErrInvalid, err)
		}
		k, _ := tok.(string)
		if !allowed[k] {
			return fmt.Errorf("%w json: unknown field %q", ErrInvalid, truncate(k, 32))
		}
		if seen[k] {
			return fmt.Errorf("%w json: duplicate field %q", ErrInvalid, k)
		}
		seen[k] = true
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return fmt.Errorf("%w json: %w", ErrInvalid, err)
		}
	}
	return nil
}
