package topic

import (
	"strconv"

	"github.com/segmentio/kafka-go"
)

// Headers naming where a request record was first written: the worker adds
// them when it dead-letters a record and when it moves a misplaced record
// to its home partition.
const (
	HeaderSourceTopic     = "turnpike-source-topic"
	HeaderSourcePartition = "turnpike-source-partition"
	HeaderSourceOffset    = "turnpike-source-offset"
)

// Origin returns the coordinates m was first written at: those of its
// turnpike-source-* headers when it carries all three, valid, and its own
// otherwise (fromHeaders false). The timestamp is always m's own: a copy
// keeps its original's.
func Origin(m kafka.Message) (topic string, partition int, offset int64, fromHeaders bool) {
	var t, part, off string
	var have int
	for _, h := range m.Headers {
		switch h.Key {
		case HeaderSourceTopic:
			t, have = string(h.Value), have|1
		case HeaderSourcePartition:
			part, have = string(h.Value), have|2
		case HeaderSourceOffset:
			off, have = string(h.Value), have|4
		}
	}
	if have != 7 {
		return m.Topic, m.Partition, m.Offset, false
	}
	p, err1 := strconv.Atoi(part)
	o, err2 := strconv.ParseInt(off, 10, 64)
	if err1 != nil || err2 != nil || p < 0 || o < 0 || t == "" {
		return m.Topic, m.Partition, m.Offset, false
	}
	return t, p, o, true
}

// SourceHeaders returns m's headers without any turnpike-source-* header
// and without those named in drop, followed by the three naming m's origin
// (see Origin): a record copied twice still names where it was first
// written.
func SourceHeaders(m kafka.Message, drop ...string) []kafka.Header {
	t, p, o, _ := Origin(m)
	out := make([]kafka.Header, 0, len(m.Headers)+3)
next:
	for _, h := range m.Headers {
		switch h.Key {
		case HeaderSourceTopic, HeaderSourcePartition, HeaderSourceOffset:
			continue
		}
		for _, d := range drop {
			if h.Key == d {
				continue next
			}
		}
		out = append(out, h)
	}
	return append(out,
		kafka.Header{Key: HeaderSourceTopic, Value: []byte(t)},
		kafka.Header{Key: HeaderSourcePartition, Value: []byte(strconv.Itoa(p))},
		kafka.Header{Key: HeaderSourceOffset, Value: []byte(strconv.FormatInt(o, 10))},
	)
}
