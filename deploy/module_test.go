package deploy

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The four binaries of the image, as the root module builds them.
var imagePackages = []string{"./cmd/ingest", "./cmd/worker", "./cmd/pushgw", "./cmd/turnpike"}

// In the workspace (what `go test ./...` at the root uses), the binaries
// must not link the Kubernetes libraries this module brings.
func TestServiceBinariesLeaveOutKubernetes(t *testing.T) {
	t.Parallel()
	workFile, err := filepath.Abs(filepath.Join(repoRoot, "go.work"))
	if err != nil {
		t.Fatal(err)
	}
	deps := goList(t, repoRoot, []string{"GOWORK=" + workFile}, append([]string{"-deps"}, imagePackages...)...)
	for _, dep := range deps {
		if strings.HasPrefix(dep, "k8s.io/") || strings.HasPrefix(dep, "sigs.k8s.io/") || strings.HasPrefix(dep, "github.com/turnpike-dev/turnpike/deploy") {
			t.Errorf("the binaries link %s", dep)
		}
	}
	if !slices.Contains(deps, "github.com/turnpike-dev/turnpike/pkg/worker") {
		t.Fatalf("go list -deps missed the worker: %v", deps)
	}
}

// The workspace joins this module's requirements to the root module's;
// had it raised the version of a module the root links (go.work pins them
// back), the root's tests would run other code than its go.mod names and
// the image (built with GOWORK=off) ships.
func TestTheWorkspaceKeepsTheRootModulesVersions(t *testing.T) {
	t.Parallel()
	// The module version each package comes from, after replacements.
	format := "{{with .Module}}{{with .Replace}}{{.Path}}@{{.Version}}{{else}}{{.Path}}@{{.Version}}{{end}}{{end}}"
	modules := func(env []string) []string {
		m := goList(t, repoRoot, env, "-e", "-deps", "-test", "-f", format, "./...")
		slices.Sort(m)
		return slices.Compact(m)
	}
	workFile, err := filepath.Abs(filepath.Join(repoRoot, "go.work"))
	if err != nil {
		t.Fatal(err)
	}
	work, alone := modules([]string{"GOWORK=" + workFile}), modules([]string{"GOWORK=off"})
	if len(alone) < 10 {
		t.Fatalf("go list found only %v", alone)
	}
	for _, m := range work {
		if !slices.Contains(alone, m) {
			t.Errorf("in the workspace the root module links %s; on its own it does not", m)
		}
	}
	for _, m := range alone {
		if !slices.Contains(work, m) {
			t.Errorf("on its own the root module links %s; in the workspace it does not", m)
		}
	}
}

func parseRepoFile(t *testing.T, name string) *ast.File {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(repoRoot, name), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// evalDuration evaluates `N * time.Unit` and `time.Unit`.
func evalDuration(e ast.Expr) (time.Duration, bool) {
	units := map[string]time.Duration{"Nanosecond": time.Nanosecond, "Microsecond": time.Microsecond, "Millisecond": time.Millisecond, "Second": time.Second, "Minute": time.Minute, "Hour": time.Hour}
	switch e := e.(type) {
	case *ast.SelectorExpr:
		if x, ok := e.X.(*ast.Ident); ok && x.Name == "time" {
			d, ok := units[e.Sel.Name]
			return d, ok
		}
	case *ast.BinaryExpr:
		if e.Op != token.MUL {
			return 0, false
		}
		lit, ok := e.X.(*ast.BasicLit)
		unit, uok := evalDuration(e.Y)
		if !ok || !uok || lit.Kind != token.INT {
			return 0, false
		}
		n, err := strconv.Atoi(lit.Value)
		return time.Duration(n) * unit, err == nil
	}
	return 0, false
}

// constDuration finds `name = <duration>` among the constants of a file.
func constDuration(t *testing.T, file, name string) time.Duration {
	t.Helper()
	var d time.Duration
	found := false
	ast.Inspect(parseRepoFile(t, file), func(n ast.Node) bool {
		if vs, ok := n.(*ast.ValueSpec); ok {
			for i, id := range vs.Names {
				if id.Name == name && i < len(vs.Values) {
					d, found = evalDuration(vs.Values[i])
				}
			}
		}
		return true
	})
	if !found {
		t.Fatalf("%s: no constant %s of the form N * time.Unit", file, name)
	}
	return d
}

// The grace periods are computed from the services' own shutdown times;
// when the code changes them, the manifests' checks must change with it.
func TestShutdownConstantsMirrorTheCode(t *testing.T) {
	t.Parallel()
	if got := constDuration(t, "internal/server/pprof.go", "ShutdownGrace"); got != serverShutdownGrace {
		t.Errorf("internal/server ShutdownGrace %v, serverShutdownGrace %v", got, serverShutdownGrace)
	}
	closeTime := constDuration(t, "pkg/pushgw/config.go", "DefaultWriteTimeout") + constDuration(t, "pkg/pushgw/client.go", "closeLinger")
	if closeTime != pushgwCloseTime {
		t.Errorf("pkg/pushgw closes a client in up to %v, pushgwCloseTime %v", closeTime, pushgwCloseTime)
	}
	var write time.Duration
	ast.Inspect(parseRepoFile(t, "internal/topic/stream.go"), func(n ast.Node) bool {
		if fd, ok := n.(*ast.FuncDecl); ok && fd.Name.Name != "StreamWriter" {
			return false
		}
		if kv, ok := n.(*ast.KeyValueExpr); ok {
			if k, ok := kv.Key.(*ast.Ident); ok && k.Name == "WriteTimeout" {
				write, _ = evalDuration(kv.Value)
			}
		}
		return true
	})
	if write != kafkaWriteTimeout {
		t.Errorf("internal/topic.StreamWriter WriteTimeout %v, kafkaWriteTimeout %v", write, kafkaWriteTimeout)
	}
}

func TestTopicNamesMirrorInternalTopic(t *testing.T) {
	t.Parallel()
	var suffixes []string
	ast.Inspect(parseRepoFile(t, "internal/topic/topic.go"), func(n ast.Node) bool {
		if fd, ok := n.(*ast.FuncDecl); ok && fd.Name.Name != "NewNames" {
			return false
		}
		if be, ok := n.(*ast.BinaryExpr); ok && be.Op == token.ADD {
			if lit, ok := be.Y.(*ast.BasicLit); ok && lit.Kind == token.STRING {
				s, err := strconv.Unquote(lit.Value)
				if err == nil {
					suffixes = append(suffixes, s)
				}
			}
		}
		return true
	})
	if !slices.Equal(suffixes, topicSuffixes()) {
		t.Errorf("internal/topic.NewNames makes prefix + %q, topicSuffixes %q", suffixes, topicSuffixes())
	}
}
