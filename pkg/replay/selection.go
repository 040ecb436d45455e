package replay

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/turnpike-dev/turnpike/pkg/events"
)

// errUnknownTopic is returned for a topic the brokers do not have.
var errUnknownTopic = errors.New("unknown topic")

// errBadSelection is wrapped by every error about a selection that cannot
// be satisfied (a partition the topic does not have, an empty time range).
var errBadSelection = errors.New("bad selection")

// partitionRange is the part of one partition a replay reads: offsets [Start, End).
type partitionRange struct {
	Partition int   `json:"partition"`
	Start     int64 `json:"start"`
	End       int64 `json:"end"`
	// Next is the first offset not yet done: Start when nothing is done,
	// End when the partition is finished.
	Next int64 `json:"next"`
}

// Len is the number of offsets of the range still to read.
func (r partitionRange) Len() int64 { return max(0, r.End-r.Next) }

// plan is a resolved selection: the topic and the offset range of each
// selected partition.
type plan struct {
	Topic  string           `json:"topic"`
	Ranges []partitionRange `json:"ranges"`
}

// Remaining is the number of offsets still to read over all partitions.
func (p plan) Remaining() int64 {
	var n int64
	for _, r := range p.Ranges {
		n += r.Len()
	}
	return n
}

// topicName resolves the Topic shorthand.
func (c config) topicName() string {
	names := c.Topics()
	switch c.Topic {
	case topicRequests, "":
		return names.Requests
	case topicDLQ:
		return names.DLQ
	}
	return c.Topic
}

// filter keeps the records whose key has the configured identity parts.
type filter struct{ tenant, user, conversation string }

func (c config) filter() filter { return filter{c.Tenant, c.User, c.Conversation} }

func (f filter) all() bool { return f == filter{} }

// match reports whether a record key passes. A key that does not parse
// passes only an empty filter.
func (f filter) match(key []byte) bool {
	if f.all() {
		return true
	}
	id, err := events.ParseKey(string(key))
	if err != nil {
		return false
	}
	return (f.tenant == "" || f.tenant == id.Tenant) && (f.user == "" || f.user == id.User) &&
		(f.conversation == "" || f.conversation == id.Conversation)
}

