package loadgen

import (
	"maps"
	"sync"
)

// Violation kinds: what the oracle checks under load. Each is a broken
// promise of docs/api.md, never a slow answer.
const (
	// KindBadFrame: a frame that is not a JSON object.
	KindBadFrame = "bad_frame"
	// KindForeignEvent: an event of a conversation not subscribed on that
	// connection, or carrying a request id never sent in its conversation.
	KindForeignEvent = "foreign_event"
	// KindUnexpectedEvent: an event while no request of the conversation is
	// in flight, or after its request's run.completed.
	KindUnexpectedEvent = "unexpected_event"
	// KindOrder: an event of an earlier request of the conversation after a
	// later one was sent.
	KindOrder = "order"
	// KindFirstEvent: a run whose first event is not run.started with seq 1.
	KindFirstEvent = "run_started_first"
	// KindSeq: seqs of a run not contiguous.
	KindSeq = "seq"
	// KindStatus: a run completed with a status other than complete.
	KindStatus = "status"
	// KindText: the streamed text of a run is not the expected reply.
	KindText = "text"
	// KindRequestID: the 202's request_id is not the one its events carry.
	KindRequestID = "request_id"
	// KindHistoryCount: the history does not hold 2 messages per turn.
	KindHistoryCount = "history_count"
	// KindHistorySeq: history seqs are not 1..2M in order.
	KindHistorySeq = "history_seq"
	// KindHistoryMessage: a history message differs from what was sent or
	// streamed (role, content, request id, status).
	KindHistoryMessage = "history_message"
	// KindFloorOrder: a floor producer's records fetched out of order or twice.
	KindFloorOrder = "floor_order"
	// KindFloorMissing: floor records produced (acknowledged) but never fetched.
	KindFloorMissing = "floor_missing"
)

// maxListed is how many problems of each tally are kept in full.
const maxListed = 20

// Problem is one violation or error.
type Problem struct {
	Kind         string `json:"kind"`
	Conversation string `json:"conversation,omitempty"`
	Detail       string `json:"detail"`
}

// Problems counts problems by kind and keeps the first few in full.
type Problems struct {
	Total  int64            `json:"total"`
	ByKind map[string]int64 `json:"by_kind"`
	First  []Problem        `json:"first"`
}

// tally collects Problems; it is safe for concurrent use.
type tally struct {
	mu sync.Mutex
	p  Problems // guarded by mu
}

// add counts n problems of kind; the first few are kept with detail.
func (t *tally) add(kind, conversation, detail string) { t.addN(kind, conversation, detail, 1) }

func (t *tally) addN(kind, conversation, detail string, n int64) {
	if n <= 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.p.ByKind == nil {
		t.p.ByKind = make(map[string]int64)
	}
	t.p.Total += n
	t.p.ByKind[kind] += n
	if len(t.p.First) < maxListed {
		t.p.First = append(t.p.First, Problem{Kind: kind, Conversation: conversation, Detail: detail})
	}
}

func (t *tally) total() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.p.Total
}

// snapshot returns a copy of the problems so far.
func (t *tally) snapshot() Problems {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := Problems{Total: t.p.Total, ByKind: maps.Clone(t.p.ByKind), First: append([]Problem(nil), t.p.First...)}
	if p.ByKind == nil {
		p.ByKind = map[string]int64{}
	}
	if p.First == nil {
		p.First = []Problem{}
	}
	return p
}
