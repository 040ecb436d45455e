package loadgen

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// rssMetric is the process collector's resident memory gauge.
const rssMetric = "process_resident_memory_bytes"

// rssSampler reads the stack's resident memory from its Prometheus
// endpoint. Safe for concurrent use.
type rssSampler struct {
	url  string
	http *http.Client

	mu      sync.Mutex
	samples int // guarded by mu
}

// sample returns the current RSS in bytes.
func (s *rssSampler) sample(ctx context.Context) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url, nil)
	if err != nil {
		return 0, fmt.Errorf("rss: %w", err)
	}
	resp, err := s.http.Do(req)
	if err != nil {
		return 0, fmt.Errorf("rss: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("rss: GET %s: %s", s.url, resp.Status)
	}
	v, err := parseRSS(bufio.NewScanner(resp.Body))
	if err != nil {
		return 0, fmt.Errorf("rss: %s: %w", s.url, err)
	}
	s.mu.Lock()
	s.samples++
	s.mu.Unlock()
	return v, nil
}

func (s *rssSampler) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.samples
}

// parseRSS finds the unlabelled process_resident_memory_bytes sample in a
// Prometheus text exposition.
func parseRSS(sc *bufio.Scanner) (int64, error) {
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, rssMetric)
		if !ok || !strings.HasPrefix(rest, " ") {
			continue
		}
		fields := strings.Fields(rest)
		f, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			return 0, fmt.Errorf("bad %s sample %q", rssMetric, line)
		}
		return int64(f), nil
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, errors.New("no " + rssMetric + " metric")
}

// watch samples every interval until ctx ends and returns the peak; the
// first error ends it (and is returned with the peak so far).
func (s *rssSampler) watch(ctx context.Context, interval time.Duration) (int64, error) {
	var peak int64
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		v, err := s.sample(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return peak, nil
			}
			return peak, err
		}
		peak = max(peak, v)
		select {
		case <-ctx.Done():
			return peak, nil
		case <-t.C:
		}
	}
}
