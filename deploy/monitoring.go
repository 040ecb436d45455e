package deploy

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PrometheusRule is the Prometheus Operator's PrometheusRule
// (monitoring.coreos.com/v1): groups of alerting and recording rules in
// Prometheus's rule file format.
type PrometheusRule struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              PrometheusRuleSpec `json:"spec"`
}

// PrometheusRuleSpec is PrometheusRule.spec.
type PrometheusRuleSpec struct {
	Groups []RuleGroup `json:"groups"`
}

// RuleGroup is a group of rules evaluated together.
type RuleGroup struct {
	Name     string            `json:"name"`
	Interval string            `json:"interval,omitempty"`
	Limit    int               `json:"limit,omitempty"`
	Labels   map[string]string `json:"labels,omitempty"`
	Rules    []Rule            `json:"rules"`
}

// Rule is an alerting rule (Alert set) or a recording rule (Record set).
type Rule struct {
	Record        string            `json:"record,omitempty"`
	Alert         string            `json:"alert,omitempty"`
	Expr          string            `json:"expr"`
	For           string            `json:"for,omitempty"`
	KeepFiringFor string            `json:"keep_firing_for,omitempty"`
	Labels        map[string]string `json:"labels,omitempty"`
	Annotations   map[string]string `json:"annotations,omitempty"`
}

// Validate checks the rules' shape: each group named, each rule an alert
// or a record (not both) with an expression. The expressions' PromQL and
// the templates are checked by Prometheus's own rule loader in the
// deploy/promcheck module (kept out of this one so that Prometheus's
// dependencies stay out of the workspace the root module builds in).
func (r *PrometheusRule) Validate() error {
	var errs []error
	for i, g := range r.Spec.Groups {
		if g.Name == "" {
			errs = append(errs, fmt.Errorf("spec.groups[%d]: no name", i))
		}
		for j, rule := range g.Rules {
			if (rule.Alert == "") == (rule.Record == "") {
				errs = append(errs, fmt.Errorf("group %q rule %d: one of alert and record is required", g.Name, j))
			}
			if strings.TrimSpace(rule.Expr) == "" {
				errs = append(errs, fmt.Errorf("group %q rule %d: no expr", g.Name, j))
			}
		}
	}
	return errors.Join(errs...)
}

// Exprs returns the expressions of every rule, in order.
func (r *PrometheusRule) Exprs() []string {
	var out []string
	for _, g := range r.Spec.Groups {
		for _, rule := range g.Rules {
			out = append(out, rule.Expr)
		}
	}
	return out
}

// grafanaIntervals are the values substituted for Grafana's interval
// variables before a dashboard query is parsed as PromQL.
var grafanaIntervals = strings.NewReplacer("$__rate_interval", "5m", "${__rate_interval}", "5m", "$__interval", "1m", "${__interval}", "1m", "$__range", "1h", "${__range}", "1h")

// DashboardQueries returns the PromQL of every query of a Grafana dashboard
// (every "expr" of a panel's targets, rows' nested panels included), in
// order, with Grafana's interval variables ($__rate_interval,
// $__interval, $__range) replaced by durations so that the result parses
// as PromQL. It fails when the JSON does not decode, when the dashboard
// has no panels, or when a target has no expression.
func DashboardQueries(dashboard []byte) ([]string, error) {
	var d struct {
		Panels []json.RawMessage `json:"panels"`
	}
	if err := json.Unmarshal(dashboard, &d); err != nil {
		return nil, fmt.Errorf("dashboard: %w", err)
	}
	if len(d.Panels) == 0 {
		return nil, errors.New("dashboard: no panels")
	}
	var out []string
	var errs []error
	var walk func(panels []json.RawMessage)
	walk = func(panels []json.RawMessage) {
		for _, raw := range panels {
			var p struct {
				Title   string            `json:"title"`
				Panels  []json.RawMessage `json:"panels"`
				Targets []struct {
					Expr  *string `json:"expr"`
					RefID string  `json:"refId"`
				} `json:"targets"`
			}
			if err := json.Unmarshal(raw, &p); err != nil {
				errs = append(errs, fmt.Errorf("panel: %w", err))
				continue
			}
			for _, t := range p.Targets {
				if t.Expr == nil || strings.TrimSpace(*t.Expr) == "" {
					errs = append(errs, fmt.Errorf("panel %q target %q: no expr", p.Title, t.RefID))
					continue
				}
				out = append(out, grafanaIntervals.Replace(*t.Expr))
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return out, errors.Join(errs...)
}
