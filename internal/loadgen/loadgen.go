package loadgen

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/turnpike-dev/turnpike/internal/streamurl"
)

// rssInterval is how often RSS is sampled under load.
const rssInterval = time.Second

// Run fills in the stream URL when it is unset, validates cfg, then runs the floor and/or the pipeline (floor first)
// and returns what they measured and found. A run that could not start
// returns a nil Result. When ctx ends or a phase cannot set up, Run
// returns the Result so far with the error.
func Run(ctx context.Context, cfg Config, log *slog.Logger) (*Result, error) {
	if cfg.StreamURL == "" && cfg.Mode != ModeFloor {
		// An ingest URL Discover cannot use is Validate's to report.
		if s, err := streamurl.Discover(ctx, http.DefaultClient, cfg.IngestURL); err == nil {
			cfg.StreamURL = s
		}
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("loadgen config: %w", err)
	}
	runID, err := newRunID(time.Now())
	if err != nil {
		return nil, err
	}
	res := &Result{RunID: runID, Started: time.Now().UTC().Truncate(time.Millisecond), Config: cfg}
	var violations, errs tally
	defer func() {
		res.Violations, res.Errors = violations.snapshot(), errs.snapshot()
	}()

	var rss *rssSampler
	if u := cfg.metricsURL(); u != "" {
		rss = &rssSampler{url: u, http: &http.Client{Timeout: 5 * time.Second}}
		res.RSS.URL = u
		idle, err := rss.sample(ctx)
		if err != nil {
			res.Notes = append(res.Notes, fmt.Sprintf("RSS not sampled: %v", err))
			rss = nil
		}
		res.RSS.IdleBytes = idle
	}
	// phase runs f while sampling RSS into *peak.
	phase := func(peak *int64, f func() error) error {
		if rss == nil {
			return f()
		}
		sctx, stop := context.WithCancel(ctx)
		var wg sync.WaitGroup
		var serr error
		wg.Go(func() { *peak, serr = rss.watch(sctx, rssInterval) })
		err := f()
		stop()
		wg.Wait()
		if serr != nil {
			res.Notes = append(res.Notes, fmt.Sprintf("RSS sampling stopped: %v", serr))
		}
		res.RSS.Samples = rss.count()
		return err
	}

	if cfg.Mode == ModeFloor || cfg.Mode == ModeBoth {
		err := phase(&res.RSS.FloorPeakBytes, func() error {
			var err error
			res.Floor, err = runFloor(ctx, cfg, runID, log, &violations, &errs)
			return err
		})
		if err != nil {
			return res, fmt.Errorf("floor: %w", err)
		}
	}
	if cfg.Mode == ModePipeline || cfg.Mode == ModeBoth {
		err := phase(&res.RSS.PipelinePeakBytes, func() error {
			var loaded sync.WaitGroup
			var lerr error
			if cfg.LoadedFloor > 0 {
				lcfg := cfg
				lcfg.Conversations, lcfg.ConversationPrefix, lcfg.Progress = cfg.LoadedFloor, cfg.ConversationPrefix+"-loaded", nil
				loaded.Go(func() { res.LoadedFloor, lerr = runFloor(ctx, lcfg, runID, log, &violations, &errs) })
			}
			var err error
			res.Pipeline, err = runPipeline(ctx, cfg, runID, &violations, &errs, &res.Notes)
			loaded.Wait()
			if lerr != nil {
				err = errors.Join(err, fmt.Errorf("loaded floor: %w", lerr))
			}
			return err
		})
		if err != nil {
			return res, fmt.Errorf("pipeline: %w", err)
		}
	}
	if f, p := res.Floor, res.Pipeline; f != nil && p != nil && f.Latency.P50 > 0 && f.Latency.P99 > 0 {
		res.Ratios = &Ratios{
			P50:           float64(p.TokenLatency.P50) / float64(f.Latency.P50),
			P99:           float64(p.TokenLatency.P99) / float64(f.Latency.P99),
			FirstTokenP99: float64(p.FirstTokenLatency.P99) / float64(f.Latency.P99),
		}
		if p.firstToken != nil {
			p.FirstTokenSlow = p.firstToken.CountAbove(SlowFactor * f.Latency.P50)
		}
	}
	if f, p := res.LoadedFloor, res.Pipeline; f != nil && p != nil && f.Latency.P50 > 0 && f.Latency.P99 > 0 {
		if res.Ratios == nil {
			res.Ratios = &Ratios{}
		}
		res.Ratios.LoadedP50 = float64(p.TokenLatency.P50) / float64(f.Latency.P50)
		res.Ratios.LoadedP99 = float64(p.TokenLatency.P99) / float64(f.Latency.P99)
	}
	return res, nil
}

// newRunID returns a run id like 20260102t150405-a1b2c3: the time and 24
// random bits, so reruns never reuse a conversation name.
func newRunID(now time.Time) (string, error) {
	var b [3]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("run id: %w", err)
	}
	return now.UTC().Format("20060102t150405") + "-" + hex.EncodeToString(b[:]), nil
}
