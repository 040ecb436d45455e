package worker

import (
	"context"
	"reflect"
	"unsafe"

	"github.com/cloudwego/eino/adk"

	"github.com/turnpike-dev/turnpike/pkg/bridge"
	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
)

// findAgent is the agent named name in the tree under root (root itself
// included), as eino runs it: the node adk.SetSubAgents made, which keeps
// its parent and sub-agents, so a run started from it can still transfer
// back to its parent. nil when there is none.
//
// eino v0.9.21 exports no way to walk a tree of agents: the nodes
// (adk's flowAgent) keep their sub-agents in an unexported field, which
// this reads by reflection. Pinned by TestFindAgentWalksEinosAgentTree;
// if a later eino moves the field, nothing is found and the run starts
// from the root (logged).
func findAgent(ctx context.Context, root adk.Agent, name string) adk.Agent {
	if root == nil {
		return nil
	}
	if root.Name(ctx) == name {
		return root
	}
	v := reflect.ValueOf(root)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
		return nil
	}
	subs := v.Elem().FieldByName("subAgents")
	if !subs.IsValid() || subs.Kind() != reflect.Slice {
		return nil
	}
	for i := range subs.Len() {
		e := subs.Index(i) // addressable: an element of a slice
		sub, ok := reflect.NewAt(e.Type(), unsafe.Pointer(e.UnsafeAddr())).Elem().Interface().(adk.Agent)
		if !ok {
			continue
		}
		if found := findAgent(ctx, sub, name); found != nil {
			return found
		}
	}
	return nil
}

// stateTurn is the run's pending turn with its session state: its commit
// keeps what the run changed of state and the agent the run leaves the
// conversation with (the destination of its last transfer, the root as
// "").
type stateTurn struct {
	*history.Pending
	state *State
	root  string // the root agent's name
	from  string // the agent the run started from ("": the root)
	agent string // the active agent now

	// arts is the run's artifacts (nil: none); artifacts, store, id and
	// requestID publish them after the commit.
	arts      *Artifacts
	artifacts history.ArtifactService
	// lost is told the committed saves the publish skipped (see
	// publishArtifacts).
	lost  func([]string)
	store history.Store
	// published is the versions the commit's publish made readable, for
	// PublishedArtifacts (the bridge's artifact.saved events).
	published []history.Artifact

	// written is the change the commit wrote: set only once the turn is
	// committed by this run (not a duplicate), for StateChanged.
	written *history.StateChange

	// id, requestID and question are the request's; with remember, a
	// commit that wrote the turn sets memory, what the run adds to
	// long-term memory.
	id                  events.Identity
	requestID, question string
	remember            bool
	memory              *history.Memory
}

var _ bridge.TransferTurn = (*stateTurn)(nil)
var _ bridge.AnswerTurn = (*stateTurn)(nil)
var _ bridge.StateTurn = (*stateTurn)(nil)
var _ bridge.ArtifactTurn = (*stateTurn)(nil)

// Transferred implements bridge.TransferTurn.
func (t *stateTurn) Transferred(_, to string) {
	t.agent = to
	if to == t.root {
		t.agent = ""
	}
}

// CommitAnswer commits the answer with the run's state change.
func (t *stateTurn) CommitAnswer(ctx context.Context, a history.Answer) (history.Committed, error) {
	a.State = t.state.change(t.agent, t.from)
	a.Artifacts = t.arts.manifest()
	c, err := t.Pending.CommitAnswer(ctx, a)
	if err == nil && !c.Duplicate {
		t.written = a.State
		if t.remember {
			t.memory = turnMemory(t.id, t.requestID, t.question, a, c)
		}
	}
	// A duplicate's turn (committed by the request's first run) is read
	// for its manifest only when it holds saves: duplicates are a hot
	// path.
	if err == nil && (!c.Duplicate || c.Artifacts > 0) {
		// The committed manifest's saves become readable: a failure
		// fails the request, whose redelivery publishes them again.
		published, err := publishArtifacts(ctx, t.artifacts, t.store, t.id, t.requestID, a.Artifacts, c.Duplicate, t.lost)
		if err != nil {
			return history.Committed{}, err
		}
		t.published = published
	}
	return c, err
}

// PublishedArtifacts implements bridge.ArtifactTurn: the versions the
// commit published (a duplicate's: the committed turn's manifest, again),
// for the bridge's artifact.saved events. Nothing before the commit.
func (t *stateTurn) PublishedArtifacts() []events.ArtifactInfo {
	return artifactInfos(t.published)
}

// StateChanged implements bridge.StateTurn: the conversation and user
// keys the committed turn set or deleted (tenant: keys are not shown to
// clients; temp: keys are never saved). Nothing before the commit.
func (t *stateTurn) StateChanged() (conversation, user []string) {
	if t.written == nil {
		return nil, nil
	}
	return opKeys(t.written.Conversation), opKeys(t.written.User)
}

// opKeys is the keys of ops, in their order (sorted by key).
func opKeys(ops []history.StateOp) []string {
	if len(ops) == 0 {
		return nil
	}
	keys := make([]string, len(ops))
	for i, op := range ops {
		keys[i] = op.Key
	}
	return keys
}

// artifactInfos is what artifact.saved tells of each published version.
func artifactInfos(published []history.Artifact) []events.ArtifactInfo {
	if len(published) == 0 {
		return nil
	}
	out := make([]events.ArtifactInfo, len(published))
	for i, a := range published {
		out[i] = events.ArtifactInfo{Name: a.Name, Version: int64(a.Version), MIME: a.MIME, Size: a.Size}
	}
	return out
}
