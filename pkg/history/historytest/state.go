package historytest

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
)

// stateTests are the suite's tests of session state (Turn.State).
var stateTests = []struct {
	name string
	run  func(t *testing.T, ctx context.Context, s history.Store)
}{
	{"The conversation's state and active agent a turn commits are what the next Start reads", testStateCarried},
	{"A turn without a state change keeps the conversation's state and agent", testStateKeptByPlainTurn},
	{"A turn that only hands the conversation to an agent, or only starts from one, without any value, is read back", testStateAgentOnly},
	{"A commit whose expected turn was taken meanwhile applies its state change to the state of the turn it follows", testStateRebasedOnStaleStart},
	{"A discarded pending request leaves the state as it was", testStateDiscarded},
	{"User state is shared by the user's conversations and tenant state by the tenant's, and no one else reads either", testScopeShared},
	{"A user key keeps the write of the newest commit, whatever order the commits land in, and a delete wins over an older set", testScopeLastWriterByStamp},
	{"State changes over the limits or not JSON are rejected and write nothing", testStateInvalid},
	{"ConversationState reads the newest committed turn's state and agent and the user's state, never a discarded request's nor the tenant's", testConversationStateNewest},
	{"ConversationState of another user's or another tenant's conversation of the same name is not found, and each identity reads only its own user state", testConversationStateIdentity},
}

func op(key, value string) history.StateOp { return history.StateOp{Key: key, Value: []byte(value)} }
func del(key string) history.StateOp       { return history.StateOp{Key: key} }

// stateString is a state's values as "k=v,k=v" sorted by key, then
// "@agent" when the agent is not the root.
func stateString(st history.State) string {
	return valuesString(st.Values) + "@" + st.Agent
}

func valuesString(m map[string][]byte) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%s=%s", k, m[k])
	}
	return b.String()
}

// startState starts request rid of id (record at offset off) and returns
// the state Start read.
func startState(t *testing.T, ctx context.Context, s history.Store, id events.Identity, rid string, off int64) history.State {
	t.Helper()
	st := start(t, ctx, begin(s, id, rid, off), 20)
	if st.Decided || st.Cancelled {
		t.Fatalf("Start(%s) = %+v", rid, st)
	}
	return st.State
}

// stateTurn is turn(i), from the record at offset i, changing state by c.
func stateTurn(i int, c *history.StateChange) history.Turn {
	tr := sourced(i, at(int64(i)))
	tr.State = c
	return tr
}

func scope(t *testing.T, ctx context.Context, s history.Store, tenant, user string) string {
	t.Helper()
	ss, ok := s.(history.ScopeStore)
	if !ok {
		t.Skip("not a ScopeStore")
	}
	m, err := ss.ScopeState(ctx, tenant, user)
	if err != nil {
		t.Fatalf("ScopeState(%q, %q): %v", tenant, user, err)
	}
	return valuesString(m)
}

func testStateCarried(t *testing.T, ctx context.Context, s history.Store) {
	id := newIdentity(t, "state")
	if got := stateString(startState(t, ctx, s, id, "r1", 1)); got != "@" {
		t.Fatalf("state of a new conversation = %q, want empty", got)
	}
	commit(t, ctx, s, id, stateTurn(1, &history.StateChange{
		Conversation: []history.StateOp{op("cart", `["apple"]`), op("lang", `"fr"`)},
		Agent:        "billing",
	}))
	if got, want := stateString(startState(t, ctx, s, id, "r2", 2)), `cart=["apple"],lang="fr"@billing`; got != want {
		t.Fatalf("state after turn 1 = %q, want %q", got, want)
	}
	commit(t, ctx, s, id, stateTurn(2, &history.StateChange{
		Conversation: []history.StateOp{del("cart"), op("step", `3`)},
	}))
	if got, want := stateString(startState(t, ctx, s, id, "r3", 3)), `lang="fr",step=3@`; got != want {
		t.Fatalf("state after turn 2 (cart deleted, step set, back to the root) = %q, want %q", got, want)
	}
	// The state is the conversation's: another conversation of the user
	// starts empty.
	if got := stateString(startState(t, ctx, s, events.Identity{Tenant: id.Tenant, User: id.User, Conversation: "other"}, "r1", 1)); got != "@" {
		t.Fatalf("state of another conversation = %q, want empty", got)
	}
}

func testStateAgentOnly(t *testing.T, ctx context.Context, s history.Store) {
	id := newIdentity(t, "state-agent")
	commit(t, ctx, s, id, stateTurn(1, &history.StateChange{Agent: "support"}))
	if got, want := stateString(startState(t, ctx, s, id, "r2", 2)), `@support`; got != want {
		t.Fatalf("state after a transfer without values = %q, want %q", got, want)
	}
	commit(t, ctx, s, id, stateTurn(2, &history.StateChange{From: "support"}))
	if st := startState(t, ctx, s, id, "r3", 3); stateString(st) != "@" || st.From != "support" {
		t.Fatalf("state after a turn that started from support and handed back = %q from %q, want the root, from support", stateString(st), st.From)
	}
}

