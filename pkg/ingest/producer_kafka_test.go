package ingest

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/turnpike-dev/turnpike/internal/embedded"
	"github.com/turnpike-dev/turnpike/internal/server"
	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/internal/topic"
	"github.com/turnpike-dev/turnpike/pkg/events"
)

func TestNewKafkaProducerReportsEveryProblem(t *testing.T) {
	t.Parallel()
	_, err := newKafkaProducer(nil, "")
	if err == nil || !strings.Contains(err.Error(), "no brokers") || !strings.Contains(err.Error(), "no topic") {
		t.Errorf("NewKafkaProducer(nil, \"\"): %v; want both problems", err)
	}
}

func TestKafkaProducerWriterSettings(t *testing.T) {
	t.Parallel()
	p, err := newKafkaProducer([]string{"127.0.0.1:1"}, "turnpike.requests")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	w := p.w
	if w.RequiredAcks != kafka.RequireAll {
		t.Errorf("RequiredAcks %v, want RequireAll", w.RequiredAcks)
	}
	if _, ok := w.Balancer.(*kafka.Murmur2Balancer); !ok {
		t.Errorf("Balancer %T, want *kafka.Murmur2Balancer", w.Balancer)
	}
	if w.Async {
		t.Error("Async: a 202 must wait for the write")
	}
	if w.BatchTimeout <= 0 || w.BatchTimeout > 10*time.Millisecond {
		t.Errorf("BatchTimeout %v: want a few milliseconds at most", w.BatchTimeout)
	}
	if w.AllowAutoTopicCreation {
		t.Error("AllowAutoTopicCreation: topics are created at start with their partition count")
	}
	if w.MaxAttempts <= 0 || w.WriteTimeout <= 0 || w.WriteTimeout >= DefaultProduceTimeout {
		t.Errorf("MaxAttempts %d, WriteTimeout %v: want both set, one attempt inside the produce timeout", w.MaxAttempts, w.WriteTimeout)
	}
}

// kafkaService is a Service producing to a real (or embedded) broker.
func kafkaService(t *testing.T, cfg Config, brokers []string, requests string) *testService {
	t.Helper()
	p, err := newKafkaProducer(brokers, requests)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("close producer: %v", err)
		}
	})
	return newTestService(t, cfg, p, nil, nil)
}

func TestPostMessageLandsInTheRequestsTopic(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	brokers := testenv.Kafka(t)
	requests := testenv.Name(t, "requests")
	const partitions = 4
	if err := topic.Ensure(ctx, brokers, partitions, requests); err != nil {
		t.Fatal(err)
	}
	s := kafkaService(t, Config{}, brokers, requests)
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)

	// Three conversations, so that a balancer other than Murmur2 would
	// very likely put at least one record in another partition.
	ids := make([]int, partitions)
	for i := range ids {
		ids[i] = i
	}
	for i := range 3 {
		conv := testenv.Name(t, fmt.Sprintf("c%d", i))
		got := postOverHTTP(t, ctx, srv, conv, "k-1", `{"content":"hello [[delay:1ms]]","strategy":"reject"}`)

		// The record is in the partition Murmur2 assigns to its key, the
		// placement the worker and push gateway rely on.
		key := "acme/alice/" + conv
		partition := (&kafka.Murmur2Balancer{}).Balance(kafka.Message{Key: []byte(key)}, ids...)
		m := fetchKey(t, ctx, brokers, requests, partition, key)
		rec, err := events.DecodeRequest(m.Value, 0)
		if err != nil {
			t.Fatalf("DecodeRequest(%s): %v", m.Value, err)
		}
		want := events.Request{
			V: 1, RequestID: got.RequestID, Tenant: "acme", User: "alice", Conversation: conv,
			Content: "hello [[delay:1ms]]", Strategy: events.StrategyReject, CreatedAt: testNow.UTC(),
		}
		if !rec.CreatedAt.Equal(want.CreatedAt) || rec.CreatedAt.Location() != time.UTC {
			t.Errorf("created_at %v, want %v in UTC", rec.CreatedAt, want.CreatedAt)
		}
		rec.CreatedAt = want.CreatedAt
		if rec != want {
			t.Errorf("record %+v,\nwant %+v", rec, want)
		}
		if !strings.HasPrefix(got.RequestID, "i-") {
			t.Errorf("request_id %q: want the idempotent i- id", got.RequestID)
		}
	}
}

