package history

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/turnpike-dev/turnpike/pkg/events"
)

// Limits of long-term memory (docs/api.md "Memory").
const (
	// MaxMemoryTextBytes bounds each of a memory's two texts (the user's
	// message and the answer): a longer text is kept cut at a rune
	// boundary, with its start remembered.
	MaxMemoryTextBytes = 8 << 10
	// MaxMemoryQueryBytes bounds a search query; a longer one is invalid.
	MaxMemoryQueryBytes = 1 << 10
	// MaxMemoryQueryTerms bounds the distinct terms of a query that are
	// searched: the first ones, in the query's order.
	MaxMemoryQueryTerms = 32
	// MaxMemoryResults bounds the hits of one search: a limit above it
	// is clamped to it, a limit below 1 is 1.
	MaxMemoryResults = 50
)

// Memory is one remembered turn: what the user said and what the
// assistant answered, in one conversation of one (tenant, user). Its key
// is (Tenant, User, Conversation, Turn): adding it again adds nothing.
type Memory struct {
	// Identity is the conversation the turn belongs to.
	Identity events.Identity
	// Turn is the turn's number in its conversation (Committed.N), at
	// least 1.
	Turn int64
	// RequestID is the turn's request id.
	RequestID string
	// Question is the user's message; Answer the persisted answer (the
	// parts of several agents joined by a blank line). At least one is
	// not empty.
	Question, Answer string
	// At is when the turn was committed.
	At time.Time
}

// MemoryHit is a Memory a search found, with its relevance: higher is
// more relevant. Scores compare only within one search's results.
type MemoryHit struct {
	Memory
	Score float64
}

// MemoryService is long-term memory: the turns of a (tenant, user)'s
// conversations, searchable by relevance from any of that user's
// conversations and never from another user's or tenant's.
// InMemoryMemory and MongoMemory implement it; a team plugs in its own
// (a vector store, say) by implementing it and passing
// historytest.RunMemory. Implementations are safe for concurrent use.
type MemoryService interface {
	// Add remembers m, keyed by (identity, turn): it reports whether it
	// was added, false when that key is already remembered (whatever its
	// text). Texts over MaxMemoryTextBytes are cut. Invalid identities,
	// turns below 1, and memories without text are events.ErrInvalid.
	Add(ctx context.Context, m Memory) (bool, error)
	// Search returns the memories of (tenant, user) most relevant to
	// query, most relevant first, at most limit (clamped to 1 …
	// MaxMemoryResults); ties go to the newest. A query without a
	// searchable word finds nothing. An invalid tenant or user, or a
	// query over MaxMemoryQueryBytes or not UTF-8, is events.ErrInvalid.
	Search(ctx context.Context, tenant, user, query string, limit int) ([]MemoryHit, error)
	// Delete forgets the memories of one conversation of (tenant, user),
	// or all of that user's when conversation is "": it returns how many
	// it deleted. Invalid names are events.ErrInvalid.
	Delete(ctx context.Context, tenant, user, conversation string) (int64, error)
}

// memoryKey is the unique key of m: the turn's document _id.
func memoryKey(id events.Identity, turn int64) string { return turnID(id.Key(), turn) }

// prepareMemory validates m and returns it with its texts cut to the limit.
func prepareMemory(m Memory) (Memory, error) {
	if err := m.Identity.Validate(); err != nil {
		return Memory{}, fmt.Errorf("add memory: %w", err)
	}
	if m.Turn < 1 {
		return Memory{}, fmt.Errorf("add memory: %w turn %d: must be at least 1", events.ErrInvalid, m.Turn)
	}
	if !utf8.ValidString(m.Question) || !utf8.ValidString(m.Answer) {
		return Memory{}, fmt.Errorf("add memory: %w text: not UTF-8", events.ErrInvalid)
	}
	if strings.TrimSpace(m.Question) == "" && strings.TrimSpace(m.Answer) == "" {
		return Memory{}, fmt.Errorf("add memory: %w text: empty", events.ErrInvalid)
	}
	m.Question = cutText(m.Question, MaxMemoryTextBytes)
	m.Answer = cutText(m.Answer, MaxMemoryTextBytes)
	m.At = m.At.UTC().Truncate(time.Millisecond)
	return m, nil
}

