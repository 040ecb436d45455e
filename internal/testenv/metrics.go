package testenv

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// MetricValue is the value of the gauge or counter name gathered from g
// (its first series, which for an unlabelled metric is its only one). It
// fails t when g has no such metric, so that a renamed metric cannot pass
// for a zero.
func MetricValue(t testing.TB, g prometheus.Gatherer, name string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name || len(mf.GetMetric()) == 0 {
			continue
		}
		m := mf.GetMetric()[0]
		if gauge := m.GetGauge(); gauge != nil {
			return gauge.GetValue()
		}
		return m.GetCounter().GetValue()
	}
	t.Fatalf("metric %s not registered", name)
	return 0
}
