package replay

import (
	"context"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/segmentio/kafka-go"
	"golang.org/x/sync/errgroup"
)

// dryRun resolves the selection and reads it, counting the records that
// pass the filter per partition and keeping the first Sample of them. It
// writes nothing: no record, no report, no checkpoint.
func dryRun(ctx context.Context, cfg config, d deps) (*summary, error) {
	plan, err := resolve(ctx, cfg, d.Now())
	if err != nil {
		return nil, err
	}
	f := cfg.filter()
	counts := make([]partitionCount, len(plan.Ranges))
	var mu sync.Mutex // guards sample
	var sample []reportLine
	var done atomic.Int64
	var bg sync.WaitGroup
	bgCtx, stopBg := context.WithCancel(context.Background())
	prog := progress{w: d.Progress, tty: d.ProgressTTY, interval: cfg.ProgressInterval, label: "dry run", total: plan.Remaining(), now: d.Now}
	bg.Go(func() { prog.run(bgCtx, done.Load) })
	g, gctx := errgroup.WithContext(ctx)
	for i, rg := range plan.Ranges {
		counts[i].partitionRange = rg
		g.Go(func() error {
			kept := 0
			return readRange(gctx, cfg.Brokers, plan.Topic, rg, func(m kafka.Message) error {
				done.Add(1)
				counts[i].Scanned++
				if !f.match(m.Key) {
					return nil
				}
				counts[i].Selected++
				if kept < cfg.Sample {
					kept++
					mu.Lock()
					sample = append(sample, sampleLine(m, cfg.MaxContentBytes))
					mu.Unlock()
				}
				return nil
			})
		})
	}
	err = g.Wait()
	stopBg()
	bg.Wait()
	if err != nil {
		return nil, err
	}
	sort.Slice(sample, func(i, j int) bool {
		a, b := sample[i].Source, sample[j].Source
		return a.Time.Before(b.Time) || a.Time.Equal(b.Time) && (a.Partition < b.Partition || a.Partition == b.Partition && a.Offset < b.Offset)
	})
	sum := &summary{Mode: cfg.Mode, DryRun: true, Topic: plan.Topic, Partitions: counts, Sample: sample[:min(len(sample), cfg.Sample)]}
	for _, c := range counts {
		sum.Scanned += c.Scanned
		sum.Selected += c.Selected
	}
	return sum, nil
}

// sampleLine describes one record of a dry run.
func sampleLine(m kafka.Message, maxContent int) reportLine {
	at, fromHeaders := origin(m)
	l := reportLine{Source: coordinatesOf(m), Key: string(m.Key)}
	if fromHeaders {
		l.Origin = &at
	}
	d, err := decodeRequest(m, at, maxContent)
	if err != nil {
		l.Status, l.Error = statusInvalid, err.Error()
		return l
	}
	l.RequestID, l.DerivedID, l.Content = d.req.RequestID, d.derived, d.req.Content
	return l
}
