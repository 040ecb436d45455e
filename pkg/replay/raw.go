package replay

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"
	"golang.org/x/sync/errgroup"
)

// rawResult is a plain read of a selection: kafka-go partition readers
// fetching every record of the plan's ranges and doing nothing with them.
// It is the floor a replay's rate is compared with.
type rawResult struct {
	Records       int64         `json:"records"`
	Bytes         int64         `json:"bytes"`
	Elapsed       time.Duration `json:"elapsed_ns"`
	RecordsPerSec float64       `json:"records_per_sec"`
}

// rawRead reads plan's ranges (from Next) with the replay's own reader
// settings, one reader per partition, concurrently.
func rawRead(ctx context.Context, brokers []string, plan plan) (*rawResult, error) {
	var n, bytes atomic.Int64
	start := time.Now()
	g, gctx := errgroup.WithContext(ctx)
	for _, rg := range plan.Ranges {
		g.Go(func() error {
			return readRange(gctx, brokers, plan.Topic, rg, func(m kafka.Message) error {
				n.Add(1)
				bytes.Add(int64(len(m.Key) + len(m.Value)))
				return nil
			})
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	res := &rawResult{Records: n.Load(), Bytes: bytes.Load(), Elapsed: time.Since(start)}
	if res.Elapsed > 0 {
		res.RecordsPerSec = float64(res.Records) / res.Elapsed.Seconds()
	}
	return res, nil
}