func testStateKeptByPlainTurn(t *testing.T, ctx context.Context, s history.Store) {
	id := newIdentity(t, "state-plain")
	commit(t, ctx, s, id, stateTurn(1, &history.StateChange{Conversation: []history.StateOp{op("a", `1`)}, Agent: "billing"}))
	commit(t, ctx, s, id, stateTurn(2, nil))
	if got, want := stateString(startState(t, ctx, s, id, "r3", 3)), `a=1@billing`; got != want {
		t.Fatalf("state after a turn without change = %q, want %q", got, want)
	}
}

func testStateRebasedOnStaleStart(t *testing.T, ctx context.Context, s history.Store) {
	id := newIdentity(t, "state-stale")
	commit(t, ctx, s, id, stateTurn(1, &history.StateChange{Conversation: []history.StateOp{op("a", `1`)}}))
	p3 := begin(s, id, "r3", 3)
	start(t, ctx, p3, 20)
	if _, err := p3.CommitAnswer(ctx, history.Answer{Text: "three", Agent: "echo", Status: events.StatusComplete,
		State: &history.StateChange{Conversation: []history.StateOp{op("c", `3`)}}}); err != nil {
		t.Fatalf("Commit(r3): %v", err)
	}
	// Two requests (without a record: none fences the other) start on
	// r3's turn; r2 commits first, so r2b finds the turn it expected taken.
	p2 := history.Begin(s, id, "r2", "question r2", base.Add(time.Hour))
	start(t, ctx, p2, 20)
	p2b := history.Begin(s, id, "r2b", "question r2b", base.Add(time.Hour))
	start(t, ctx, p2b, 20)
	if _, err := p2.CommitAnswer(ctx, history.Answer{Text: "two", Agent: "echo", Status: events.StatusComplete,
		State: &history.StateChange{Conversation: []history.StateOp{op("b", `2`)}}}); err != nil {
		t.Fatalf("Commit(r2): %v", err)
	}
	c, err := p2b.CommitAnswer(ctx, history.Answer{Text: "two b", Agent: "echo", Status: events.StatusComplete,
		State: &history.StateChange{Conversation: []history.StateOp{op("d", `4`)}}})
	if err != nil || c.N != 4 {
		t.Fatalf("Commit(r2b) = %+v, %v; want turn 4", c, err)
	}
	if got, want := stateString(startState(t, ctx, s, id, "r5", 5)), `a=1,b=2,c=3,d=4@`; got != want {
		t.Fatalf("state after a commit that found its turn taken = %q, want %q (no change lost)", got, want)
	}
}

func testStateDiscarded(t *testing.T, ctx context.Context, s history.Store) {
	id := newIdentity(t, "state-discard")
	commit(t, ctx, s, id, stateTurn(1, &history.StateChange{Conversation: []history.StateOp{op("a", `1`)}}))
	p := begin(s, id, "r2", 2)
	start(t, ctx, p, 20)
	p.Discard()
	if _, err := p.CommitAnswer(ctx, history.Answer{Text: "x", Status: events.StatusComplete,
		State: &history.StateChange{Conversation: []history.StateOp{op("a", `2`)}, User: []history.StateOp{op("u", `1`)}}}); !errors.Is(err, history.ErrClosed) {
		t.Fatalf("Commit after Discard = %v, want ErrClosed", err)
	}
	if got, want := stateString(startState(t, ctx, s, id, "r3", 3)), `a=1@`; got != want {
		t.Fatalf("state after a discarded request = %q, want %q", got, want)
	}
	if got := scope(t, ctx, s, id.Tenant, id.User); got != "" {
		t.Fatalf("user state after a discarded request = %q, want empty", got)
	}
}

