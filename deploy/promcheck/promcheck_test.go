package promcheck

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/turnpike-dev/turnpike/deploy"
)

const (
	dashboardFile = "../k8s/base/grafana/turnpike.json"
	prodDir       = "../k8s/overlays/prod"
	// metricsFile lists every metric the dashboard and the alerts read;
	// e2e's TestTheMonitoringMetricsExistOnARunningStack scrapes a
	// running stack for each.
	metricsFile = "metrics.txt"
)

func prodRule(t *testing.T) *deploy.PrometheusRule {
	t.Helper()
	objs, err := deploy.Build(prodDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range deploy.Of[*deploy.PrometheusRule](objs) {
		if r.Name == "turnpike" {
			return r
		}
	}
	t.Fatalf("%s builds no PrometheusRule turnpike", prodDir)
	return nil
}

// The prod overlay's PrometheusRule loads with Prometheus's rule loader,
// as `promtool check rules` would load its groups.
func TestTheRulesLoadAsPromtoolLoadsThem(t *testing.T) {
	t.Parallel()
	if err := Rules(prodRule(t)); err != nil {
		t.Fatal(err)
	}
}

// monitoringMetrics returns the metric names that the dashboard's queries
// and the prod overlay's rules read.
func monitoringMetrics(t *testing.T) []string {
	t.Helper()
	dashboard, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	queries, err := deploy.DashboardQueries(dashboard)
	if err != nil {
		t.Fatal(err)
	}
	names, err := MetricNames(append(queries, prodRule(t).Exprs()...)...)
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// metrics.txt, which e2e checks against a running stack's /metrics, lists
// exactly the metrics the dashboard and the rules read: a query that names
// a metric the list lacks (a renamed or mistyped one) or that does not
// parse fails here, and a listed name the stack does not serve fails there.
func TestTheMetricsListIsCurrent(t *testing.T) {
	t.Parallel()
	want := monitoringMetrics(t)
	data, err := os.ReadFile(metricsFile)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for l := range strings.Lines(string(data)) {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			got = append(got, l)
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("%s lists\n%s\nthe dashboard and the rules read\n%s\n(write the second list into the file)", metricsFile, strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// The checks catch what they claim to: broken PromQL in a rule or a query,
// a selector without a metric name, a Grafana variable left in a query.
func TestTheChecksCatchBrokenPromQL(t *testing.T) {
	t.Parallel()
	rule := func(expr string) *deploy.PrometheusRule {
		return &deploy.PrometheusRule{Spec: deploy.PrometheusRuleSpec{Groups: []deploy.RuleGroup{{Name: "g", Rules: []deploy.Rule{{Alert: "A", Expr: expr}}}}}}
	}
	if err := Rules(rule("sum(rate(x_total[5m])) > 0")); err != nil {
		t.Fatalf("a valid rule: %v", err)
	}
	for _, bad := range []string{"sum(rate(x_total[5m]) > 0", "rate(x_total)", "x_total >"} {
		if err := Rules(rule(bad)); err == nil {
			t.Errorf("rule expr %q loaded", bad)
		}
	}
	if err := Rules(&deploy.PrometheusRule{Spec: deploy.PrometheusRuleSpec{Groups: []deploy.RuleGroup{{Name: "g", Rules: []deploy.Rule{{Alert: "A", Expr: "up", Annotations: map[string]string{"d": "{{ $value "}}}}}}}); err == nil {
		t.Error("a broken annotation template loaded")
	}
	if names, err := MetricNames("a_total + on(x) b", `sum(rate(c_bucket{le="1"}[5m]))`); err != nil || !slices.Equal(names, []string{"a_total", "b", "c_bucket"}) {
		t.Errorf("MetricNames = %v, %v", names, err)
	}
	for _, bad := range []string{"sum(rate(x_total[5m])", `{__name__=~"turnpike_.*"}`, "rate(a_total[$__rate_interval])"} {
		if names, err := MetricNames(bad); err == nil {
			t.Errorf("MetricNames(%q) = %v, want an error", bad, names)
		}
	}
}
