package layout

import (
	"bytes"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/turnpike-dev/turnpike"

// knownChains are the internal packages still reached from pkg/ that
// import pkg/ back, each with the reason it is left and who removes it.
// Every entry is a debt: delete it with the move that pays it.
var knownChains = map[string]string{}

// pkgInfo is what go list says of one package.
type pkgInfo struct {
	ImportPath string
	Dir        string
	GoFiles    []string
	Imports    []string
	Standard   bool
}

// listDeps is `go list -deps -json` of patterns, by import path.
func listDeps(t *testing.T, patterns ...string) map[string]pkgInfo {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list", "-deps", "-json"}, patterns...)...)
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	pkgs := map[string]pkgInfo{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p pkgInfo
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		pkgs[p.ImportPath] = p
	}
	return pkgs
}

func isPkg(path string) bool      { return strings.HasPrefix(path, module+"/pkg/") }
func isInternal(path string) bool { return strings.HasPrefix(path, module+"/internal/") }

// violations returns, for every internal package reached from a pkg/
// package that imports a pkg/ package itself, one chain that shows it:
// pkg/a -> internal/b [-> internal/c ...] -> pkg/d.
func violations(pkgs map[string]pkgInfo) map[string]string {
	out := map[string]string{}
	var roots []string
	for path := range pkgs {
		if isPkg(path) {
			roots = append(roots, path)
		}
	}
	slices.Sort(roots)
	for _, root := range roots {
		// Breadth first through internal packages only: the shortest
		// path from root to each internal package it reaches.
		prev := map[string]string{}
		queue := []string{root}
		for len(queue) > 0 {
			cur := queue[0]
			queue = queue[1:]
			for _, imp := range pkgs[cur].Imports {
				if _, seen := prev[imp]; seen || !isInternal(imp) {
					continue
				}
				prev[imp] = cur
				queue = append(queue, imp)
			}
		}
		for in := range prev {
			for _, imp := range pkgs[in].Imports {
				if !isPkg(imp) {
					continue
				}
				chain := []string{imp, in}
				for p := prev[in]; p != ""; p = prev[p] {
					chain = append(chain, p)
				}
				slices.Reverse(chain)
				s := strings.ReplaceAll(strings.Join(chain, " -> "), module+"/", "")
				if old, ok := out[in]; !ok || len(s) < len(old) || (len(s) == len(old) && s < old) {
					out[in] = s
				}
			}
		}
	}
	return out
}

// No package under pkg/ imports, directly or through other internal
// packages, an internal/ package that imports a pkg/ package back: the
// internal packages the public ones use are leaves (docs/style.md, "The
// public package is the implementation"). Each offending chain is named.
func TestNoPublicPackageReachesAnInternalPackageThatImportsPkg(t *testing.T) {
	t.Parallel()
	found := violations(listDeps(t, "./pkg/..."))
	var names []string
	for in := range found {
		names = append(names, in)
	}
	slices.Sort(names)
	for _, in := range names {
		if why, ok := knownChains[in]; ok {
			t.Logf("known (%s): %s", why, found[in])
			continue
		}
		t.Errorf("a public package reaches an internal package that imports pkg/: %s", found[in])
	}
	for in := range knownChains {
		if _, ok := found[in]; !ok {
			t.Errorf("knownChains lists %s, which no pkg/ package reaches any more: delete the entry", strings.TrimPrefix(in, module+"/"))
		}
	}
}

// internal/publicapi (a package-level hook pkg/worker filled in at init)
// is gone and stays gone.
func TestThereIsNoPublicAPIBackdoor(t *testing.T) {
	t.Parallel()
	for path := range listDeps(t, "./...") {
		if path == module+"/internal/publicapi" {
			t.Errorf("%s is back: public packages reach each other through their exported API", path)
		}
	}
	if m, _ := filepath.Glob("../publicapi"); len(m) != 0 {
		t.Errorf("internal/publicapi exists again: %v", m)
	}
}

// No pkg/ package has package-level mutable function hooks (var X func…,
// or a var whose value is a func literal): hooks are options, passed in.
func TestNoPublicPackageHasAPackageLevelFuncVariable(t *testing.T) {
	t.Parallel()
	for path, p := range listDeps(t, "./pkg/...") {
		if !isPkg(path) {
			continue
		}
		for _, f := range p.GoFiles {
			name := filepath.Join(p.Dir, f)
			file, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			for _, hook := range funcVars(file) {
				t.Errorf("%s: package-level func variable %s", strings.TrimPrefix(path, module+"/"), hook)
			}
		}
	}
}

// funcVars names the package-level variables of file that hold funcs.
func funcVars(file *ast.File) []string {
	var out []string
	for _, d := range file.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.VAR {
			continue
		}
		for _, s := range g.Specs {
			vs := s.(*ast.ValueSpec)
			_, typed := vs.Type.(*ast.FuncType)
			for i, n := range vs.Names {
				lit := false
				if i < len(vs.Values) {
					_, lit = vs.Values[i].(*ast.FuncLit)
				}
				if (typed || lit) && n.Name != "_" {
					out = append(out, fmt.Sprintf("%s (%s)", n.Name, file.Name.Name))
				}
			}
		}
	}
	return out
}

// The service binaries must not link the embedded stand-ins: kfake and
// FerretDB belong to cmd/devstack and tests only.
func TestServiceBinariesDoNotLinkTheEmbeddedServers(t *testing.T) {
	t.Parallel()
	for _, cmd := range []string{"ingest", "worker", "pushgw"} {
		for dep := range listDeps(t, "./cmd/"+cmd) {
			for _, banned := range []string{"github.com/twmb/franz-go/pkg/kfake", module + "/third_party/ferretdb", module + "/internal/embedded",
				module + "/pkg/devstack", module + "/pkg/turnpiketest"} {
				if strings.HasPrefix(dep, banned) {
					t.Errorf("cmd/%s links %s", cmd, dep)
				}
			}
		}
	}
}

// The push gateway writes to no topic: it holds no Kafka writer and calls
// no produce method, so that a client's connection, closed or dropped,
// cannot cancel or change anything (docs/api.md "POST …/cancel": a closed
// WebSocket never cancels anything). e2e's
// TestASubscriptionResumesAcrossDroppedConnectionsWithoutGapOrDuplicate
// shows the behaviour: connections dropped mid-answer, the answer whole
// and complete.
func TestThePushGatewayWritesNoTopic(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("../../pkg/pushgw/*.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("pkg/pushgw's files: %v, %v", files, err)
	}
	// The writers (kafka-go's, the worker's stream writer) and the produce
	// methods of kafka-go and franz-go.
	writers := map[string]bool{"kafka.Writer": true, "kafka.NewWriter": true, "topic.StreamWriter": true}
	produce := map[string]bool{"WriteMessages": true, "Produce": true, "ProduceSync": true, "TryProduce": true}
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(file, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			name := sel.Sel.Name
			if id, ok := sel.X.(*ast.Ident); ok {
				name = id.Name + "." + name
			}
			if writers[name] || produce[sel.Sel.Name] {
				t.Errorf("%s: %s: the push gateway must write to no topic", fset.Position(sel.Pos()), name)
			}
			return true
		})
	}
}