// postOverHTTP POSTs body to conversation conv through a real HTTP server
// and wants 202.
func postOverHTTP(t *testing.T, ctx context.Context, srv *httptest.Server, conv, key, body string) accepted {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/conversations/"+conv+"/messages", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token(t, "acme", "alice"))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got accepted
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil || resp.StatusCode != http.StatusAccepted {
		t.Fatalf("POST: %d %+v %v; want 202", resp.StatusCode, got, err)
	}
	return got
}

// fetchKey reads partition of topic from the start until a record with key.
func fetchKey(t *testing.T, ctx context.Context, brokers []string, topic string, partition int, key string) kafka.Message {
	t.Helper()
	r := kafka.NewReader(kafka.ReaderConfig{
		Brokers: brokers, Topic: topic, Partition: partition,
		MinBytes: 1, MaxBytes: 1 << 20, MaxWait: 100 * time.Millisecond,
	})
	defer r.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		m, err := r.FetchMessage(ctx)
		if err != nil {
			t.Fatalf("no record with key %q in partition %d: %v", key, partition, err)
		}
		if string(m.Key) == key {
			return m
		}
	}
}

func TestPostMessageIsUnavailableWhenKafkaIsUnreachable(t *testing.T) {
	t.Parallel()
	const produceTimeout = 2 * time.Second
	tests := []struct {
		name string
		// broker returns the bootstrap address and, when the broker should
		// die only after a first successful POST, a func that kills it.
		broker func(t *testing.T) (addr string, kill func())
	}{
		{name: "A closed loopback port answers 503.", broker: func(t *testing.T) (string, func()) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			addr := ln.Addr().String()
			if err := ln.Close(); err != nil {
				t.Fatal(err)
			}
			return addr, nil
		}},
		{name: "A broker that accepts connections but never answers is cut off by the produce timeout.", broker: func(t *testing.T) (string, func()) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = ln.Close() })
			return ln.Addr().String(), nil // accepted by the kernel backlog, never read
		}},
		{name: "A broker that dies after a first POST answers 503 to the next one.", broker: func(t *testing.T) (string, func()) {
			k := testenv.EmbeddedKafka(t, embedded.KafkaConfig{})
			if err := topic.Ensure(testenv.Context(t, 10*time.Second), []string{k.Addr()}, 2, "turnpike.requests"); err != nil {
				t.Fatal(err)
			}
			return k.Addr(), k.Close
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			addr, kill := tt.broker(t)
			s := kafkaService(t, Config{ProduceTimeout: produceTimeout}, []string{addr}, "turnpike.requests")
			tok := token(t, "acme", "alice")
			if kill != nil {
				if w := s.do(http.MethodPost, messagesURL, tok, `{"content":"first"}`, nil); w.Code != http.StatusAccepted {
					t.Fatalf("first POST: %d %s", w.Code, w.Body)
				}
				kill()
			}

			start := time.Now()
			w := s.do(http.MethodPost, messagesURL, tok, `{"content":"hi"}`, nil)
			elapsed := time.Since(start)
			checkError(t, w, http.StatusServiceUnavailable, server.CodeUnavailable)
			if w.Header().Get("Retry-After") == "" {
				t.Error("no Retry-After")
			}
			// A sanity bound only: the produce timeout plus generous slack.
			if elapsed > produceTimeout+5*time.Second {
				t.Errorf("503 after %v, want about the produce timeout at most", elapsed)
			}
			t.Logf("503 after %v", elapsed)
		})
	}
}
