// Command producers writes a Turnpike request to the requests topic from
// Go, with sarama, franz-go or kafka-go, on its conversation's home
// partition, where the worker runs it without moving it first (docs/api.md,
// "Producers").
//
//	go run . -client sarama -brokers localhost:9092 default/dev/c1 "hello there"
//
// Then `go run ./cmd/turnpike watch -since earliest c1` in the Turnpike
// checkout shows the answer. The code to copy is in produce.go.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/turnpike-dev/turnpike/pkg/events"
)

// clients are the -client choices, each placing on the home partition.
var clients = map[string]func(brokers []string, topic string) (producer, error){
	"sarama": func(b []string, t string) (producer, error) { return newSaramaProducer(b, t, saramaConfig()) },
	"sarama-custom": func(b []string, t string) (producer, error) {
		c := saramaConfig()
		c.Producer.Partitioner = saramaCustomMurmur2
		return newSaramaProducer(b, t, c)
	},
	"sarama-manual": func(b []string, t string) (producer, error) { return newSaramaManualProducer(b, t) },
	"franz-go":      func(b []string, t string) (producer, error) { return newFranzProducer(b, t) },
	"kafka-go": func(b []string, t string) (producer, error) {
		return newKafkaGoProducer(b, t, &kafka.Murmur2Balancer{}), nil
	},
}

func main() {
	client := flag.String("client", "franz-go", "sarama, sarama-custom (a custom murmur2 hash, for sarama before v1.50.0), sarama-manual, franz-go or kafka-go")
	brokers := flag.String("brokers", "localhost:9092", "Kafka brokers, comma-separated")
	topic := flag.String("topic", "turnpike.requests", "the requests topic")
	requestID := flag.String("request-id", "", "the request id (default: one derived by the worker)")
	flag.Parse()
	if err := run(*client, strings.Split(*brokers, ","), *topic, *requestID, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "producers:", err)
		os.Exit(1)
	}
}

func run(client string, brokers []string, topic, requestID string, args []string) error {
	newProducer, ok := clients[client]
	if !ok {
		return fmt.Errorf("unknown -client %q", client)
	}
	if len(args) != 2 {
		return fmt.Errorf("usage: producers [flags] TENANT/USER/CONVERSATION CONTENT")
	}
	id, err := events.ParseKey(args[0])
	if err != nil {
		return err
	}
	r, err := newRequest(id, requestID, args[1])
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	p, err := newProducer(brokers, topic)
	if err != nil {
		return err
	}
	at, err := p.Produce(ctx, r)
	if cerr := p.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if at.partition >= 0 {
		fmt.Printf("%s: partition %d offset %d\n", id, at.partition, at.offset)
	} else {
		fmt.Printf("%s: written\n", id)
	}
	return nil
}