func testScopeShared(t *testing.T, ctx context.Context, s history.Store) {
	a := newIdentity(t, "scope-a")
	b := events.Identity{Tenant: a.Tenant, User: a.User, Conversation: "scope-b"}
	bob := events.Identity{Tenant: a.Tenant, User: "bob", Conversation: "scope-a"}
	other := events.Identity{Tenant: a.Tenant + "x", User: a.User, Conversation: "scope-a"}
	commit(t, ctx, s, a, stateTurn(1, &history.StateChange{
		User:   []history.StateOp{op("lang", `"fr"`)},
		Tenant: []history.StateOp{op("banner", `"sale"`)},
	}))
	commit(t, ctx, s, b, stateTurn(1, &history.StateChange{User: []history.StateOp{op("tz", `"CET"`)}}))
	if got, want := scope(t, ctx, s, a.Tenant, a.User), `lang="fr",tz="CET"`; got != want {
		t.Fatalf("user state after two conversations' turns = %q, want %q", got, want)
	}
	if got, want := scope(t, ctx, s, a.Tenant, ""), `banner="sale"`; got != want {
		t.Fatalf("tenant state = %q, want %q", got, want)
	}
	for _, who := range []events.Identity{bob, other} {
		if got := scope(t, ctx, s, who.Tenant, who.User); got != "" {
			t.Fatalf("user state of %s/%s = %q, want empty", who.Tenant, who.User, got)
		}
	}
	if got := scope(t, ctx, s, other.Tenant, ""); got != "" {
		t.Fatalf("tenant state of another tenant = %q, want empty", got)
	}
	// The user scope is not the conversation's state.
	if got := stateString(startState(t, ctx, s, a, "r2", 2)); got != "@" {
		t.Fatalf("conversation state after user and tenant changes = %q, want empty", got)
	}
}

func testScopeLastWriterByStamp(t *testing.T, ctx context.Context, s history.Store) {
	a := newIdentity(t, "stamp-a")
	b := events.Identity{Tenant: a.Tenant, User: a.User, Conversation: "stamp-b"}
	newer := stateTurn(1, &history.StateChange{User: []history.StateOp{op("lang", `"de"`), del("tz")}})
	newer.CommittedAt = base.Add(time.Hour)
	older := stateTurn(1, &history.StateChange{User: []history.StateOp{op("lang", `"fr"`), op("tz", `"CET"`), op("name", `"Al"`)}})
	older.CommittedAt = base
	commit(t, ctx, s, a, newer)
	commit(t, ctx, s, b, older) // lands later, committed earlier
	if got, want := scope(t, ctx, s, a.Tenant, a.User), `lang="de",name="Al"`; got != want {
		t.Fatalf("user state = %q, want %q (the newer commit's lang and delete of tz win per key, the older one's other key lands)", got, want)
	}
	// Committing the older turn again changes nothing.
	commit(t, ctx, s, b, older)
	if got, want := scope(t, ctx, s, a.Tenant, a.User), `lang="de",name="Al"`; got != want {
		t.Fatalf("user state after a duplicate commit = %q, want %q", got, want)
	}
}

func testStateInvalid(t *testing.T, ctx context.Context, s history.Store) {
	id := newIdentity(t, "state-invalid")
	big := `"` + strings.Repeat("x", history.MaxStateValueBytes) + `"`
	many := make([]history.StateOp, history.MaxStateKeys+1)
	for i := range many {
		many[i] = op(fmt.Sprintf("k%d", i), `1`)
	}
	for _, tc := range []struct {
		name string
		c    history.StateChange
	}{
		{"a value over MaxStateValueBytes", history.StateChange{Conversation: []history.StateOp{op("a", big)}}},
		{"a value that is not JSON", history.StateChange{User: []history.StateOp{op("a", `{`)}}},
		{"an empty key", history.StateChange{Tenant: []history.StateOp{op("", `1`)}}},
		{"a key over MaxStateKeyBytes", history.StateChange{Conversation: []history.StateOp{op(strings.Repeat("k", history.MaxStateKeyBytes+1), `1`)}}},
		{"more than MaxStateKeys keys", history.StateChange{Conversation: many}},
		{"a key changed twice", history.StateChange{User: []history.StateOp{op("a", `1`), del("a")}}},
	} {
		tr := stateTurn(1, &tc.c)
		if _, err := s.Commit(ctx, id, tr); !errors.Is(err, events.ErrInvalid) {
			t.Errorf("Commit with %s = %v, want ErrInvalid", tc.name, err)
		}
	}
	if _, ok, err := s.Lookup(ctx, id, "r1"); ok || err != nil {
		t.Fatalf("Lookup after refused commits = %v, %v; want nothing written", ok, err)
	}
	// The conversation's state as a whole is bounded too: two turns of
	// MaxStateBytes/2 + 1 each.
	half := `"` + strings.Repeat("y", history.MaxStateValueBytes-2) + `"`
	var ops []history.StateOp
	for i := 0; i <= history.MaxStateBytes/history.MaxStateValueBytes; i++ {
		ops = append(ops, op(fmt.Sprintf("v%d", i), half))
	}
	if _, err := s.Commit(ctx, id, stateTurn(1, &history.StateChange{Conversation: ops})); !errors.Is(err, events.ErrInvalid) {
		t.Fatalf("Commit of a state over MaxStateBytes = %v, want ErrInvalid", err)
	}
}

