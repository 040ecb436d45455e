package pushgw

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the gateway's Prometheus series, all named turnpike_pushgw_*.
// Every series is unlabelled, so each shows in /metrics from the start.
type metrics struct {
	connections     prometheus.Gauge
	subscriptions   prometheus.Gauge
	eventsOut       prometheus.Counter
	framesDropped   prometheus.Counter
	slowDisconnects prometheus.Counter
	badRecords      prometheus.Counter
	replays         prometheus.Counter
}

// newMetrics creates the series and registers them on reg (nil: not registered).
func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	gauge := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "turnpike", Subsystem: "pushgw", Name: name, Help: help})
	}
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Namespace: "turnpike", Subsystem: "pushgw", Name: name, Help: help})
	}
	m := &metrics{
		connections:     gauge("connections", "Open WebSocket connections."),
		subscriptions:   gauge("subscriptions", "Active subscriptions, replaying or live."),
		eventsOut:       counter("events_out_total", "Event frames queued to clients, live and replayed."),
		framesDropped:   counter("frames_dropped_total", "Frames discarded unsent because their client was closed."),
		slowDisconnects: counter("slow_disconnects_total", "Clients closed with 4008 because their queue or replay buffer was full."),
		badRecords:      counter("bad_records_total", "Stream records skipped for a bad key or value."),
		replays:         counter("replays_total", "Replays that read the stream topic: subscriptions with since and a non-empty range."),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.connections, m.subscriptions, m.eventsOut, m.framesDropped, m.slowDisconnects, m.badRecords, m.replays} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register metrics: %w", err)
		}
	}
	return m, nil
}
