package layout

import (
	"bytes"
	"encoding/json"
	"fmt"
	"go/importer"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// No package under pkg/ exposes a type of an internal/ package: not in an
// exported function's or method's signature, an exported variable or
// constant, an exported struct field or embedded type, an interface's
// method, a type parameter's constraint or an alias. A user of the public
// packages (examples/orders, a module of its own) could name no such type,
// so it would be API that cannot be used, nor kept compatible (docs/api.md
// "Go packages (compatibility surface)"). The check reads the packages'
// export data, as the compiler does, and walks every exported name's type.
func TestNoPublicPackageExposesAnInternalType(t *testing.T) {
	t.Parallel()
	leaks, err := internalTypesExposed("./pkg/...")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range leaks {
		t.Error(l)
	}
}

// internalTypesExposed lists, for the public packages of patterns, each
// exported name whose type reaches a named type of an internal package, as
// "pkg/x.Name: internal/y.T".
func internalTypesExposed(patterns ...string) ([]string, error) {
	cmd := exec.Command("go", append([]string{"list", "-trimpath", "-export", "-deps", "-json=ImportPath,Export"}, patterns...)...)
	cmd.Dir = "../.."
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list -export: %v: %s", err, stderr.String())
	}
	exports := map[string]string{}
	var public []string
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p struct{ ImportPath, Export string }
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			return nil, fmt.Errorf("go list output: %v", err)
		}
		exports[p.ImportPath] = p.Export
		if isPkg(p.ImportPath) {
			public = append(public, p.ImportPath)
		}
	}
	slices.Sort(public)
	imp := importer.ForCompiler(token.NewFileSet(), "gc", func(path string) (io.ReadCloser, error) {
		f, ok := exports[path]
		if !ok || f == "" {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(f)
	})
	var leaks []string
	for _, path := range public {
		pkg, err := imp.Import(path)
		if err != nil {
			return nil, fmt.Errorf("import %s: %v", path, err)
		}
		w := exposure{seen: map[types.Type]bool{}}
		scope := pkg.Scope()
		for _, name := range scope.Names() {
			obj := scope.Lookup(name)
			if !obj.Exported() {
				continue
			}
			w.at = strings.TrimPrefix(path, module+"/") + "." + name
			if tn, ok := obj.(*types.TypeName); ok && tn.IsAlias() {
				w.typ(types.Unalias(tn.Type()))
			} else {
				w.typ(obj.Type())
			}
		}
		leaks = append(leaks, w.leaks...)
	}
	return leaks, nil
}

// exposure walks the types an exported name makes visible.
type exposure struct {
	at    string // the exported name being walked, for the report
	seen  map[types.Type]bool
	leaks []string
}

func (w *exposure) typ(t types.Type) {
	if t == nil || w.seen[t] {
		return
	}
	w.seen[t] = true
	switch t := t.(type) {
	case *types.Alias:
		w.typ(types.Unalias(t))
	case *types.Named:
		obj := t.Obj()
		if obj.Pkg() != nil && isInternal(obj.Pkg().Path()) {
			w.leaks = append(w.leaks, fmt.Sprintf("%s: %s.%s", w.at, strings.TrimPrefix(obj.Pkg().Path(), module+"/"), obj.Name()))
			return
		}
		for i := 0; i < t.TypeArgs().Len(); i++ {
			w.typ(t.TypeArgs().At(i))
		}
		// Only the public packages' own types are walked further: another
		// module's type (eino's, the driver's) is that module's surface.
		if obj.Pkg() == nil || !isPkg(obj.Pkg().Path()) {
			return
		}
		if tp := t.TypeParams(); tp != nil {
			for i := 0; i < tp.Len(); i++ {
				w.typ(tp.At(i).Constraint())
			}
		}
		for i := 0; i < t.NumMethods(); i++ {
			if m := t.Method(i); m.Exported() {
				w.typ(m.Type())
			}
		}
		w.typ(t.Underlying())
	case *types.Struct:
		for i := 0; i < t.NumFields(); i++ {
			if f := t.Field(i); f.Exported() || f.Embedded() {
				w.typ(f.Type())
			}
		}
	case *types.Interface:
		for i := 0; i < t.NumExplicitMethods(); i++ {
			if m := t.ExplicitMethod(i); m.Exported() {
				w.typ(m.Type())
			}
		}
		for i := 0; i < t.NumEmbeddeds(); i++ {
			w.typ(t.EmbeddedType(i))
		}
	case *types.Union:
		for i := 0; i < t.Len(); i++ {
			w.typ(t.Term(i).Type())
		}
	case *types.Signature:
		if tp := t.TypeParams(); tp != nil {
			for i := 0; i < tp.Len(); i++ {
				w.typ(tp.At(i).Constraint())
			}
		}
		w.tuple(t.Params())
		w.tuple(t.Results())
	case *types.Pointer:
		w.typ(t.Elem())
	case *types.Slice:
		w.typ(t.Elem())
	case *types.Array:
		w.typ(t.Elem())
	case *types.Map:
		w.typ(t.Key())
		w.typ(t.Elem())
	case *types.Chan:
		w.typ(t.Elem())
	case *types.TypeParam:
		w.typ(t.Constraint())
	}
}

func (w *exposure) tuple(t *types.Tuple) {
	for i := 0; i < t.Len(); i++ {
		w.typ(t.At(i).Type())
	}
}