// conversationState reads ConversationState of id as
// "k=v,…@agent user:k=v,…".
func conversationState(t *testing.T, ctx context.Context, s history.Store, id events.Identity) (string, error) {
	t.Helper()
	sr, ok := s.(history.StateReader)
	if !ok {
		t.Skip("not a StateReader")
	}
	cs, err := sr.ConversationState(ctx, id)
	if err != nil {
		return "", err
	}
	if cs.Values == nil || cs.User == nil {
		t.Errorf("ConversationState(%s) = %+v: want empty maps, never nil", id, cs)
	}
	return valuesString(cs.Values) + "@" + cs.Agent + " user:" + valuesString(cs.User), nil
}

func testConversationStateNewest(t *testing.T, ctx context.Context, s history.Store) {
	id := newIdentity(t, "read-state")
	commit(t, ctx, s, id, stateTurn(1, &history.StateChange{
		Conversation: []history.StateOp{op("cart", `["apple"]`), op("lang", `"fr"`)},
		User:         []history.StateOp{op("language", `"fr"`), op("tz", `"CET"`)},
		Tenant:       []history.StateOp{op("banner", `"sale"`)},
		Agent:        "billing",
	}))
	if got, want := readState(t, ctx, s, id), `cart=["apple"],lang="fr"@billing user:language="fr",tz="CET"`; got != want {
		t.Fatalf("state after turn 1 = %q, want %q", got, want)
	}
	commit(t, ctx, s, id, stateTurn(2, &history.StateChange{
		Conversation: []history.StateOp{del("cart"), op("step", `3`)},
		User:         []history.StateOp{del("tz")},
	}))
	want := `lang="fr",step=3@ user:language="fr"`
	if got := readState(t, ctx, s, id); got != want {
		t.Fatalf("state after turn 2 = %q, want %q (the newest turn's: cart and tz deleted, back to the root)", got, want)
	}
	// A request that started and was discarded (or fenced, aborted: it
	// never commits) changes nothing one reads.
	p := begin(s, id, "r3", 3)
	start(t, ctx, p, 20)
	p.Discard()
	_, _ = p.CommitAnswer(ctx, history.Answer{Text: "x", Status: events.StatusComplete,
		State: &history.StateChange{Conversation: []history.StateOp{op("lang", `"de"`)}, User: []history.StateOp{op("language", `"de"`)}, Agent: "sales"}})
	if got := readState(t, ctx, s, id); got != want {
		t.Fatalf("state after a discarded request = %q, want %q", got, want)
	}
	// A conversation without a committed turn has no state to read.
	if _, err := conversationState(t, ctx, s, events.Identity{Tenant: id.Tenant, User: id.User, Conversation: "never"}); !errors.Is(err, history.ErrNotFound) {
		t.Fatalf("state of a conversation without turns: %v, want ErrNotFound", err)
	}
}

func testConversationStateIdentity(t *testing.T, ctx context.Context, s history.Store) {
	alice := newIdentity(t, "mine")
	bob := events.Identity{Tenant: alice.Tenant, User: "bob", Conversation: alice.Conversation}
	other := events.Identity{Tenant: alice.Tenant + "x", User: alice.User, Conversation: alice.Conversation}
	commit(t, ctx, s, alice, stateTurn(1, &history.StateChange{
		Conversation: []history.StateOp{op("cart", `["apple"]`)},
		User:         []history.StateOp{op("card", `"4242"`)},
		Agent:        "billing",
	}))
	for _, who := range []events.Identity{bob, other} {
		if got, err := conversationState(t, ctx, s, who); !errors.Is(err, history.ErrNotFound) {
			t.Fatalf("state of %s (alice's conversation name) = %q, %v; want ErrNotFound", who, got, err)
		}
	}
	// Bob's own conversation of that name, with user state of his own:
	// each reads only their own.
	commit(t, ctx, s, bob, stateTurn(1, &history.StateChange{User: []history.StateOp{op("lang", `"de"`)}}))
	if got, want := readState(t, ctx, s, bob), `@ user:lang="de"`; got != want {
		t.Fatalf("bob's state = %q, want %q (none of alice's)", got, want)
	}
	if got, want := readState(t, ctx, s, alice), `cart=["apple"]@billing user:card="4242"`; got != want {
		t.Fatalf("alice's state = %q, want %q (none of bob's)", got, want)
	}
}

// readState is conversationState, failing the test on an error.
func readState(t *testing.T, ctx context.Context, s history.Store, id events.Identity) string {
	t.Helper()
	got, err := conversationState(t, ctx, s, id)
	if err != nil {
		t.Fatalf("ConversationState(%s): %v", id, err)
	}
	return got
}
