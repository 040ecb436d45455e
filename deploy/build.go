package deploy

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// Build runs kustomize (as a library, on the files on disk) on the
// kustomization in dir and decodes its output strictly.
func Build(dir string) ([]Object, error) {
	y, err := BuildYAML(dir)
	if err != nil {
		return nil, err
	}
	return Decode("kustomize build "+filepath.ToSlash(dir), y)
}

// kustomizeMu serializes kustomize runs: kustomize's kyaml/openapi package
// loads its schema into package state without a lock, so two builds at once
// race.
var kustomizeMu sync.Mutex

// BuildYAML runs kustomize on the kustomization in dir and returns its
// output, the documents `kubectl apply -k dir` would send. It is safe for
// concurrent use; concurrent calls run one at a time.
func BuildYAML(dir string) ([]byte, error) {
	kustomizeMu.Lock()
	defer kustomizeMu.Unlock()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	m, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", dir, err)
	}
	y, err := m.AsYaml()
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", dir, err)
	}
	return y, nil
}

// kustomizationFile is the name of a kustomization in its directory.
const kustomizationFile = "kustomization.yaml"

// DecodeTree decodes every YAML file under root strictly: each
// kustomization.yaml into kustomize's Kustomization type, each file that a
// kustomization lists under patches as a patch, and every other file as
// resources. It returns the resources (not the patches), and an error for
// any file that does not decode or that no kustomization uses.
func DecodeTree(root string) ([]Object, error) {
	var files []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && (strings.HasSuffix(p, ".yaml") || strings.HasSuffix(p, ".yml")) {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("walk %s: %w", root, err)
	}
	// Read the kustomizations first: they say what every other file is.
	resources, patches := map[string]bool{}, map[string]bool{}
	var errs []error
	for _, f := range files {
		if filepath.Base(f) != kustomizationFile {
			continue
		}
		k, err := readKustomization(f)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		dir := filepath.Dir(f)
		for _, r := range k.Resources {
			resources[filepath.Join(dir, r)] = true
		}
		for _, p := range k.Patches {
			if p.Path != "" {
				patches[filepath.Join(dir, p.Path)] = true
			}
		}
	}
	var objs []Object
	for _, f := range files {
		if filepath.Base(f) == kustomizationFile {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		name := filepath.ToSlash(f)
		switch {
		case patches[f]:
			_, err = DecodePatch(name, data)
		case resources[f]:
			var o []Object
			o, err = Decode(name, data)
			objs = append(objs, o...)
		default:
			err = fmt.Errorf("%s: no kustomization lists it as a resource or a patch", name)
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	return objs, errors.Join(errs...)
}

// readKustomization decodes a kustomization.yaml strictly.
func readKustomization(path string) (*types.Kustomization, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var k types.Kustomization
	if err := unmarshalYAMLStrict(data, &k); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.ToSlash(path), err)
	}
	if k.Kind != types.KustomizationKind || k.APIVersion != types.KustomizationVersion {
		return nil, fmt.Errorf("%s: want apiVersion %s kind %s", filepath.ToSlash(path), types.KustomizationVersion, types.KustomizationKind)
	}
	return &k, nil
}

// unmarshalYAMLStrict decodes one YAML document strictly into v.
func unmarshalYAMLStrict(data []byte, v any) error {
	docs, err := splitDocuments(data)
	if err != nil {
		return err
	}
	if len(docs) != 1 {
		return fmt.Errorf("want one YAML document, have %d", len(docs))
	}
	j, err := yamlToJSON(bytes.TrimSpace(docs[0]))
	if err != nil {
		return err
	}
	return unmarshalStrict(j, v)
}
