package worker

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"unicode/utf8"

	"github.com/cloudwego/eino/adk"
	"github.com/cloudwego/eino/schema"

	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
)

// summaryPrefix starts the system message that carries a conversation's
// summary in the model's window.
const summaryPrefix = "Summary of the earlier conversation:\n"

// estimateTokens is the cheap token estimate of compaction: a token per 4
// bytes, plus 4 per message for its role and framing.
func estimateTokens(text string) int { return (len(text)+3)/4 + 4 }

// compactWindow turns window (stored messages, oldest first, then the
// pending user message) into the model's input. Without compaction that
// is the messages themselves. With it, the conversation's summary, if
// any, replaces the messages it covers, as a system message placed before
// them; and when the result is over CompactTokens, the older messages
// (all but the newest CompactKeep, cut at a turn boundary) are condensed
// with the previous summary into a new one, which is saved. A summarizer
// failure keeps the window as it is (logged and counted): compaction only
// ever saves tokens, it never fails a run.
func (w *Step) compactWindow(ctx context.Context, store history.Store, id events.Identity, window []history.Message) ([]adk.Message, error) {
	if w.cfg.CompactTokens <= 0 {
		return toMessages(window), nil
	}
	sum, found, err := store.Summary(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("read summary: %w", err)
	}
	msgs := window[:0:0]
	for _, m := range window {
		if !found || m.Seq == 0 || m.Seq > sum.Through {
			msgs = append(msgs, m)
		}
	}
	est := 0
	if found {
		est += estimateTokens(summaryPrefix + sum.Text)
	}
	for _, m := range msgs {
		est += estimateTokens(windowText(m))
	}
	if est <= w.cfg.CompactTokens {
		return withSummary(sum, found, msgs), nil
	}
	stored := msgs[:len(msgs)-1] // the pending message is never condensed
	cut := len(stored) - w.cfg.CompactKeep
	for cut > 0 && cut < len(stored) && stored[cut].Role != history.RoleUser {
		cut++ // keep whole turns: the recent part starts with a user message
	}
	// cut <= len(stored) here: CompactKeep >= 0 and the loop stops there.
	if cut <= 0 || stored[cut-1].Role != history.RoleAssistant {
		w.metrics.compactions.WithLabelValues("kept").Inc()
		return withSummary(sum, found, msgs), nil
	}
	old := stored[:cut]
	text, err := w.summarize(ctx, sum, found, old)
	if err != nil {
		w.metrics.compactions.WithLabelValues("failed").Inc()
		w.log.Warn("compaction: summarizer failed; the window is kept as it is", identityAttr(id), slog.Any("error", err))
		return withSummary(sum, found, msgs), nil
	}
	next := history.Summary{Through: old[len(old)-1].Seq, Text: text, CreatedAt: w.now()}
	if err := store.SaveSummary(ctx, id, next); err != nil {
		// The next run summarizes again; this one uses the new summary.
		w.log.Warn("compaction: save summary", identityAttr(id), slog.Any("error", err))
	}
	w.metrics.compactions.WithLabelValues("summarized").Inc()
	return withSummary(next, true, msgs[cut:]), nil
}

// withSummary is the model's input: the summary's system message, if
// any, then msgs.
func withSummary(sum history.Summary, found bool, msgs []history.Message) []adk.Message {
	out := make([]adk.Message, 0, len(msgs)+1)
	if found {
		out = append(out, schema.SystemMessage(summaryPrefix+sum.Text))
	}
	return append(out, toMessages(msgs)...)
}

// summarize asks the summarizer to condense old (and the previous summary).
func (w *Step) summarize(ctx context.Context, prev history.Summary, hasPrev bool, old []history.Message) (string, error) {
	var b strings.Builder
	if hasPrev {
		b.WriteString("Earlier summary:\n")
		b.WriteString(prev.Text)
		b.WriteString("\n\n")
	}
	b.WriteString("Conversation:\n")
	for _, m := range old {
		b.WriteString(string(m.Role))
		b.WriteString(": ")
		b.WriteString(windowText(m))
		b.WriteByte('\n')
	}
	ctx, cancel := context.WithTimeout(ctx, w.cfg.RunTimeout)
	defer cancel()
	out, err := w.agents.summarizer.Generate(ctx, []*schema.Message{
		schema.SystemMessage(w.agents.summaryInstruction),
		schema.UserMessage(b.String()),
	})
	if err != nil {
		return "", err
	}
	if out.ResponseMeta != nil && out.ResponseMeta.Usage != nil {
		u := out.ResponseMeta.Usage
		w.metrics.countTokens(w.agents.summarizerModel, u.PromptTokens, u.CompletionTokens)
	}
	text := strings.TrimSpace(out.Content)
	if text == "" {
		return "", fmt.Errorf("empty summary")
	}
	if len(text) > history.MaxSummaryBytes {
		cut := history.MaxSummaryBytes
		for cut > 0 && !utf8.RuneStart(text[cut]) {
			cut--
		}
		text = text[:cut]
	}
	return text, nil
}
