// Package promcheck checks Turnpike's monitoring kit with Prometheus's own
// code: the PrometheusRule's groups load as `promtool check rules` loads
// them (model/rulefmt: valid PromQL, alert or record names, templates), and
// the dashboard's queries and the rules' expressions parse
// (promql/parser) into the metric names they read.
//
// It is a Go module of its own, outside go.work: Prometheus's module asks
// for newer versions of modules the root module links (grpc, x/net,
// prometheus/common…), and in the workspace they would replace the root
// module's (deploy's TestTheWorkspaceKeepsTheRootModulesVersions). Test it
// from its directory: `GOWORK=off go test ./...` (.ci/run does).
//
// Its functions keep no state and are safe for concurrent use.
package promcheck

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"

	pmodel "github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"sigs.k8s.io/yaml"

	"github.com/turnpike-dev/turnpike/deploy"
)

func newParser() parser.Parser { return parser.NewParser(parser.Options{}) }

// Rules loads the rule's groups with Prometheus's rule loader, as
// `promtool check rules` does, and returns every error it reports.
func Rules(r *deploy.PrometheusRule) error {
	y, err := yaml.Marshal(r.Spec)
	if err != nil {
		return fmt.Errorf("spec: %w", err)
	}
	_, errs := rulefmt.Parse(y, false, pmodel.LegacyValidation, newParser(), slog.New(slog.DiscardHandler))
	return errors.Join(errs...)
}

// MetricNames parses each expression as PromQL and returns the metric
// names its selectors read, sorted and without duplicates. A selector
// without a literal name (only a regular expression on __name__) is an
// error: its metrics could not be checked.
func MetricNames(exprs ...string) ([]string, error) {
	p := newParser()
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
				if m.Name == pmodel.MetricNameLabel && m.Type == labels.MatchEqual {
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
