package bridge

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/cloudwego/eino/adk"

	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
)

// interruptOf reads what an eino interrupt asks: the root causes' ids
// (where the user's answer goes when the run resumes), their info as the
// question, and the agent and tool that raised it.
func interruptOf(agent string, info *adk.InterruptInfo) *history.Interrupt {
	in := &history.Interrupt{Agent: agent}
	var questions []string
	for _, c := range info.InterruptContexts {
		if c == nil || !c.IsRootCause {
			continue
		}
		in.Targets = append(in.Targets, c.ID)
		for _, seg := range c.Address {
			switch seg.Type {
			case adk.AddressSegmentAgent:
				in.Agent = seg.ID
			case adk.AddressSegmentTool:
				in.Tool = seg.ID
			}
		}
		if q := infoText(c.Info); q != "" {
			questions = append(questions, q)
		}
	}
	if len(questions) == 0 {
		if q := infoText(info.Data); q != "" {
			questions = append(questions, q)
		}
	}
	in.Question = truncateText(strings.Join(questions, "\n"), events.MaxQuestionBytes)
	in.Agent = truncateText(in.Agent, events.MaxAgentBytes)
	in.Tool = truncateText(in.Tool, events.MaxAgentBytes)
	return in
}

// infoText renders an interrupt's info for the user: text as it is, else
// its String or Error, else JSON.
func infoText(v any) string {
	switch v := v.(type) {
	case nil:
		return ""
	case string:
		return v
	case fmt.Stringer:
		return v.String()
	case error:
		return v.Error()
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// truncateText cuts s to at most n bytes at a rune boundary.
func truncateText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}
