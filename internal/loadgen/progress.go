package loadgen

import (
	"context"
	"fmt"
	"io"
	"time"
)

// progress is the display while a phase runs: on a terminal one line
// rewritten in place, otherwise a plain line every interval.
type progress struct {
	w        io.Writer // nil: no display
	tty      bool
	interval time.Duration
}

func newProgress(c Config) progress {
	p := progress{w: c.Progress, tty: c.ProgressTTY, interval: c.ProgressInterval}
	if p.interval <= 0 {
		p.interval = 5 * time.Second
		if p.tty {
			p.interval = time.Second
		}
	}
	return p
}

// run shows line(elapsed, sinceLast) every interval until ctx ends, then
// once more (ending the terminal line).
func (p progress) run(ctx context.Context, line func(elapsed, sinceLast time.Duration) string) {
	if p.w == nil {
		return
	}
	start := time.Now()
	last := start
	t := time.NewTicker(p.interval)
	defer t.Stop()
	show := func(final bool) {
		now := time.Now()
		s := line(now.Sub(start), now.Sub(last))
		last = now
		switch {
		case p.tty && final:
			fmt.Fprintf(p.w, "\r%-100s\n", s)
		case p.tty:
			fmt.Fprintf(p.w, "\r%-100s", s)
		default:
			fmt.Fprintln(p.w, s)
		}
	}
	for {
		select {
		case <-ctx.Done():
			show(true)
			return
		case <-t.C:
			show(false)
		}
	}
}