// fingerprint identifies what a replay does, so that a checkpoint is only
// resumed by the same replay: mode, topic, selection and the settings that
// shape the results.
func (c config) fingerprint() string {
	parts := slices.Clone(c.Partitions)
	slices.Sort(parts)
	v := map[string]any{
		"mode": c.Mode, "topic": c.topicName(), "partitions": parts, "start_offset": c.StartOffset, "end_offset": c.EndOffset,
		"since": c.Since, "until": c.Until, "tenant": c.Tenant, "user": c.User, "conversation": c.Conversation,
		"max_content_bytes": c.MaxContentBytes,
	}
	switch c.Mode {
	case modeRedrive:
		v["target"] = c.Topics().Requests
		v["rerun_failed"] = c.RerunFailed
	case modeShadow:
		v["model"], v["echo_delay"], v["instruction"], v["agent"] = c.Model, c.EchoDelay.String(), c.Instruction, c.AgentName
		v["window"], v["shadow_db"], v["agent_kind"] = c.WindowMessages, c.ShadowMongoDB, c.Agent
		if c.CompactTokens > 0 { // (absent when off: a checkpoint of before compaction's flags still matches)
			v["compact_tokens"], v["compact_keep"] = c.CompactTokens, c.CompactKeep
		}
		if c.AgentFile != "" {
			// The file's content, not its name: an edited file is another replay.
			b, err := os.ReadFile(c.AgentFile)
			sum := sha256.Sum256(b)
			v["agent_file"] = hex.EncodeToString(sum[:])
			if err != nil {
				v["agent_file"] = "unreadable: " + err.Error()
			}
		}
	}
	b, _ := json.Marshal(v) // map keys are sorted: a canonical form
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// resolve turns the configured selection into a Plan: it checks that the
// topic and partitions exist and looks the offset bounds up.
func resolve(ctx context.Context, c config, now time.Time) (plan, error) {
	name := c.topicName()
	cl := &kafka.Client{Addr: kafka.TCP(c.Brokers...), Timeout: 10 * time.Second}
	all, err := partitionsOf(ctx, cl, name, c.TopicPrefix)
	if err != nil {
		return plan{}, err
	}
	parts := all
	if len(c.Partitions) > 0 {
		parts = nil
		for _, p := range c.Partitions {
			if !slices.Contains(all, p) {
				return plan{}, fmt.Errorf("%w: partition %d out of range: topic %s has partitions 0..%d", errBadSelection, p, name, len(all)-1)
			}
			if !slices.Contains(parts, p) {
				parts = append(parts, p)
			}
		}
		slices.Sort(parts)
	}
	first, err := listOffsets(ctx, cl, name, parts, func(p int) kafka.OffsetRequest { return kafka.FirstOffsetOf(p) })
	if err != nil {
		return plan{}, err
	}
	last, err := listOffsets(ctx, cl, name, parts, func(p int) kafka.OffsetRequest { return kafka.LastOffsetOf(p) })
	if err != nil {
		return plan{}, err
	}
	since, err := parseTime(c.Since, now)
	if err != nil {
		return plan{}, fmt.Errorf("%w: since: %w", errBadSelection, err)
	}
	until, err := parseTime(c.Until, now)
	if err != nil {
		return plan{}, fmt.Errorf("%w: until: %w", errBadSelection, err)
	}
	var sinceOff, untilOff map[int]int64
	if !since.IsZero() {
		if sinceOff, err = offsetsForTime(ctx, cl, name, parts, since, last); err != nil {
			return plan{}, err
		}
	}
	if !until.IsZero() {
		if untilOff, err = offsetsForTime(ctx, cl, name, parts, until, last); err != nil {
			return plan{}, err
		}
	}
	plan := plan{Topic: name}
	for _, p := range parts {
		start, end := first[p], last[p]
		if c.StartOffset >= 0 {
			start = max(start, c.StartOffset)
		}
		if c.EndOffset >= 0 {
			end = min(end, c.EndOffset)
		}
		if sinceOff != nil {
			start = max(start, sinceOff[p])
		}
		if untilOff != nil {
			end = min(end, untilOff[p])
		}
		end = max(end, start) // an empty range, not a negative one
		plan.Ranges = append(plan.Ranges, partitionRange{Partition: p, Start: start, End: end, Next: start})
	}
	return plan, nil
}

// partitionsOf lists the partitions of topic, or returns errUnknownTopic
// naming the topics under prefix that do exist. It asks for every topic's
// metadata, which never creates one.
func partitionsOf(ctx context.Context, cl *kafka.Client, topic, prefix string) ([]int, error) {
	md, err := cl.Metadata(ctx, &kafka.MetadataRequest{})
	if err != nil {
		return nil, fmt.Errorf("metadata: %w", err)
	}
	var known []string
	for _, t := range md.Topics {
		if t.Name == topic {
			if t.Error != nil {
				return nil, fmt.Errorf("metadata %s: %w", topic, t.Error)
			}
			ids := make([]int, len(t.Partitions))
			for i, p := range t.Partitions {
				ids[i] = p.ID
			}
			sort.Ints(ids)
			return ids, nil
		}
		if strings.HasPrefix(t.Name, prefix) {
			known = append(known, t.Name)
		}
	}
	sort.Strings(known)
	hint := "none"
	if len(known) > 0 {
		hint = strings.Join(known, ", ")
	}
	return nil, fmt.Errorf("%w %q (topics under prefix %q: %s)", errUnknownTopic, topic, prefix, hint)
}

// listOffsets asks one offset of each partition.
func listOffsets(ctx context.Context, cl *kafka.Client, topic string, parts []int, req func(p int) kafka.OffsetRequest) (map[int]int64, error) {
	reqs := make([]kafka.OffsetRequest, len(parts))
	for i, p := range parts {
		reqs[i] = req(p)
	}
	resp, err := cl.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{topic: reqs}})
	if err != nil {
		return nil, fmt.Errorf("list offsets of %s: %w", topic, err)
	}
	first := reqs[0].Timestamp == kafka.FirstOffset
	out := make(map[int]int64, len(parts))
	for _, po := range resp.Topics[topic] {
		if po.Error != nil {
			return nil, fmt.Errorf("list offsets of %s/%d: %w", topic, po.Partition, po.Error)
		}
		out[po.Partition] = answeredOffset(po, first)
	}
	for _, p := range parts {
		if _, ok := out[p]; !ok {
			return nil, fmt.Errorf("list offsets of %s/%d: no answer", topic, p)
		}
	}
	return out, nil
}

// answeredOffset is the offset a broker answered to a first (or last)
// offset request. kafka-go files the answer by the timestamp the broker
// sends back, which for these requests is -1 (UNKNOWN_TIMESTAMP, which
// kafka-go reads as LastOffset) on Kafka, and may be the request's own on
// other brokers; it starts the requested field at 0 and the other at -1.
func answeredOffset(po kafka.PartitionOffsets, first bool) int64 {
	for off := range po.Offsets {
		return off
	}
	if first {
		if po.LastOffset >= 0 {
			return po.LastOffset
		}
		return po.FirstOffset
	}
	if po.FirstOffset >= 0 {
		return po.FirstOffset
	}
	return po.LastOffset
}

// offsetsForTime finds, per partition, the first offset whose timestamp is
// at or after t; a partition with no such record yields its end.
func offsetsForTime(ctx context.Context, cl *kafka.Client, topic string, parts []int, t time.Time, end map[int]int64) (map[int]int64, error) {
	reqs := make([]kafka.OffsetRequest, len(parts))
	for i, p := range parts {
		reqs[i] = kafka.TimeOffsetOf(p, t)
	}
	resp, err := cl.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{topic: reqs}})
	if err != nil {
		return nil, fmt.Errorf("offsets of %s for %s: %w", topic, t.Format(time.RFC3339), err)
	}
	out := make(map[int]int64, len(parts))
	for _, p := range parts {
		out[p] = end[p]
	}
	for _, po := range resp.Topics[topic] {
		if po.Error != nil {
			return nil, fmt.Errorf("offsets of %s/%d for %s: %w", topic, po.Partition, t.Format(time.RFC3339), po.Error)
		}
		// Kafka answers offset -1 (which kafka-go files as LastOffset) when
		// no record is that recent: Offsets stays empty and the end holds.
		for off := range po.Offsets {
			if off >= 0 {
				out[po.Partition] = off
			}
		}
	}
	return out, nil
}
