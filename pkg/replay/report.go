package replay

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/turnpike-dev/turnpike/pkg/history"
)

// Actions of a redrive report line.
const (
	// actionPublished: the record was re-published to the requests topic.
	actionPublished = "published"
	// actionSkipped: the request is already decided (Status says how) and
	// was not re-published.
	actionSkipped = "skipped"
)

// Statuses of a report line besides the run statuses of docs/api.md.
const (
	// statusInvalid: the record does not decode as a request.
	statusInvalid = "invalid"
	// statusError: the run failed in the infrastructure (the shadow store).
	statusError = "error"
)

// reportLine is one line of the JSONL report: one selected record.
type reportLine struct {
	// Source is where the replay read the record.
	Source coordinates `json:"source"`
	// Origin, for a dead letter, is the requests-topic record it came from.
	Origin *coordinates `json:"origin,omitempty"`
	Key    string       `json:"key"`

	Tenant       string `json:"tenant,omitempty"`
	User         string `json:"user,omitempty"`
	Conversation string `json:"conversation,omitempty"`
	// RequestID is the id the request runs under; OriginalRequestID is set
	// when it differs (a derived id, or a re-run under a fresh id).
	RequestID         string `json:"request_id,omitempty"`
	OriginalRequestID string `json:"original_request_id,omitempty"`
	// DerivedID is set when the record had no request id and RequestID was
	// derived from its origin, as the worker derives it.
	DerivedID bool `json:"derived_id,omitempty"`

	// Action (redrive): published or skipped.
	Action string `json:"action,omitempty"`
	// Status: shadow, how the run ended (complete, incomplete, discarded,
	// failed, invalid, error); redrive, the recorded decision of a skipped
	// request, or invalid for a record re-published byte for byte.
	Status string `json:"status,omitempty"`

	// Content is the user message (shadow: it rebuilds histories on resume).
	Content string `json:"content,omitempty"`
	// Answer is the persisted answer, every part's text joined, and Agent
	// the agent of its last part: what a line held before parts, still
	// there for the readers of that format.
	Answer string `json:"answer,omitempty"`
	Agent  string `json:"agent,omitempty"`
	// Parts, for an answer of several agents, is each part: one assistant
	// message of the turn the worker persists, in order. A line without
	// parts (an answer of one agent, or a report written before parts)
	// is one assistant message: Answer, by Agent.
	Parts     []reportPart `json:"parts,omitempty"`
	Tokens    int          `json:"tokens,omitempty"`
	LatencyMS float64      `json:"latency_ms,omitempty"`
	Error     string       `json:"error,omitempty"`
}

// reportPart is a part of a report line's answer.
type reportPart struct {
	Agent string `json:"agent"`
	Text  string `json:"text"`
}

// reportParts is the report's form of parts: nil for one part or none.
func reportParts(parts []history.Part) []reportPart {
	if len(parts) < 2 {
		return nil
	}
	out := make([]reportPart, len(parts))
	for i, p := range parts {
		out[i] = reportPart{Agent: p.Agent, Text: p.Text}
	}
	return out
}

// historyParts is the answer of l as history.Turn holds it: its parts, or
// nil when it is one part (Answer, by Agent).
func (l *reportLine) historyParts() []history.Part {
	if len(l.Parts) == 0 {
		return nil
	}
	out := make([]history.Part, len(l.Parts))
	for i, p := range l.Parts {
		out[i] = history.Part{Agent: p.Agent, Text: p.Text}
	}
	return out
}

// seedLine is what a resumed shadow replay keeps of a report line to
// rebuild its shadow history (seed): false for a line without an answer.
func seedLine(l reportLine) (reportLine, bool) {
	if l.Answer == "" && len(l.Parts) == 0 {
		return reportLine{}, false
	}
	return reportLine{Tenant: l.Tenant, User: l.User, Conversation: l.Conversation, RequestID: l.RequestID,
		Content: l.Content, Answer: l.Answer, Agent: l.Agent, Parts: l.Parts, Status: l.Status,
		Source: coordinates{Time: l.Source.Time}}, true
}

// reportWriter appends lines to the report file. Safe for concurrent use.
type reportWriter struct {
	mu sync.Mutex // guards w and buf
	f  *os.File
	w  *bufio.Writer
}

// errReportExists is returned when the report file already has lines and
// the replay is not resumed: a report is never overwritten.
var errReportExists = errors.New("report exists")

// openReport opens the report for appending. Without resume the file must
// not exist or be empty. With resume a torn last line (a crash mid-write)
// is cut off, and each complete line is handed to each.
func openReport(path string, resume bool, each func(reportLine) error) (*reportWriter, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open report: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("open report: %w", err)
	}
	if st.Size() > 0 && !resume {
		f.Close()
		return nil, fmt.Errorf("%w: %s has lines: pass -resume to continue its replay, or choose another -report", errReportExists, path)
	}
	if resume {
		good, err := scanReport(f, each)
		if err == nil && good < st.Size() {
			err = f.Truncate(good)
		}
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("read report %s: %w", path, err)
		}
	}
	if _, err := f.Seek(0, io.SeekEnd); err != nil {
		f.Close()
		return nil, fmt.Errorf("open report: %w", err)
	}
	return &reportWriter{f: f, w: bufio.NewWriterSize(f, 256<<10)}, nil
}

// scanReport hands every complete line of r to each and returns the size
// of the complete lines.
func scanReport(r io.Reader, each func(reportLine) error) (int64, error) {
	br := bufio.NewReaderSize(r, 256<<10)
	var good int64
	for n := 1; ; n++ {
		b, err := br.ReadBytes('\n')
		if errors.Is(err, io.EOF) {
			return good, nil // a last line without its newline is torn
		}
		if err != nil {
			return good, err
		}
		var l reportLine
		if err := json.Unmarshal(bytes.TrimSpace(b), &l); err != nil {
			return good, fmt.Errorf("line %d: %w", n, err)
		}
		if each != nil {
			if err := each(l); err != nil {
				return good, err
			}
		}
		good += int64(len(b))
	}
}

// write appends one line (buffered).
func (r *reportWriter) write(l *reportLine) error {
	b, err := json.Marshal(l)
	if err != nil {
		return fmt.Errorf("report: %w", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, err := r.w.Write(b); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	if err := r.w.WriteByte('\n'); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	return nil
}

// flush writes the buffered lines to the file (and to disk when sync).
func (r *reportWriter) flush(sync bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.w.Flush(); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	if sync {
		if err := r.f.Sync(); err != nil {
			return fmt.Errorf("report: %w", err)
		}
	}
	return nil
}

// close flushes, syncs and closes the file.
func (r *reportWriter) close() error {
	err := r.flush(true)
	return errors.Join(err, r.f.Close())
}
