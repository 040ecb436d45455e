package deploy

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

const (
	dashboardFile      = "k8s/base/grafana/turnpike.json"
	dashboardConfigMap = "turnpike-grafana-dashboard"
	runbookPrefix      = "https://github.com/turnpike-dev/turnpike/blob/main/docs/deploy.md#"
)

// The dashboard ships in every build as the ConfigMap Grafana's sidecar
// loads: labelled grafana_dashboard: "1", holding the file's JSON byte for
// byte, a dashboard with a uid, unique panel ids, and queries that parse
// as PromQL (deploy/promcheck parses them).
func TestTheDashboardShipsInEveryBuild(t *testing.T) {
	t.Parallel()
	want, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{baseDir, devDir, prodDir} {
		cm := get[*corev1.ConfigMap](t, build(t, dir), dashboardConfigMap)
		if cm.Labels["grafana_dashboard"] != "1" {
			t.Errorf("%s: ConfigMap %s labels %v, want grafana_dashboard: \"1\"", dir, cm.Name, cm.Labels)
		}
		if got := cm.Data["turnpike.json"]; got != string(want) {
			t.Errorf("%s: ConfigMap %s's turnpike.json differs from %s", dir, cm.Name, dashboardFile)
		}
	}
	var d struct {
		UID    string `json:"uid"`
		Title  string `json:"title"`
		Panels []struct {
			ID    int    `json:"id"`
			Title string `json:"title"`
		} `json:"panels"`
	}
	dec := json.NewDecoder(bytes.NewReader(want))
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	if d.UID == "" || d.Title == "" {
		t.Errorf("%s: uid %q title %q, want both", dashboardFile, d.UID, d.Title)
	}
	ids := map[int]bool{}
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("%s: panel id %d twice", dashboardFile, p.ID)
		}
		ids[p.ID] = true
	}
	if _, err := DashboardQueries(want); err != nil {
		t.Fatal(err)
	}
}

// The alerts of issue 30 are in the prod overlay's PrometheusRule (its
// PromQL is checked by deploy/promcheck), each with a severity and a runbook_url
// naming a section of docs/deploy.md that exists.
func TestTheAlertsParseAndPointToTheirRunbooks(t *testing.T) {
	t.Parallel()
	rule := get[*PrometheusRule](t, build(t, prodDir), "turnpike")
	if err := rule.Validate(); err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join(repoRoot, "docs", "deploy.md"))
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^#+ +(.+)$`).FindAllStringSubmatch(string(doc), -1) {
		anchors[githubAnchor(m[1])] = true
	}
	var alerts []string
	for _, g := range rule.Spec.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			alerts = append(alerts, r.Alert)
			if r.Labels["severity"] == "" {
				t.Errorf("alert %s: no severity label", r.Alert)
			}
			u := r.Annotations["runbook_url"]
			anchor, ok := strings.CutPrefix(u, runbookPrefix)
			if !ok || !anchors[anchor] {
				t.Errorf("alert %s: runbook_url %q is not a section of docs/deploy.md (%s<anchor>)", r.Alert, u, runbookPrefix)
			}
		}
	}
	for _, want := range []string{"TurnpikeConsumerLagGrowing", "TurnpikeDeadLetters", "TurnpikeFencing", "TurnpikeStoreUnreachable",
		"TurnpikeGatewayCuttingClients", "TurnpikeTimeToFirstTokenBudgetBurn"} {
		if !slices.Contains(alerts, want) {
			t.Errorf("no alert %s among %v", want, alerts)
		}
	}
}

// githubAnchor is the anchor GitHub gives a Markdown heading.
func githubAnchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9'):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// The shape checks catch a rule that is neither alert nor record, and a
// dashboard target without a query; DashboardQueries substitutes Grafana's
// interval variables and walks rows' panels.
func TestMonitoringChecksCatchMalformedRulesAndQueries(t *testing.T) {
	t.Parallel()
	noKind := "apiVersion: monitoring.coreos.com/v1\nkind: PrometheusRule\nmetadata: {name: r}\nspec:\n  groups:\n    - name: g\n      rules:\n        - expr: up\n"
	if _, err := Decode("bad", []byte(noKind)); err == nil {
		t.Error("a rule that is neither alert nor record decoded")
	}
	good := "apiVersion: monitoring.coreos.com/v1\nkind: PrometheusRule\nmetadata: {name: r}\nspec:\n  groups:\n    - name: g\n      rules:\n        - alert: A\n          expr: up == 0\n"
	if _, err := Decode("good", []byte(good)); err != nil {
		t.Errorf("a valid rule: %v", err)
	}
	queries, err := DashboardQueries([]byte(`{"panels":[{"title":"t","targets":[{"refId":"A","expr":"rate(a_total[$__rate_interval])"}]},{"panels":[{"targets":[{"refId":"B","expr":"b"}]}]}]}`))
	if err != nil || !slices.Equal(queries, []string{"rate(a_total[5m])", "b"}) {
		t.Errorf("DashboardQueries = %q, %v", queries, err)
	}
	if _, err := DashboardQueries([]byte(`{"panels":[{"title":"t","targets":[{"refId":"A"}]}]}`)); err == nil {
		t.Error("DashboardQueries accepted a target without expr")
	}
}
