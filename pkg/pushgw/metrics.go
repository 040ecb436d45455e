package pushgw

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Reasons of turnpike_pushgw_rejected_total.
const (
	rejectOrigin        = "origin"
	rejectConnectRate   = "connect_rate"
	rejectSubscribeRate = "subscribe_rate"
)

// Transports of turnpike_pushgw_client_write_lag_seconds.
const (
	transportWebSocket = "websocket"
	transportSSE       = "sse"
)

// metrics are the gateway's Prometheus series, all named turnpike_pushgw_*.
// Every series exists from the start (labelled ones with each label value).
type metrics struct {
	connections     prometheus.Gauge
	sseConnections  prometheus.Gauge
	subscriptions   prometheus.Gauge
	eventsOut       prometheus.Counter
	framesDropped   prometheus.Counter
	slowDisconnects prometheus.Counter
	badRecords      prometheus.Counter
	skippedRecords  prometheus.Counter
	liveReaders     prometheus.Gauge
	partitions      prometheus.Gauge
	liveRecords     prometheus.Counter
	liveBytes       prometheus.Counter
	shardRedirects  prometheus.Counter
	replays         prometheus.Counter
	ringReplays     prometheus.Counter
	rejected        *prometheus.CounterVec
	fanout          prometheus.Histogram
	deliveryLag     prometheus.Histogram
	clientWriteLag  *prometheus.HistogramVec
}

// newMetrics creates the series and registers them on reg (nil: not registered).
func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	gauge := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "turnpike", Subsystem: "pushgw", Name: name, Help: help})
	}
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Namespace: "turnpike", Subsystem: "pushgw", Name: name, Help: help})
	}
	histogram := func(name, help string, buckets []float64) prometheus.Histogram {
		return prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "turnpike", Subsystem: "pushgw", Name: name, Help: help, Buckets: buckets})
	}
	m := &metrics{
		connections:     gauge("connections", "Open connections: WebSocket and Server-Sent Events streams."),
		sseConnections:  gauge("sse_connections", "Open Server-Sent Events streams (counted in connections too)."),
		subscriptions:   gauge("subscriptions", "Active subscriptions, replaying or live."),
		eventsOut:       counter("events_out_total", "Event frames queued to clients, live and replayed."),
		framesDropped:   counter("frames_dropped_total", "Frames discarded unsent because their client was closed or too slow."),
		slowDisconnects: counter("slow_disconnects_total", "Clients closed with 4008 because their queue or replay buffer was full."),
		badRecords:      counter("bad_records_total", "Stream records skipped for a bad key or value."),
		skippedRecords:  counter("skipped_records_total", "Stream offsets the live readers never saw (deleted by retention before they were read)."),
		partitions:      gauge("stream_partitions", "The stream topic's partition count this replica places conversations by (read at start, then every partition watch interval)."),
		liveReaders:     gauge("live_readers", "Partitions whose live reader is open: those with subscribers here, and those whose last one left less than the reader idle time ago."),
		liveRecords:     counter("live_records_total", "Stream records fetched by the live readers."),
		liveBytes:       counter("live_bytes_total", "Key and value bytes of the stream records fetched by the live readers."),
		shardRedirects:  counter("shard_redirects_total", "Event stream requests redirected (307) to carry their conversation's shard hint: clients or an edge not routing by shard."),
		replays:         counter("replays_total", "Replays that read the stream topic from Kafka."),
		ringReplays:     counter("ring_replays_total", "Replays served from the in-memory ring without reading Kafka."),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "turnpike", Subsystem: "pushgw", Name: "rejected_total",
			Help: "Upgrades, event streams and subscribes refused: origin (403), connect_rate (429), subscribe_rate (error frame; 429 for an event stream)."}, []string{"reason"}),
		fanout: histogram("fanout_seconds", "From a live record's arrival to its frame queued to every recipient, for records with recipients.",
			prometheus.ExponentialBuckets(1e-6, 4, 10)),
		deliveryLag: histogram("delivery_lag_seconds", "From a live record's Kafka timestamp to its frame queued to every recipient (includes clock skew between hosts).",
			prometheus.ExponentialBuckets(0.0005, 2, 14)),
		clientWriteLag: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "turnpike", Subsystem: "pushgw", Name: "client_write_lag_seconds",
			Help:    "From a live record's frame queued to a client by the dispatch to its write on the client's socket (WebSocket) or its flush (Server-Sent Events), by transport.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16)}, []string{"transport"}),
	}
	for _, tr := range []string{transportWebSocket, transportSSE} {
		m.clientWriteLag.WithLabelValues(tr)
	}
	for _, r := range []string{rejectOrigin, rejectConnectRate, rejectSubscribeRate} {
		m.rejected.WithLabelValues(r)
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.connections, m.sseConnections, m.subscriptions, m.eventsOut, m.framesDropped, m.slowDisconnects, m.badRecords,
		m.skippedRecords, m.liveReaders, m.partitions, m.liveRecords, m.liveBytes, m.shardRedirects, m.replays, m.ringReplays, m.rejected, m.fanout, m.deliveryLag, m.clientWriteLag} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register metrics: %w", err)
		}
	}
	return m, nil
}
