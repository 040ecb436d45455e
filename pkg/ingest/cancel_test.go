package ingest

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/turnpike-dev/turnpike/internal/server"
	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
)

type fakeCancels struct {
	mu      sync.Mutex
	ids     []events.Identity
	cancels []history.Cancel
	err     error
}

func (f *fakeCancels) RecordCancel(_ context.Context, id events.Identity, c history.Cancel) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return f.err
	}
	f.ids, f.cancels = append(f.ids, id), append(f.cancels, c)
	return nil
}

type fakePositions struct{ err error }

// fakeEnds are the end offsets of fakePositions' four partitions; the
// conversation's home is 3.
var fakeEnds = []int64{7, 0, 19, 42}

func (f fakePositions) End(context.Context, []byte) (Position, error) {
	return Position{Topic: "turnpike.requests", Partition: 3, Ends: fakeEnds}, f.err
}

func TestCancel(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		body        string
		cancelsErr  error
		positionErr error
		controlErr  error
		status      int
		code        string
		want        history.Cancel // when 202
		wantControl events.Control
	}{
		{
			name: "A cancel without a body cancels everything before the partition's end.", status: 202,
			want:        history.Cancel{Topic: "turnpike.requests", Partition: 3, Before: 42},
			wantControl: events.Control{Type: events.ControlCancel, Partition: 3, Before: 42},
		},
		{
			name: "An empty object is a cancel of everything.", body: `{}`, status: 202,
			want:        history.Cancel{Topic: "turnpike.requests", Partition: 3, Before: 42},
			wantControl: events.Control{Type: events.ControlCancel, Partition: 3, Before: 42},
		},
		{
			name: "A cancel with a request id cancels that request.", body: `{"request_id":"r-1"}`, status: 202,
			want:        history.Cancel{Topic: "turnpike.requests", Partition: 3, RequestID: "r-1"},
			wantControl: events.Control{Type: events.ControlCancel, RequestID: "r-1"},
		},
		{name: "A bad request id is refused.", body: `{"request_id":"a/b"}`, status: 400, code: server.CodeInvalidArgument},
		{name: "An unknown field is refused.", body: `{"request":"r-1"}`, status: 400, code: server.CodeInvalidArgument},
		{name: "A case variant of request_id is refused.", body: `{"Request_ID":"r-1"}`, status: 400, code: server.CodeInvalidArgument},
		{name: "A request id that is not a string is refused.", body: `{"request_id":7}`, status: 400, code: server.CodeInvalidArgument},
		{name: "A store failure is 503 and publishes nothing.", cancelsErr: errors.New("mongo down"), status: 503, code: server.CodeUnavailable},
		{name: "An unreachable Kafka is 503.", positionErr: errors.New("kafka down"), status: 503, code: server.CodeUnavailable},
		{name: "A failing control topic is 503.", controlErr: errors.New("kafka down"), status: 503, code: server.CodeUnavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cancels := &fakeCancels{err: tt.cancelsErr}
			control := &fakeProducer{}
			if tt.controlErr != nil {
				control.err = tt.controlErr
			}
			s := newTestServiceWith(t, Config{}, nil, nil, nil, func(d *serviceDeps) {
				d.Cancels, d.Control, d.Positions = cancels, control, fakePositions{err: tt.positionErr}
			})
			w := s.do(http.MethodPost, "/v1/conversations/c1/cancel", token(t, "acme", "ann"), tt.body, nil)
			if tt.status != 202 {
				checkError(t, w, tt.status, tt.code)
				if tt.cancelsErr != nil && len(control.all()) != 0 {
					t.Fatal("published a cancel that was not recorded")
				}
				return
			}
			if w.Code != 202 || w.Body.String() != "{\"status\":\"cancelling\"}\n" {
				t.Fatalf("answer %d %s", w.Code, w.Body)
			}
			id := events.Identity{Tenant: "acme", User: "ann", Conversation: "c1"}
			// Recorded in every partition, each with its own end offset: a
			// record written to another partition than its home is
			// cancelled there.
			if len(cancels.cancels) != len(fakeEnds) {
				t.Fatalf("recorded %+v, want one cancel in each of %d partitions", cancels.cancels, len(fakeEnds))
			}
			for i, got := range cancels.cancels {
				got.At = time.Time{}
				want := tt.want
				want.Partition = got.Partition
				if want.RequestID == "" {
					want.Before = fakeEnds[got.Partition]
				}
				if cancels.ids[i] != id || got != want {
					t.Fatalf("recorded %+v for %+v, want %+v", got, cancels.ids[i], want)
				}
			}
			if p := partitionsOf(cancels.cancels); len(p) != len(fakeEnds) {
				t.Fatalf("recorded in partitions %v, want each of %d once", p, len(fakeEnds))
			}
			recs := control.all()
			if len(recs) != 1 || string(recs[0].key) != id.Key() {
				t.Fatalf("control records %+v", recs)
			}
			ctl, err := events.DecodeControl(recs[0].value)
			if err != nil {
				t.Fatal(err)
			}
			if ctl.Identity() != id || ctl.Type != tt.wantControl.Type || ctl.RequestID != tt.wantControl.RequestID ||
				ctl.Partition != tt.wantControl.Partition || ctl.Before != tt.wantControl.Before {
				t.Fatalf("control %+v, want %+v", ctl, tt.wantControl)
			}
		})
	}
}

