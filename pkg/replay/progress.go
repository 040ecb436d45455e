package replay

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/schollz/progressbar/v3"
)

// progress shows how far a replay is: on a terminal a progress bar with
// rate and ETA, redrawn in place; otherwise a plain line every interval.
type progress struct {
	w        io.Writer // nil: no display
	tty      bool
	interval time.Duration
	label    string
	total    int64
	now      func() time.Time
}

// run shows done() against total until ctx ends, then once more.
func (p progress) run(ctx context.Context, done func() int64) {
	if p.w == nil {
		return
	}
	if p.tty {
		p.bar(ctx, done)
		return
	}
	start := p.now()
	t := time.NewTicker(p.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			fmt.Fprintln(p.w, p.line(done(), p.now().Sub(start)))
			return
		case <-t.C:
			fmt.Fprintln(p.w, p.line(done(), p.now().Sub(start)))
		}
	}
}

// line is one plain progress line.
func (p progress) line(n int64, elapsed time.Duration) string {
	rate := 0.0
	if elapsed > 0 {
		rate = float64(n) / elapsed.Seconds()
	}
	eta := "?"
	if rate > 0 && p.total >= n {
		eta = time.Duration(float64(p.total-n) / rate * float64(time.Second)).Round(time.Second).String()
	}
	pct := 100.0
	if p.total > 0 {
		pct = 100 * float64(n) / float64(p.total)
	}
	return fmt.Sprintf("%s: %d/%d records (%.1f%%), %.0f records/s, elapsed %v, eta %s",
		p.label, n, p.total, pct, rate, elapsed.Round(time.Second), eta)
}

// bar draws a progress bar (schollz/progressbar) on a terminal.
func (p progress) bar(ctx context.Context, done func() int64) {
	bar := progressbar.NewOptions64(p.total,
		progressbar.OptionSetWriter(p.w),
		progressbar.OptionSetDescription(p.label),
		progressbar.OptionShowCount(),
		progressbar.OptionShowIts(),
		progressbar.OptionSetItsString("rec"),
		progressbar.OptionSetPredictTime(true),
		progressbar.OptionSetElapsedTime(true),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionSetWidth(30),
		progressbar.OptionSetRenderBlankState(true),
	)
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			_ = bar.Set64(done())
			_ = bar.Exit() // leave the last state on screen, end the line
			fmt.Fprintln(p.w)
			return
		case <-t.C:
			_ = bar.Set64(done())
		}
	}
}