// cutText is s cut to at most n bytes at a rune boundary.
func cutText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// validateSearch checks a search's owner and query, and clamps limit.
func validateSearch(tenant, user, query string, limit int) (int, error) {
	if err := errors.Join(events.ValidateID("tenant", tenant), events.ValidateID("user", user)); err != nil {
		return 0, fmt.Errorf("search memory: %w", err)
	}
	if len(query) > MaxMemoryQueryBytes {
		return 0, fmt.Errorf("search memory: %w query: %d bytes, at most %d allowed", events.ErrInvalid, len(query), MaxMemoryQueryBytes)
	}
	if !utf8.ValidString(query) {
		return 0, fmt.Errorf("search memory: %w query: not UTF-8", events.ErrInvalid)
	}
	return min(max(limit, 1), MaxMemoryResults), nil
}

// validateDelete checks a delete's names ("" conversation: all).
func validateDelete(tenant, user, conversation string) error {
	errs := []error{events.ValidateID("tenant", tenant), events.ValidateID("user", user)}
	if conversation != "" {
		errs = append(errs, events.ValidateID("conversation", conversation))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("delete memories: %w", err)
	}
	return nil
}

// isMemoryStopWord reports a word too common to search by (a subset of
// MongoDB's English stop words).
func isMemoryStopWord(w string) bool {
	switch w {
	case "a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "from", "has", "have", "he", "her", "his",
		"i", "if", "in", "into", "is", "it", "its", "me", "my", "of", "on", "or", "our", "she", "so", "that", "the",
		"their", "them", "then", "there", "these", "they", "this", "to", "was", "we", "were", "what", "when", "where",
		"which", "who", "will", "with", "you", "your", "do", "does", "did", "not", "no", "yes", "can":
		return true
	}
	return false
}

// memoryWords splits text into lower-cased runs of letters and digits.
func memoryWords(text string) []string {
	return strings.FieldsFunc(strings.ToLower(text), func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r)
	})
}

// MemoryTerms is how the in-memory service and MongoMemory's term scan
// split text into search terms: lower-cased runs of letters and digits,
// without a small list of English stop words, no stemming. Distinct terms
// in their first order.
func MemoryTerms(text string) []string {
	seen := map[string]bool{}
	var out []string
	for _, f := range memoryWords(text) {
		if isMemoryStopWord(f) || seen[f] {
			continue
		}
		seen[f] = true
		out = append(out, f)
	}
	return out
}

// queryTerms is the searched terms of a query.
func queryTerms(query string) []string {
	t := MemoryTerms(query)
	if len(t) > MaxMemoryQueryTerms {
		t = t[:MaxMemoryQueryTerms]
	}
	return t
}

// termScore is the relevance of a memory to query terms q: for each
// query term the memory holds, 1 + ln(occurrences), so a memory holding
// more of the query's terms ranks above one holding fewer, then one
// repeating them above one that does not. 0 for no match.
func termScore(q []string, m Memory) float64 {
	counts := map[string]int{}
	for _, f := range memoryWords(m.Question + "\n" + m.Answer) {
		counts[f]++
	}
	var s float64
	for _, t := range q {
		if n := counts[t]; n > 0 {
			s += 1 + math.Log(float64(n))
		}
	}
	return s
}

// rankHits sorts hits by score, then newest, then key, and keeps limit.
func rankHits(hits []MemoryHit, limit int) []MemoryHit {
	sort.SliceStable(hits, func(i, j int) bool {
		a, b := hits[i], hits[j]
		if a.Score != b.Score {
			return a.Score > b.Score
		}
		if !a.At.Equal(b.At) {
			return a.At.After(b.At)
		}
		return memoryKey(a.Identity, a.Turn) < memoryKey(b.Identity, b.Turn)
	})
	if len(hits) > limit {
		hits = hits[:limit]
	}
	return hits
}