func TestRateLimitAnswers429WithRetryAfter(t *testing.T) {
	t.Parallel()
	s := newTestService(t, Config{RatePerSecond: 1, RateBurst: 2}, nil, nil, nil)
	tok := token(t, "acme", "ann")
	for i := range 2 {
		if w := s.do(http.MethodPost, "/v1/conversations/c1/messages", tok, `{"content":"hi"}`, nil); w.Code != 202 {
			t.Fatalf("POST %d within the burst: %d %s", i, w.Code, w.Body)
		}
	}
	w := s.do(http.MethodPost, "/v1/conversations/c1/messages", tok, `{"content":"hi"}`, nil)
	checkError(t, w, 429, server.CodeRateLimited)
	if w.Header().Get("Retry-After") != "1" {
		t.Fatalf("Retry-After %q", w.Header().Get("Retry-After"))
	}
	// Another user has a bucket of their own.
	if w := s.do(http.MethodPost, "/v1/conversations/c1/messages", token(t, "acme", "bob"), `{"content":"hi"}`, nil); w.Code != 202 {
		t.Fatalf("another user: %d", w.Code)
	}
}

func TestQueuedRequestsAreBoundedPerConversationAndTenant(t *testing.T) {
	t.Parallel()
	s := newTestService(t, Config{RatePerSecond: -1, MaxQueuedPerConversation: 2, MaxQueuedPerTenant: 3}, nil, nil, nil)
	post := func(user, conv string) (int, string) {
		w := s.do(http.MethodPost, "/v1/conversations/"+conv+"/messages", token(t, "acme", user), `{"content":"hi"}`, nil)
		var a accepted
		_ = json.Unmarshal(w.Body.Bytes(), &a)
		return w.Code, a.RequestID
	}
	_, first := post("ann", "c1")
	post("ann", "c1")
	if code, _ := post("ann", "c1"); code != 429 {
		t.Fatalf("third queued request of a conversation: %d, want 429", code)
	}
	if code, _ := post("ann", "c2"); code != 202 {
		t.Fatalf("another conversation: %d", code)
	}
	if code, _ := post("bob", "c9"); code != 429 {
		t.Fatalf("fourth queued request of the tenant: %d, want 429", code)
	}
	s.queued.forget(first) // a worker announced its end
	if code, _ := post("ann", "c1"); code != 202 {
		t.Fatalf("after one ended: %d, want 202", code)
	}
}

func TestAnIdempotentRetryIsNotCountedTwice(t *testing.T) {
	t.Parallel()
	s := newTestService(t, Config{RatePerSecond: -1, MaxQueuedPerConversation: 1}, nil, nil, nil)
	for i := range 3 {
		w := s.do(http.MethodPost, "/v1/conversations/c1/messages", token(t, "acme", "ann"), `{"content":"hi"}`, map[string]string{"Idempotency-Key": "k1"})
		if w.Code != 202 {
			t.Fatalf("retry %d: %d %s", i, w.Code, w.Body)
		}
	}
}

func partitionsOf(cs []history.Cancel) map[int]bool {
	p := map[int]bool{}
	for _, c := range cs {
		p[c.Partition] = true
	}
	return p
}
