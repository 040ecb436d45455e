package topic

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"
)

// tailRetry is the pause after a failed read before the next one.
const tailRetry = 200 * time.Millisecond

// Tail calls handle with every record written to topic from now on, from
// every partition (no consumer group: nothing is committed), until ctx
// ends. handle is called from one goroutine per partition. A failed read is
// reported to onErr (if set) and retried; Tail returns an error only when it
// cannot start, and then it has started nothing. A ctx that ends while Tail
// is still starting (listing the partitions) is a stop like any other: Tail
// returns nil. It owns its readers and waits for them.
func Tail(ctx context.Context, brokers []string, topic string, handle func(kafka.Message), onErr func(error)) error {
	parts, err := Partitions(ctx, brokers, topic)
	if err != nil {
		if ctx.Err() != nil {
			return nil // stopped, not failed: "metadata <topic>: context canceled" is no error
		}
		return err
	}
	readers := make([]*kafka.Reader, 0, len(parts))
	closeAll := func() {
		for _, r := range readers {
			r.Close()
		}
	}
	for _, p := range parts {
		r, err := PartitionReader(brokers, topic, p, LiveMaxWait, nil)
		if err != nil {
			closeAll()
			return err
		}
		readers = append(readers, r)
		if err := r.SetOffset(kafka.LastOffset); err != nil {
			closeAll()
			return err
		}
	}
	var wg sync.WaitGroup
	for _, r := range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer r.Close()
			for {
				m, err := r.ReadMessage(ctx)
				if err == nil {
					handle(m)
					continue
				}
				if ctx.Err() != nil || errors.Is(err, io.EOF) {
					return
				}
				if onErr != nil {
					onErr(err)
				}
				t := time.NewTimer(tailRetry)
				select {
				case <-t.C:
				case <-ctx.Done():
					t.Stop()
					return
				}
			}
		}()
	}
	wg.Wait()
	return nil
}
