package deploy

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	pmodel "github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// PrometheusRule is the Prometheus Operator's PrometheusRule
// (monitoring.coreos.com/v1): groups of alerting and recording rules in
// Prometheus's rule file format. Validate checks them as `promtool check
// rules` does.
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

// promqlParser parses PromQL as Prometheus does by default.
func promqlParser() parser.Parser { return parser.NewParser(parser.Options{}) }

// Validate parses the groups with Prometheus's own rule loader
// (model/rulefmt, what `promtool check rules` runs): every expression is
// valid PromQL, every rule is an alert or a record with a valid name, the
// groups' names are unique, templates in labels and annotations parse.
func (r *PrometheusRule) Validate() error {
	y, err := yaml.Marshal(r.Spec)
	if err != nil {
		return fmt.Errorf("spec: %w", err)
	}
	_, errs := rulefmt.Parse(y, false, pmodel.LegacyValidation, promqlParser(), slog.New(slog.DiscardHandler))
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

// MetricNames parses each expression as PromQL and returns the metric
// names its selectors read, sorted and without duplicates. A selector
// without a literal name (only a regular expression on __name__, or no
// name) is an error: its metrics could not be checked.
func MetricNames(exprs ...string) ([]string, error) {
	p := promqlParser()
	var names []string
	var errs []error
	for _, e := range exprs {
		ast, err := p.ParseExpr(e)
		if err != nil {
			errs = append(errs, fmt.Errorf("%q: %w", e, err))
			continue
		}
		parser.Inspect(ast, func(n parser.Node, _ []parser.Node) error {
			vs, ok := n.(*parser.VectorSelector)
			if !ok {
				return nil
			}
			name := vs.Name
			for _, m := range vs.LabelMatchers {
				if m.Name == pmodel.MetricNameLabel && m.Type.String() == "=" {
					name = m.Value
				}
			}
			if name == "" {
				errs = append(errs, fmt.Errorf("%q: selector %s names no metric", e, vs))
				return nil
			}
			names = append(names, name)
			return nil
		})
	}
	slices.Sort(names)
	return slices.Compact(names), errors.Join(errs...)
}
